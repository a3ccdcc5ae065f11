"""Names shared by leakpipe's MLflow runs: the experiment, tags and artifact names."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_EXPERIMENT = "leakpipe"
# MLflow 3 opens an experiment in one of two modes: GenAI (traces overview, agent versions) or
# model training (runs, models). The experiment's kind tag records which one this is; its value
# for training is MLflow's "custom_model_development" (the UI's own "Model training" choice).
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# MLflow 3.17's UI takes the mode from the browser (a stored choice, GenAI until changed) and
# from this URL parameter, which wins over it: the URLs leakpipe prints carry it.
UI_MODE_QUERY = "workflowType=machine_learning"
TAG_STAGE = "leakpipe.stage"
TAG_DATA = "leakpipe.data_checksum"   # the split files a run read or wrote: split_digests
DVC_ENV_TAGS = {"DVC_EXP_NAME": "dvc.exp_name", "DVC_EXP_BASELINE_REV": "dvc.baseline_rev"}
TAG_GIT_COMMIT = "mlflow.source.git.commit"
MODEL_NAME = "model"                 # artifact name of a network logged with log_model
SYSTEM_SAMPLES_BEFORE_LOGGING = 1    # MLflow system metrics: log every sample
TAG_MODEL_SHA256 = "leakpipe.model_sha256"   # sha256 of models/model.pt (train and evaluate)
TAG_TRAIN_RUN = "leakpipe.train_run_id"      # on an evaluate run: the train run of its model
TAG_UNVALIDATED = "leakpipe.unvalidated"     # "true": the stage ran with --unvalidated
TAG_DETECTOR_URI = "leakpipe.detector_uri"   # models:/ URI of a logged detector file
TAG_ERROR = "leakpipe.error"                 # on a FAILED run: the one-line error that ended it
ERROR_TAG_CHARS = 500                        # longer error lines are cut (MLflow allows 8000)
DETECTOR_SUFFIX = ".pt"
RUN_NAME_TAG = "mlflow.runName"
PARENT_RUN_TAG = "mlflow.parentRunId"        # the UI nests a run under this run
DESCRIPTION_TAG = "mlflow.note.content"      # the run's description in the UI
PARAMS_DIGEST_CHARS = 7
DATASET_DIGEST_CHARS = 12   # a run's MLflow dataset shows the file's sha256 cut to this
DATASET_CONTEXT = {"train": "training", "val": "validation", "test": "testing"}

# The model registry: ship registers the detector it ships (any kind) as a new version of the
# registered model named by `evaluate.registered_model` and points ALIAS_CANDIDATE at it;
# `leakpipe promote` moves ALIAS_CHAMPION to the candidate when the rule allows it.
ALIAS_CANDIDATE = "candidate"
ALIAS_CHAMPION = "champion"
# `leakpipe adapt` registers its field-adapted detector as a version of the same model, tagged
# TAG_ADAPTED, with the alias ALIAS_ADAPTED (never candidate: it is not scored on test).
ALIAS_ADAPTED = "adapted"
TAG_ADAPTED = "leakpipe.adapted"                 # on a version: "true" for an adapted detector
TAG_ADAPT_RUN = "leakpipe.adapt_run_id"          # on a version: the adapt run that made it
TAG_SEED_SHA256 = "leakpipe.seed_detector_sha256"  # on a version: the detector adapt started from
TAG_EVALUATE_RUN = "leakpipe.evaluate_run_id"    # on a version: the evaluate run that made it
TAG_SHIP_RUN = "leakpipe.ship_run_id"            # on a version: the ship run that registered it
TAG_DETECTOR_KIND = "leakpipe.detector_kind"     # on a version: cnn | logger_stats | ...
TAG_DETECTOR_SHA256 = "leakpipe.detector_sha256"  # detector file sha256 (evaluate run, version)
TAG_TEST_F1 = "leakpipe.test_clip_f1"            # on a version: its test clip F1 at evaluate
TAG_TEST_RECORDING_F1 = "leakpipe.test_recording_f1"  # on a version: ship's test recording F1
TAG_TEST_SHA256 = "leakpipe.test_sha256"         # on a version: the test split it was scored on
TAG_PROMOTE_RUN = "leakpipe.promote_run_id"      # on a version: the promote run that crowned it
TAG_REGISTERED_VERSION = "leakpipe.registered_version"  # on a ship / adapt run: "<name>/<version>"
TAG_SELECTED_KIND = "leakpipe.selected_kind"     # on a crossval / cv run: the kind it selected
TAG_CV_SOURCE = "leakpipe.cv_source"             # on a `leakpipe cv --source` run: that source
VERSION_SOURCE_TAGS = (TAG_GIT_COMMIT, "dvc.exp_name", "dvc.baseline_rev", TAG_UNVALIDATED)


def split_digests(sha256: Mapping[str, str]) -> str:
    """The ``TAG_DATA`` value: each split file's sha256 named with its split, ``test:<sha256>,
    train:<sha256>,val:<sha256>`` (sorted by split).

    One digest per file everywhere: the sha256 `build` reports, `validate` stamps and every
    consumer checks; a run's MLflow dataset of the split shows the same hash's first
    ``DATASET_DIGEST_CHARS`` hex digits (MLflow caps a dataset digest at 36 characters), so
    ``tags.`leakpipe.data_checksum` LIKE '%train:<those digits>%'`` finds every run on a file.
    """
    return ",".join(f"{split}:{sha256[split]}" for split in sorted(sha256))
