"""`leakpipe tune dashboard`: optuna-dashboard on the study's own storage, on 127.0.0.1.

The storage is opened exactly as the workers open it (``study.open_storage``): the journal file
with the same kernel file lock, or the RDB URL (``OPTUNA_STORAGE`` / ``tune.storage``), so the
dashboard can be left open while a study runs. It serves until Ctrl-C / SIGTERM (one process,
bottle's wsgiref server: nothing is left behind).

The line it prints is the address of the study's own page (``/dashboard/studies/<id>``), not
the dashboard's root: a storage may hold several studies (every change of the space, the trial
epochs or the data starts a new one), and the root is a list of them. The study is the one
``--study`` names, else the newest in the storage (the last one `leakpipe tune` started).
Reading the storage here changes nothing in it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import BaseStorage

from leakpipe.config import load_section
from leakpipe.tune.names import DASHBOARD_HOST, DASHBOARD_PORT
from leakpipe.tune.study import JOURNAL, StorageSpec, TuneError, open_storage, resolve_storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShownStudy:
    """The study the dashboard opens on, and how many the storage holds."""

    name: str
    study_id: int
    objective: str | None      # its metric name; None for a study from before leakpipe set it
    studies: int


def study_page(host: str, port: int, study_id: int) -> str:
    """optuna-dashboard's page of one study (its single-page app routes /dashboard/studies/N)."""
    return f"http://{host}:{port}/dashboard/studies/{study_id}"


def pick_study(storage: BaseStorage, spec: StorageSpec, wanted: str | None) -> ShownStudy:
    """The study ``wanted`` names, or the newest one in the storage."""
    names = optuna.get_all_study_names(storage)
    if not names:
        raise TuneError(f"{spec.display}: no study yet; run `leakpipe tune` (or `dvc repro "
                        "tune`) first")
    if wanted is not None and wanted not in names:
        raise TuneError(f"study {wanted!r} is not in {spec.display}; it holds "
                        f"{', '.join(sorted(names))}")
    ids = {name: storage.get_study_id_from_name(name) for name in names}
    name = wanted if wanted is not None else max(names, key=ids.__getitem__)
    metric_names = optuna.load_study(study_name=name, storage=storage).metric_names
    return ShownStudy(name, ids[name], metric_names[0] if metric_names else None, len(names))


def banner(shown: ShownStudy, spec: StorageSpec, host: str, port: int) -> str:
    """The one line the command prints: the study, its objective, its page, the storage."""
    objective = shown.objective or ("objective not named yet: the study predates that; its next "
                                    "`leakpipe tune` names it")
    others = shown.studies - 1
    more = f"; {others} other stud{'y' if others == 1 else 'ies'} there (--study NAME)" \
        if others else ""
    return (f"tune dashboard: study {shown.name} ({objective}) at "
            f"{study_page(host, port, shown.study_id)} (storage {spec.display}{more}; Ctrl-C "
            "stops it)")


def run_dashboard(params: Path, journal: Path, host: str = DASHBOARD_HOST,
                  port: int = DASHBOARD_PORT, study: str | None = None) -> int:
    """Serve the dashboard until stopped; returns the exit code."""
    import optuna_dashboard  # the web app: only for this command

    cfg = load_section(params, "tune")
    spec = resolve_storage(cfg, journal)
    if spec.kind == JOURNAL and not Path(spec.location).is_file():
        raise TuneError(f"{spec.location}: no study yet; run `leakpipe tune` (or `dvc repro "
                        "tune`) first, or set tune.storage / OPTUNA_STORAGE")
    storage = open_storage(spec, cfg)
    print(banner(pick_study(storage, spec, study), spec, host, port), flush=True)
    try:
        optuna_dashboard.run_server(storage, host=host, port=port)
    except KeyboardInterrupt:
        return 130
    return 0
