"""`leakpipe tune dashboard`: optuna-dashboard on the study's own storage, on 127.0.0.1.

The storage is opened exactly as the workers open it (``study.open_storage``): the journal file
with the same kernel file lock, or the RDB URL (``OPTUNA_STORAGE`` / ``tune.storage``), so the
dashboard can be left open while a study runs. It serves until Ctrl-C / SIGTERM (one process,
bottle's wsgiref server: nothing is left behind).
"""

from __future__ import annotations

import logging
from pathlib import Path

from leakpipe.config import load_section
from leakpipe.tune.names import DASHBOARD_HOST, DASHBOARD_PORT
from leakpipe.tune.study import JOURNAL, TuneError, open_storage, resolve_storage

log = logging.getLogger(__name__)


def run_dashboard(params: Path, journal: Path, host: str = DASHBOARD_HOST,
                  port: int = DASHBOARD_PORT) -> int:
    """Serve the dashboard until stopped; returns the exit code."""
    import optuna_dashboard  # the web app: only for this command

    cfg = load_section(params, "tune")
    spec = resolve_storage(cfg, journal)
    if spec.kind == JOURNAL and not Path(spec.location).is_file():
        raise TuneError(f"{spec.location}: no study yet; run `leakpipe tune` (or `dvc repro "
                        "tune`) first, or set tune.storage / OPTUNA_STORAGE")
    storage = open_storage(spec, cfg)
    print(f"tune dashboard: {spec.display} on http://{host}:{port} (Ctrl-C stops it)",
          flush=True)
    try:
        optuna_dashboard.run_server(storage, host=host, port=port)
    except KeyboardInterrupt:
        return 130
    return 0
