"""Stage `ship`: the detector of the kind grouped cross-validation selected.

- ``stage``: which kind (``detector.method``, cv's ``selected``), the detector file, the report;
- ``stats_evaluation``: a `logger_stats` detector fitted on train, chosen on val, judged on test;
- ``registration``: the shipped detector's model card, served MLflow model and registered
  version (the registry's ``candidate``, any kind).
"""
