"""Shared back-ends, for real: an MLflow tracking server on PostgreSQL that a stage logs to over
HTTP, and optuna-dashboard on a study's storage.

The PostgreSQL server is the session's pgserver (tests/conftest.py); every server here binds
127.0.0.1 on a free port and is stopped by the test that started it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import optuna
import pytest

from leakpipe import tracking
from leakpipe.config import load_section
from leakpipe.db_urls import redacted, with_driver
from leakpipe.tune.dashboard import banner, pick_study
from leakpipe.tune.driver import run_study
from leakpipe.tune.study import TuneError, open_storage, open_study, resolve_storage
from tests.conftest import PARAMS
from tests.helpers_h5 import write_splits
from tests.helpers_tune import make_workspace
from tests.test_ui import HOST, _free_port, _listening_addresses, _post, _stop, _wait_for

STARTUP_S = 90.0
POLL_S = 0.5


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "leakpipe.cli", *args], cwd=cwd, env=env,
                            start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_postgres_urls_get_the_pinned_driver() -> None:
    assert with_driver("postgresql://u:p@db:5432/x") == "postgresql+psycopg://u:p@db:5432/x"
    assert with_driver("postgres://u@/x?host=/run") == "postgresql+psycopg://u@/x?host=/run"
    for url in ("postgresql+psycopg2://u@h/x", "sqlite:///a.db", "mysql://u@h/x", ""):
        assert with_driver(url) == url


def test_urls_are_shown_without_their_credentials() -> None:
    assert redacted("postgresql://u:pw@db:5432/x") == "postgresql://***@db:5432/x"
    assert redacted("postgresql+psycopg://u:p@w/rd@db/x") == "postgresql+psycopg://***@db/x"
    for url in ("sqlite:////tmp/a@b/mlflow.db", "http://host:5000", "/tmp/a@b/journal.log"):
        assert redacted(url) == url
    spec = resolve_storage(load_section(PARAMS, "tune"))
    assert "***" not in spec.display                  # the default journal: a path, as it is


@pytest.mark.slow
def test_a_stage_logs_to_an_mlflow_server_on_postgresql(tmp_path: Path,
                                                        postgres_url: str) -> None:
    """`leakpipe ui` serves a PostgreSQL store; `leakpipe preload` logs to it over HTTP."""
    port = _free_port()
    env = {**os.environ, "DVC_ROOT": str(tmp_path)}
    server = _cli("ui", "--port", str(port), env={**env, "MLFLOW_TRACKING_URI": postgres_url},
                  cwd=tmp_path)
    try:
        base = f"http://{HOST}:{port}/api/2.0/mlflow"
        _wait_for(f"{base}/experiments/search", {"max_results": 5}, server)
        assert _listening_addresses(port) == {"127.0.0.1"}
        data = write_splits(tmp_path / "data")
        done = subprocess.run(
            [sys.executable, "-m", "leakpipe.cli", "preload", "--params", str(PARAMS),
             "--data-dir", str(data["train"].parent), "--report",
             str(tmp_path / "preload.json")],
            cwd=tmp_path, env={**env, "MLFLOW_TRACKING_URI": f"http://{HOST}:{port}"},
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        found = _post(f"{base}/experiments/search", {"max_results": 10})["experiments"]
        experiment = next(e for e in found if e["name"] == tracking.DEFAULT_EXPERIMENT)
        runs = _post(f"{base}/runs/search", {"experiment_ids": [experiment["experiment_id"]]})
    finally:
        _stop(server)
    (run,) = runs["runs"]
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    metrics = {m["key"] for m in run["data"]["metrics"]}
    assert tags[tracking.TAG_STAGE] == "preload" and run["info"]["status"] == "FINISHED"
    assert "preload/host_bytes" in metrics


def _get_json(url: str, server: subprocess.Popen) -> dict:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            out = server.stdout.read() if server.stdout else ""
            pytest.fail(f"the dashboard exited with {server.returncode}: {out[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(POLL_S)
    pytest.fail(f"the dashboard did not answer within {STARTUP_S:.0f} s")


@pytest.mark.parametrize("storage", ["journal", "postgresql"])
def test_tune_dashboard_lists_the_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        storage: str, request: pytest.FixtureRequest) -> None:
    if storage == "postgresql":
        monkeypatch.setenv("OPTUNA_STORAGE", request.getfixturevalue("postgres_url"))
    else:
        monkeypatch.delenv("OPTUNA_STORAGE", raising=False)
    ws = make_workspace(tmp_path, tune={"n_trials": 2, "pruner": "none"})
    summary = run_study(ws.params, ws.paths, progress=False, tracked=False)
    port = _free_port()
    dashboard = _cli("tune", "dashboard", "--params", str(ws.params), "--journal",
                     str(ws.paths.journal), "--port", str(port), env=dict(os.environ),
                     cwd=tmp_path)
    try:
        studies = _get_json(f"http://{HOST}:{port}/api/studies", dashboard)["study_summaries"]
        bound = _listening_addresses(port)
        assert dashboard.stdout is not None
        banner = dashboard.stdout.readline()      # printed before the server starts
        (study_id,) = [s["study_id"] for s in studies]
        detail = _get_json(f"http://{HOST}:{port}/api/studies/{study_id}", dashboard)
    finally:
        _stop(dashboard)
    assert [s["study_name"] for s in studies] == [summary.study_name]
    assert bound == {"127.0.0.1"}
    # the study's own page, not the root; the objective by its name, not "Objective 0"
    assert banner.startswith(f"tune dashboard: study {summary.study_name} (val/clip_f1) at "
                             f"http://{HOST}:{port}/dashboard/studies/{study_id} "), banner
    assert detail["name"] == summary.study_name
    assert detail["objective_names"] == ["val/clip_f1"]


def test_tune_dashboard_opens_on_the_newest_study_or_the_one_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two studies in one journal: the page is the newest one's unless --study names another;
    a study started before leakpipe named its objective says so."""
    monkeypatch.delenv("OPTUNA_STORAGE", raising=False)
    ws = make_workspace(tmp_path)
    cfg = load_section(ws.params, "tune")
    spec = resolve_storage(cfg, ws.paths.journal)
    storage = open_storage(spec, cfg)
    optuna.create_study(storage=storage, study_name="old")            # not named: as before
    open_study(storage, "new", cfg)
    newest = pick_study(storage, spec, None)
    assert (newest.name, newest.objective, newest.studies) == ("new", "val/clip_f1", 2)
    line = banner(newest, spec, HOST, 8080)
    assert f"at http://{HOST}:8080/dashboard/studies/{newest.study_id} " in line
    assert "1 other study there (--study NAME)" in line
    old = pick_study(storage, spec, "old")
    assert old.objective is None and "objective not named yet" in banner(old, spec, HOST, 8080)
    with pytest.raises(TuneError, match="study 'gone' is not in .*; it holds new, old"):
        pick_study(storage, spec, "gone")


def test_tune_dashboard_without_a_study_is_one_line(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from leakpipe.cli import main

    monkeypatch.delenv("OPTUNA_STORAGE", raising=False)
    ws = make_workspace(tmp_path)
    assert main(["tune", "dashboard", "--params", str(ws.params), "--journal",
                 str(tmp_path / "none.log")]) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "none.log: no study yet" in err[0]
