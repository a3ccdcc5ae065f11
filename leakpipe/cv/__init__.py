"""Grouped cross-validation: the CNN and every baseline on the same site folds.

One split of a few dozen sites cannot rank methods: which sites land in test decides more than
the method does. Cross-validation puts every site in exactly one test fold, so every recording
is scored once by a model that never saw its site, and the pooled out-of-fold figures rest on
all of them.

- ``folds``: pure fold and inner-val assignment over groups, stratified by class;
- ``data``: the recordings of the built splits as one table, and one fold's split files;
- ``methods``: one fold's CNN (train's ``fit()``, evaluate's rules) and baselines;
- ``report``: pooled figures with site-bootstrap intervals, per-fold values, the paired
  difference, the out-of-fold table and the plot;
- ``results``: one fold's record, its place in the work folder, the plan a fold uses;
- ``stage``: the resumable orchestration, outputs and MLflow runs;
- ``dispatch`` and ``tasks``: the folds on a Dask cluster, a task per fold and method group
  (``tasks``: what a worker runs; ``dispatch``: the driver, the only writer).
"""
