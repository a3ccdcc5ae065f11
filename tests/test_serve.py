"""The served detector: the MLflow model evaluate logs answers recordings like `leakpipe predict`.

Real pieces throughout: a detector file logged into a real SQLite MLflow store and registered
as its champion, loaded with ``mlflow.pyfunc.load_model`` and served by `leakpipe serve` (which
runs ``mlflow models serve --env-manager local``) on a free loopback port; two generated WAVs
at different sample rates go to both and to `leakpipe predict`.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import psutil
import pytest
import soundfile as sf
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from leakpipe import tracking
from leakpipe.cli import main
from leakpipe.constants import BINARY_CLASSES
from leakpipe.decision.verdict import DECIMALS
from leakpipe.detector import load_detector
from leakpipe.errors import DataError
from leakpipe.model import create_model
from leakpipe.predict.rows import COLUMNS
from leakpipe.serve.model import OUTPUT_COLUMNS, input_example, log_served_detector, served_rules
from leakpipe.serve.server import default_model, serve_command
from leakpipe.tracking import start_run
from tests.helpers_detector import (
    SMALL_MODEL,
    copied_store,
    restore_logging,
    save_small_detector,
)
from tests.helpers_predict import read_predictions
from tests.test_dvc_deps import module_file
from tests.test_ui import HOST, STOP_S, _free_port, _listening_addresses, _stop, _wait_for

# (name, seconds, sample rate, subtype): two rates, neither the model's (4096 Hz), and a
# recording of two clips and a half
WAVS = [("a.wav", 2.5, 8000, "PCM_16"), ("b.wav", 1.5, 44100, "PCM_24")]
NAME = "leakpipe-detector"
NUMBERS = ("leak_prob", "threshold", "vote_fraction", "frac_long_over", "duration_s", "band_hz")
TEXTS = ("status", "decision", "rule", "prob_mode", "notes")


@dataclass(frozen=True)
class Served:
    root: Path
    detector: Path
    uri: str           # models:/m-... of the logged model
    store: str         # the tracking URI it lives in
    wavs: list[Path]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A random-weight detector logged as evaluate logs it, and two WAVs to score."""
    root = tmp_path_factory.mktemp("serve")
    torch.manual_seed(0)
    detector = save_small_detector(root / "detector.pt",
                                   create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none")
    rng = np.random.default_rng(0)
    wavs = []
    for name, seconds, rate, subtype in WAVS:
        signal = 0.3 * rng.standard_normal(int(seconds * rate))
        sf.write(root / name, signal.astype(np.float32), rate, subtype=subtype)
        wavs.append(root / name)
    with pytest.MonkeyPatch.context() as patch:
        store = copied_store(root / "mlruns")
        patch.setenv("DVC_ROOT", str(root))
        patch.setenv("MLFLOW_TRACKING_URI", store)
        with start_run("evaluate"):
            uri = log_served_detector(detector)
        tracking.set_alias(NAME, tracking.ALIAS_CHAMPION, tracking.register_detector(uri, NAME))
        yield Served(root, detector, uri, store, wavs)


def _records(wavs: list[Path]) -> list[dict]:
    """What a client sends: each file's samples as soundfile reads them, its rate, its name."""
    records = []
    for path in wavs:
        samples, rate = sf.read(path, dtype="float32")
        records.append({"waveform": samples.tolist(), "sample_rate": rate, "id": path.name})
    return records


def _predicted(served: Served) -> dict[str, dict[str, str]]:
    out = served.root / "predict.csv"
    assert main(["predict", *map(str, served.wavs), "--model", str(served.detector),
                 "--out", str(out), "--force", "--no-progress", "--device", "cpu"]) == 0
    return read_predictions(out)


def _assert_same(answer: dict, row: dict[str, str]) -> None:
    """A served answer carries the figures of predict's CSV row for the same file: the texts
    and counts exactly, the numbers to one unit of their last written decimal (the served
    waveform is featurised in one piece, the file block by block: log-mel values may differ in
    their last float32 bits, and a probability next to a rounding boundary rounds either way)."""
    assert answer["status"] == "ok", answer["notes"]
    unit = 10.0 ** -DECIMALS * (1 + 1e-9)
    for key in NUMBERS:
        assert abs(answer[key] - float(row[key])) <= unit, key
    assert answer["n_long"] == int(row["n_long"])
    assert answer["band_limited"] is (row["band_limited"] == "True")
    for key in TEXTS:
        assert answer[key] == row[key], key
    for key in ("long_starts_s", "long_probs"):           # the timeline, in time order
        np.testing.assert_allclose(answer[key], [float(v) for v in row[key].split()],
                                   rtol=0, atol=unit, err_msg=key)
    assert list(answer["long_clips"]) == [int(v) for v in row["long_clips"].split()]


def test_logged_model_is_an_mlflow_model_with_a_batch_free_signature(served: Served) -> None:
    info = mlflow.models.get_model_info(served.uri)
    assert info.flavors["python_function"]
    inputs = info.signature.inputs.to_dict()
    assert [(c["name"], c["required"]) for c in inputs] == [
        ("waveform", True), ("sample_rate", True), ("id", False)]
    assert [c["name"] for c in info.signature.outputs.to_dict()] == list(OUTPUT_COLUMNS)
    # predict's columns, id for path; then the recording-level kinds' columns a cnn row has not
    assert OUTPUT_COLUMNS[1:len(COLUMNS)] == COLUMNS[1:]
    assert OUTPUT_COLUMNS[len(COLUMNS):] == ("raw_score", "kind", "sample_rate", "top_statistic")
    example = mlflow.models.Model.load(served.uri).load_input_example()
    assert len(example) == 2 and sorted(example["sample_rate"]) == [2000, 3000]
    model = mlflow.pyfunc.load_model(served.uri)
    for rows in (1, 2):          # neither the example nor the signature fixes a batch size
        answer = model.predict(input_example(load_detector(served.detector)).head(rows))
        assert list(answer["status"]) == ["ok"] * rows


def test_loaded_model_answers_like_predict(served: Served) -> None:
    model = mlflow.pyfunc.load_model(served.uri)
    answers = model.predict(pd.DataFrame(_records(served.wavs))).to_dict("records")
    rows = _predicted(served)
    assert [a["id"] for a in answers] == ["a.wav", "b.wav"]
    for answer in answers:
        _assert_same(answer, rows[answer["id"]])
    assert answers[0]["n_long"] == 7 * 3                    # 2.5 s: three 1 s clips


def test_unusable_recordings_get_error_rows_and_the_rest_an_answer(served: Served) -> None:
    good = _records(served.wavs[:1])[0]
    frame = pd.DataFrame([
        {"waveform": [0.1, -0.1] * 50, "sample_rate": 8000, "id": "short"},
        {**good, "id": "nan", "waveform": [float("nan")] + good["waveform"][1:]},
        {**good, "id": "rate", "sample_rate": 0},
        good,
        {"waveform": good["waveform"], "sample_rate": 8000},
    ])
    answers = mlflow.pyfunc.load_model(served.uri).predict(frame).to_dict("records")
    assert [a["id"] for a in answers] == ["short", "nan", "rate", "a.wav", "recording-4"]
    assert [a["status"] for a in answers] == ["error"] * 3 + ["ok"] * 2
    # said in the sender's terms: its own seconds, samples and rate; the rate as it was sent
    short = answers[0]["notes"]
    assert short.startswith("short: too short: 0.0125 s (100 samples at 8000 Hz), need at "
                            "least "), short
    assert short.endswith(" s clip)") and "4096" not in short
    assert "non-finite" in answers[1]["notes"]
    assert answers[2]["notes"] == "rate: sample_rate must be a positive whole number of Hz, got 0"
    assert answers[0]["leak_prob"] is None and answers[0]["long_probs"] == []
    assert answers[0]["long_clips"] == []
    assert answers[0]["band_hz"] is None and answers[0]["band_limited"] is None
    assert (answers[3]["band_hz"], answers[3]["band_limited"]) == (4000.0, False)   # 8 kHz
    assert answers[3]["leak_prob"] == answers[4]["leak_prob"]


def _invoke(model: mlflow.pyfunc.PyFuncModel, records: list[dict]) -> list[dict]:
    """What `leakpipe serve` answers a POST of ``records`` to /invocations: MLflow's scoring
    server's own handler (its JSON parsing against the signature, then the model), without
    the HTTP."""
    from mlflow.pyfunc.scoring_server import invocations

    answer = invocations(json.dumps({"dataframe_records": records}), "application/json", model,
                         model.metadata.get_input_schema())
    assert answer.status == 200, answer.response
    return json.loads(answer.response)["predictions"]


def test_a_dead_or_constant_recording_is_unusable_never_noleak(served: Served) -> None:
    """Issue #35 case 2: all zeros, or any constant, is a dead logger: ``unusable`` with the
    reason and no decision, while the recordings beside it are answered."""
    good = _records(served.wavs[:1])[0]
    n = len(good["waveform"])
    records = [{**good, "id": "zeros", "waveform": [0.0] * n},
               {**good, "id": "constant", "waveform": [0.25] * n}, good]
    answers = _invoke(mlflow.pyfunc.load_model(served.uri), records)
    assert [a["status"] for a in answers] == ["unusable", "unusable", "ok"]
    for answer, says in zip(answers[:2], ("dead (constant, all zero)", "dead (constant)"),
                            strict=True):
        assert answer["decision"] == "" and answer["leak_prob"] is None
        assert answer["notes"].startswith(f"{answer['id']}: channel 0 is {says}")
        assert "no leak decision" in answer["notes"]
    assert answers[2]["decision"] in ("LEAK", "NOLEAK")


def test_a_rate_that_is_not_a_whole_number_is_refused_as_sent(served: Served) -> None:
    """Issue #35 case 10: MLflow's parser once cast 4096.5 to the schema's integer (4096)
    before leakpipe saw it; the rate is refused as the client sent it, the rows beside it are
    answered."""
    good = _records(served.wavs[:1])[0]
    records = [{**good, "id": "half", "sample_rate": 4096.5}, {**good, "id": "text",
                                                                 "sample_rate": "8k"}, good]
    answers = _invoke(mlflow.pyfunc.load_model(served.uri), records)
    assert [a["status"] for a in answers] == ["error", "error", "ok"]
    assert answers[0]["notes"] == ("half: sample_rate must be a positive whole number of Hz, "
                                   "got 4096.5")
    assert answers[1]["notes"].endswith('got "8k"')


# Loads the model in a fresh interpreter, scores one recording and prints the names and files
# of the modules that this imported (the interpreter's own start-up left out).
_LOAD_AND_LIST = """
import json, sys
before = set(sys.modules)
import mlflow.pyfunc
import pandas as pd
model = mlflow.pyfunc.load_model(sys.argv[1])
model.predict(pd.DataFrame({"waveform": [[0.1, -0.1] * 4096], "sample_rate": [8192]}))
new = sorted(set(sys.modules) - before)
files = {getattr(sys.modules[name], "__file__", None) for name in new}
print(json.dumps({"modules": new, "files": sorted(f for f in files if f)}))
"""
SITE_PACKAGES = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
# Installed here, so imported, but optional to the library that imports them (inside
# ``try: ... except ImportError``): a virtualenv without them loads the model all the same.
OPTIONAL_IMPORTS = {
    "orjson": "fastapi.responses",
    "pygments": "mako.exceptions",
    "pydot": "torch.fx.passes.graph_drawer",
    "nvidia-ml-py": "torch.cuda and leakpipe.monitor.system (pynvml)",
}


def _installed_top_level(file: str) -> str | None:
    """The top-level import name an installed module file belongs to (``numpy/core/x.py`` ->
    ``numpy``, ``six.py`` -> ``six``); None outside site-packages (the standard library,
    leakpipe, the model's own code)."""
    path = Path(file).resolve()
    for site in SITE_PACKAGES:
        if path.is_relative_to(site):
            return path.relative_to(site).parts[0].split(".")[0]
    return None


def _with_dependencies(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, transitively (extras left out), as
    canonical names: what installing the pinned requirements installs."""
    todo, seen = list(names), set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:   # not installed here, so not imported here
            continue
        for line in needs:
            need = Requirement(line)
            if need.marker is None or need.marker.evaluate({"extra": ""}):
                todo.append(need.name)
    return seen


def _unconditional_imports(module: str) -> set[str]:
    """Top-level names that a leakpipe module imports whenever it is imported: the import
    statements of its body (not those in functions or under ``if`` / ``try``, which may be
    optional; those that ran are among the imported modules all the same)."""
    path = module_file(module)
    if path is None:
        return set()
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_logged_requirements_cover_what_loading_the_model_imports(served: Served) -> None:
    """``--env-manager virtualenv`` installs only the logged requirements: every installed
    distribution that loading and calling the model imports must come with them, and those
    that leakpipe's own modules import must be pinned themselves."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": served.store}
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_LIST, served.uri], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    third_party = {top for file in loaded["files"]
                   if (top := _installed_top_level(file)) is not None}
    owners = metadata.packages_distributions()
    assert {top for top in third_party if top not in owners} == set()

    def distributions(top: str) -> set[str]:
        return {canonicalize_name(name) for name in owners[top]}

    requirements = Path(mlflow.pyfunc.get_model_dependencies(served.uri)).read_text()
    pinned = {canonicalize_name(Requirement(line).name) for line in map(str.strip,
              requirements.splitlines()) if line and not line.startswith(("#", "-"))}
    installed = _with_dependencies(pinned) | set(OPTIONAL_IMPORTS)
    assert {top: sorted(distributions(top)) for top in third_party
            if not distributions(top) & installed} == {}
    ours = {top for module in loaded["modules"] if module.startswith("leakpipe.")
            for top in _unconditional_imports(module)} & third_party
    assert {top: sorted(distributions(top)) for top in ours
            if not distributions(top) & pinned} == {}


def test_a_detector_without_scoring_rules_is_refused(tmp_path: Path) -> None:
    old = save_small_detector(tmp_path / "old.pt",
                              create_model(SMALL_MODEL, len(BINARY_CLASSES)).eval(), "none",
                              None, None)
    with pytest.raises(DataError, match="re-run evaluate"):
        served_rules(load_detector(old))


_keep_logging = pytest.fixture(name="_keep_logging")(restore_logging)


def test_a_port_out_of_range_is_refused_while_parsing(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #35 case 5: `--port 99999` is an argument error (exit 2), not MLflow's traceback."""
    with pytest.raises(SystemExit) as stopped:
        main(["serve", "--model", "models:/x@champion", "--port", "99999"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.endswith("argument --port: must be 1 to 65535, got 99999")


@pytest.mark.usefixtures("_keep_logging")
def test_a_busy_port_is_one_line_before_anything_starts(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #35 case 5: a port another server listens on is one `error:` line and exit 3,
    said before the model is looked up or MLflow's server started."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--model", "models:/x@champion", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    assert err == (f"error: --port {port}: already in use on {HOST} (another server?); "
                   "choose another --port\n")


def test_serve_runs_mlflow_models_serve_in_this_environment() -> None:
    command = serve_command("models:/x@champion", HOST, 5001, 1)
    assert command[1:5] == ["-m", "mlflow", "models", "serve"]
    assert command[command.index("--env-manager") + 1] == "local"
    assert command[command.index("-h") + 1] == HOST
    with pytest.raises(DataError, match="--model"):
        default_model("")


@pytest.mark.slow
def test_served_champion_answers_like_predict_and_stops_on_sigterm(served: Served) -> None:
    """`leakpipe serve` (``mlflow models serve --env-manager local``) on a free loopback port
    serves ``models:/<name>@champion``; two WAVs at two rates are posted as JSON, and SIGTERM
    stops the server with its workers."""
    port = _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": served.store, "DVC_ROOT": str(served.root)}
    log = (served.root / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "leakpipe.cli", "serve", "--model", default_model(NAME),
         "--port", str(port)],
        cwd=served.root, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    try:
        body = {"dataframe_records": _records(served.wavs)}
        answers = _wait_for(f"http://{HOST}:{port}/invocations", body, server)["predictions"]
        assert _listening_addresses(port) == {HOST}
        workers = psutil.Process(server.pid).children(recursive=True)
        server.send_signal(signal.SIGTERM)               # the command itself, not its group
        assert server.wait(STOP_S) == 128 + signal.SIGTERM
        assert not [w for w in workers if w.is_running() and w.status() != "zombie"]
    finally:
        _stop(server)
        log.close()
    rows = _predicted(served)
    assert [a["id"] for a in answers] == ["a.wav", "b.wav"]
    for answer in answers:
        _assert_same(answer, rows[answer["id"]])
