"""Hyper-parameter search (the `tune` stage): an Optuna study over the train stage's ``fit()``.

space.py          `tune.space` -> Optuna suggestions -> one (model, train) variant per trial
objective.py      one trial: fit() with per-epoch reporting and pruning; its MLflow child run
study.py          storage (journal file or RDB URL), study name, sampler and pruner
trial_budget.py   the exact trial budget across workers; trials whose worker died
workers.py        the worker loop, heartbeats, local worker processes, the progress bar
study_results.py  counts, the best trial, tuning/best_params.yaml, metrics/tune.json
plots.py          optimisation history, parallel coordinates, importances (MLflow artifacts)
apply.py          `leakpipe tune apply`: best values into params.yaml, comments kept
dashboard.py      `leakpipe tune dashboard`: optuna-dashboard on the study's storage
driver.py         the stage (run_study) and a joining worker (join_study)
names.py          trial / study attributes, MLflow tags, objectives: the names that must not drift
"""
