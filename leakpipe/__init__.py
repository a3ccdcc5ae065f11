"""leakpipe: a reproducible pipeline for training and evaluating acoustic leak detectors.

Importing the package also turns the tools' usage telemetry off for this process and every
process it starts (``apply_telemetry_opt_outs``), unless the user opted in.

Why: MLflow (3.2+) fetches a config from ``config.mlflow-telemetry.io`` and sends usage events
from every process that imports it, and its UI server fetches a UI config from a CDN; DVC sends
anonymous analytics after each command; great-expectations has analytics of its own. A pipeline
on a utility's recordings must contact nothing it was not told to. Each tool's documented
opt-out variable is set in this process's environment here, before any leakpipe module imports
MLflow and before any child process starts, so the children inherit it: stages under
`dvc repro` (they import leakpipe themselves), ``mlflow server`` behind `leakpipe ui`,
``mlflow models serve`` behind `leakpipe serve`, tune workers, queued experiments and the
study's ``dvc`` calls. It lives here, not in a module of its own, because the package's import
is the one point every entry runs first (and the lowest layer, tests/test_layers.py).

Opting in (docs/operations.md): ``LEAKPIPE_TELEMETRY=1`` leaves every tool at its own default;
a tool's own variable set explicitly (``MLFLOW_DISABLE_TELEMETRY=false``) is never overridden:
only unset ones are filled in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping

__version__ = "0.1.0"

TELEMETRY_OPT_IN = "LEAKPIPE_TELEMETRY"
OPT_IN_VALUES = ("1", "true", "yes", "on")
# each tool's own opt-out switch and the value that turns its reporting off
TELEMETRY_OPT_OUTS: Mapping[str, str] = {
    "MLFLOW_DISABLE_TELEMETRY": "true",   # MLflow: client events and the UI server's config
    "DVC_NO_ANALYTICS": "1",              # DVC: any non-empty value disables its analytics
    "GX_ANALYTICS_ENABLED": "false",      # great-expectations (the validate stage)
}


def telemetry_opted_in(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the user asked for the tools' own telemetry defaults (``LEAKPIPE_TELEMETRY``)."""
    return environ.get(TELEMETRY_OPT_IN, "").strip().lower() in OPT_IN_VALUES


def apply_telemetry_opt_outs(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set every unset opt-out variable in ``environ`` unless the user opted in; returns what
    was set (nothing when opted in, or when the user set them all already)."""
    if telemetry_opted_in(environ):
        return {}
    added = {name: value for name, value in TELEMETRY_OPT_OUTS.items() if name not in environ}
    environ.update(added)
    return added


apply_telemetry_opt_outs()
