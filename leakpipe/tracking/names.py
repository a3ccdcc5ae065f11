"""Names shared by leakpipe's MLflow runs: the experiment, tags and artifact names."""

from __future__ import annotations

DEFAULT_EXPERIMENT = "leakpipe"
TAG_STAGE = "leakpipe.stage"
TAG_DATA = "leakpipe.data_checksum"
DVC_ENV_TAGS = {"DVC_EXP_NAME": "dvc.exp_name", "DVC_EXP_BASELINE_REV": "dvc.baseline_rev"}
TAG_GIT_COMMIT = "mlflow.source.git.commit"
MODEL_NAME = "model"                 # artifact name of a network logged with log_model
SYSTEM_SAMPLES_BEFORE_LOGGING = 1    # MLflow system metrics: log every sample
TAG_MODEL_SHA256 = "leakpipe.model_sha256"   # sha256 of models/model.pt (train and evaluate)
TAG_TRAIN_RUN = "leakpipe.train_run_id"      # on an evaluate run: the train run of its model
TAG_UNVALIDATED = "leakpipe.unvalidated"     # "true": the stage ran with --unvalidated
TAG_DETECTOR_URI = "leakpipe.detector_uri"   # models:/ URI of a logged detector file
DETECTOR_SUFFIX = ".pt"
RUN_NAME_TAG = "mlflow.runName"
DESCRIPTION_TAG = "mlflow.note.content"      # the run's description in the UI
PARAMS_DIGEST_CHARS = 7
DATASET_DIGEST_CHARS = 12
DATASET_CONTEXT = {"train": "training", "val": "validation", "test": "testing"}
