"""The MLflow adapter: the one package in leakpipe that knows MLflow.

Tracking URI: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo root>/mlruns/mlflow.db``
with artifacts under ``<repo root>/mlruns/artifacts``; the repo root is ``DVC_ROOT`` when DVC
runs the stage. Every run is tagged with its stage, the DVC experiment and the git commit, so
each MLflow run maps back to a DVC experiment; a FAILED run also with its one-line error
(``leakpipe.error``, repeated at the end of its description), a KILLED one says what stopped
it. The experiment is marked as a model-training one (``mlflow.experimentKind``),
not a GenAI one.

A tracker also logs the trained network (``log_model``: ``mlflow.pytorch`` with a signature and
an input example) and, when asked, MLflow's own system metrics (``system/*``: CPU, memory, GPU
via psutil / nvidia-ml-py), sampled every ``system_metrics_interval_s``. ``log_pyfunc`` logs a
pyfunc model from code (the served detector, built in ``leakpipe.serve``).

Modules: ``names`` (experiment, tag and artifact names), ``trackers`` (the ``Tracker``
protocol, ``NullTracker``, ``MlflowTracker``), ``runs`` (the store, starting, finding and
closing runs), ``summary`` (a stage's summary figures: the headline ones as metrics, every
one in a table artifact), ``relocate`` (a SQLite store moved or copied with its project:
artifact locations rewritten to its folder now; `leakpipe tracking repoint`), ``models``
(detector files as MLflow logged models, and their versions in the model registry with the
aliases ``candidate`` / ``champion`` / ``adapted``). Callers use this package's names
(``tracking.start_run``); to replace a function in a test, patch it in the module that calls it
(``leakpipe.tracking.runs.tracking_uri`` for ``start_run``), not here.
"""

from __future__ import annotations

from leakpipe.tracking.models import (
    MODEL_DESCRIPTION,
    DetectorVersion,
    RegistryError,
    alias_version,
    download_model,
    is_model_uri,
    log_pyfunc,
    model_flavors,
    register_detector,
    set_alias,
    set_version_tags,
)
from leakpipe.tracking.names import (
    ALIAS_ADAPTED,
    ALIAS_CANDIDATE,
    ALIAS_CHAMPION,
    DATASET_CONTEXT,
    DEFAULT_EXPERIMENT,
    DETECTOR_SUFFIX,
    DVC_ENV_TAGS,
    EXPERIMENT_KIND,
    MODEL_NAME,
    RUN_NAME_TAG,
    SYSTEM_SAMPLES_BEFORE_LOGGING,
    TAG_ADAPT_RUN,
    TAG_ADAPTED,
    TAG_CV_SOURCE,
    TAG_DATA,
    TAG_DETECTOR_KIND,
    TAG_DETECTOR_SHA256,
    TAG_DETECTOR_URI,
    TAG_ERROR,
    TAG_EVALUATE_RUN,
    TAG_EXPERIMENT_KIND,
    TAG_GIT_COMMIT,
    TAG_MODEL_SHA256,
    TAG_PROMOTE_RUN,
    TAG_REGISTERED_VERSION,
    TAG_SEED_SHA256,
    TAG_SELECTED_KIND,
    TAG_SHIP_RUN,
    TAG_STAGE,
    TAG_TEST_F1,
    TAG_TEST_RECORDING_F1,
    TAG_TEST_SHA256,
    TAG_TRAIN_RUN,
    TAG_UNVALIDATED,
    split_digests,
)
from leakpipe.tracking.relocate import Repointed, moved_from, repoint, store_file
from leakpipe.tracking.runs import (
    artifact_root,
    end_run_by_id,
    end_run_if_running,
    error_line,
    find_run_id,
    git_commit,
    nest_runs,
    run_tag,
    run_tags,
    scratch_dir,
    shown_tracking_uri,
    start_run,
    tracking_uri,
)
from leakpipe.tracking.summary import log_summary, summary_table
from leakpipe.tracking.trackers import MlflowTracker, NullTracker, Tracker, flatten

__all__ = [
    "ALIAS_ADAPTED",
    "ALIAS_CANDIDATE",
    "ALIAS_CHAMPION",
    "DATASET_CONTEXT",
    "DEFAULT_EXPERIMENT",
    "DETECTOR_SUFFIX",
    "DVC_ENV_TAGS",
    "EXPERIMENT_KIND",
    "MODEL_DESCRIPTION",
    "MODEL_NAME",
    "RUN_NAME_TAG",
    "SYSTEM_SAMPLES_BEFORE_LOGGING",
    "TAG_ADAPT_RUN",
    "TAG_ADAPTED",
    "TAG_DATA",
    "TAG_DETECTOR_KIND",
    "TAG_DETECTOR_SHA256",
    "TAG_DETECTOR_URI",
    "TAG_ERROR",
    "TAG_EVALUATE_RUN",
    "TAG_EXPERIMENT_KIND",
    "TAG_GIT_COMMIT",
    "TAG_MODEL_SHA256",
    "TAG_PROMOTE_RUN",
    "TAG_CV_SOURCE",
    "TAG_REGISTERED_VERSION",
    "TAG_SELECTED_KIND",
    "TAG_SEED_SHA256",
    "TAG_SHIP_RUN",
    "TAG_STAGE",
    "TAG_TEST_F1",
    "TAG_TEST_RECORDING_F1",
    "TAG_TEST_SHA256",
    "TAG_TRAIN_RUN",
    "TAG_UNVALIDATED",
    "DetectorVersion",
    "MlflowTracker",
    "NullTracker",
    "RegistryError",
    "Repointed",
    "Tracker",
    "alias_version",
    "artifact_root",
    "download_model",
    "end_run_by_id",
    "end_run_if_running",
    "error_line",
    "find_run_id",
    "flatten",
    "git_commit",
    "nest_runs",
    "is_model_uri",
    "log_pyfunc",
    "log_summary",
    "model_flavors",
    "moved_from",
    "register_detector",
    "repoint",
    "run_tag",
    "run_tags",
    "scratch_dir",
    "set_alias",
    "set_version_tags",
    "split_digests",
    "start_run",
    "store_file",
    "summary_table",
    "shown_tracking_uri",
    "tracking_uri",
]
