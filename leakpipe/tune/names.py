"""Names that must never drift: trial / study attributes in the storage, MLflow tags, metrics.

Workers on other machines and later runs read what these name, so they live in one place.
"""

from __future__ import annotations

# `leakpipe tune dashboard`: this machine only unless told otherwise.
DASHBOARD_HOST = "127.0.0.1"
DASHBOARD_PORT = 8080

# Trial user attributes (in the Optuna storage).
ATTR_VALUES = "values"              # the "section.key" values the trial trained with
ATTR_RUN_ID = "mlflow_run_id"       # the trial's MLflow child run
ATTR_REASON = "fail_reason"         # why it failed or was pruned
ATTR_WORKER = "worker"              # {"host", "pid", "started"} of the worker running it
# Study user attribute.
ATTR_PARENT_RUN = "mlflow_parent_run_id"  # the study's MLflow parent run

# MLflow tags of the parent and child runs.
TAG_STUDY = "optuna.study"
TAG_STORAGE = "optuna.storage"
TAG_TRIAL = "optuna.trial"
TAG_STATE = "optuna.state"
TAG_PRUNED_AT = "optuna.pruned_at_step"   # the epoch index (0-based) reported last
TAG_REASON = "optuna.reason"              # why it failed or was pruned
VALUE_METRIC = "tune/value"

# Objectives and the direction each is optimised in when tune.direction is auto.
OBJECTIVE_DIRECTIONS = {"val/clip_f1": "maximize", "val/seg_f1": "maximize",
                        "val/loss": "minimize"}

# `train` keys every trial takes from `tune` instead (tune.epochs, tune.compile): the study name
# and the tune stage do not depend on their `train` values (dvc.yaml lists tune's train keys
# without them; tests/test_dvc_deps.py keeps that list complete).
TRIAL_OVERRIDES = ("epochs", "compile")
