"""The bad-recording corpus of test_bad_audio*.py and running the real `leakpipe build` on it.

``CASES`` is the documented outcome of each bad recording (issue #13): what `leakpipe build`
does with it and what the report (``reports/build.json``: ``unusable`` / ``flagged``) or the
error line says. The same table, for users, is in docs/data-format.md ("What build does with a
bad recording"). Every recording is generated in the test's own folder (soundfile, or RIFF bytes
written by hand) next to a few good ones, in the class-folder layout ``<root>/<CLASS>/<file>.wav``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import yaml

from leakpipe.cli import main
from leakpipe.config import BuildConfig
from leakpipe.constants import SPLITS
from leakpipe.data import open_split
from tests.test_build import make_recordings

SR = 4000  # Hz, the generated recordings' own rate (the build resamples to 4096 Hz)
GOOD_SECONDS = 1.5  # one 1 s clip each with clips_per_recording: all
TEN_MINUTES = 600.0

USED = "used"          # in the HDF5 splits, in neither list of the report
FLAGGED = "flagged"    # in the HDF5 splits and under `flagged` (checks + reason)
REJECTED = "rejected"  # under `unusable` with a one-line reason naming the file; not in HDF5


# -- the recordings ------------------------------------------------------------------------------


def noise(seconds: float, sr: int = SR, level: float = 0.1, seed: int = 0) -> np.ndarray:
    """Gaussian noise, (n,) float32."""
    n = int(round(seconds * sr))
    return (level * np.random.default_rng(seed).standard_normal(n)).astype(np.float32)


def riff_pcm16(x: np.ndarray, sr: int = SR, claimed_frames: int | None = None) -> bytes:
    """A mono PCM_16 WAV, byte by byte; its data chunk header claims ``claimed_frames``."""
    data = np.round(np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()
    size = len(data) if claimed_frames is None else 2 * claimed_frames
    fmt = struct.pack("<HHIIHH", 1, 1, sr, 2 * sr, 2, 16)  # PCM, mono, rate, bytes/s, align, bits
    return (b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE"
            + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", size) + data)


def writer(subtype: str, make: Callable[[], np.ndarray], sr: int = SR) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        sf.write(path, make(), sr, subtype=subtype, format="WAV")
    return write


def raw(make: Callable[[], bytes]) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(make())
    return write


def with_nan() -> np.ndarray:
    x = noise(GOOD_SECONDS, seed=4)
    x[100::500] = np.nan
    return x


def clipped_int16() -> np.ndarray:
    pcm = np.round(noise(GOOD_SECONDS, level=0.2, seed=5) * 32767).astype(np.int16)
    pcm[::20], pcm[1::20] = 32767, -32768  # 10 % of the samples at full scale
    return pcm


def stereo() -> np.ndarray:
    return np.stack([noise(GOOD_SECONDS, seed=6), noise(GOOD_SECONDS, level=0.05, seed=7)],
                    axis=1)  # (frames, 2)


# -- the table: case -> file -> outcome -> what the report / log says ---------------------------


@dataclass(frozen=True)
class Case:
    name: str
    rel: str                        # <CLASS>/<file> below the source root
    write: Callable[[Path], None]
    outcome: str                    # USED | FLAGGED | REJECTED
    says: str = ""                  # in the report's reason (FLAGGED, REJECTED)
    checks: tuple[str, ...] = ()    # `checks` of the flagged entry
    clips: int = 0                  # HDF5 rows of a used recording (clips_per_recording: all)
    warns: str = ""                 # a WARNING log line naming the file says this


CASES: tuple[Case, ...] = (
    Case("zero-byte file", "LEAK/zero_bytes.wav", raw(lambda: b""),
         REJECTED, "empty (0 bytes)"),
    Case("text file renamed .wav", "NORMAL/notes.wav",
         raw(lambda: b"time,pressure\n0.0,1.2\n0.1,1.3\n" * 20),
         REJECTED, "not a readable audio format"),
    Case("header cut mid-fmt chunk", "NORMAL/header_cut.wav",
         raw(lambda: riff_pcm16(noise(GOOD_SECONDS))[:28]),  # RIFF, fmt id + size, 8 of 16
         REJECTED, "not a readable audio format"),
    Case("header claims more data (recorder died)", "LEAK/died_mid_write.wav",
         raw(lambda: riff_pcm16(noise(GOOD_SECONDS, seed=1), claimed_frames=int(3 * SR))),
         FLAGGED, "truncated: header claims 12000 frames, read 6000 (50%)", ("truncated",),
         clips=1, warns="truncated: header claims 12000 frames, file holds 6000"),
    ZERO_SIZE := Case("header says 0 data bytes (recorder died before closing)",
                      "NORMAL/died_before_closing.wav",
                      raw(lambda: riff_pcm16(noise(GOOD_SECONDS, seed=16), claimed_frames=0)),
                      FLAGGED, "truncated: header claims 0 frames, read 6000", ("truncated",),
                      clips=1, warns="truncated: header claims 0 frames, file holds 6000"),
    Case("8-bit unsigned PCM", "BACKGROUND/u8.wav",
         writer("PCM_U8", lambda: noise(GOOD_SECONDS, seed=2)), USED, clips=1),
    Case("24-bit PCM", "LEAK/pcm24.wav",
         writer("PCM_24", lambda: noise(GOOD_SECONDS, seed=3)), USED, clips=1),
    Case("float WAV with NaN", "LEAK/nan.wav", writer("FLOAT", with_nan),
         REJECTED, "12 non-finite samples (NaN or inf)"),
    Case("stereo", "NORMAL/stereo.wav", writer("PCM_16", stereo), USED, clips=1),
    Case("96 kHz", "BACKGROUND/hi_rate.wav",
         writer("PCM_16", lambda: noise(GOOD_SECONDS, 96000, seed=8), 96000), USED, clips=1),
    Case("0.1 s", "NORMAL/blip.wav", writer("PCM_16", lambda: noise(0.1, seed=9)),
         REJECTED, "too short: 0.1 s (400 samples at 4000 Hz), need at least 0.5 s"),
    Case("10 minutes", "LEAK/ten_minutes.wav",
         writer("PCM_16", lambda: noise(TEN_MINUTES, seed=10)), USED, clips=600),
    Case("non-ASCII name (German)", "LEAK/Leitung_Größe_ü.wav",
         writer("PCM_16", lambda: noise(GOOD_SECONDS, seed=11)), USED, clips=1),
    Case("non-ASCII name (Chinese)", "NORMAL/漏水.wav",
         writer("PCM_16", lambda: noise(GOOD_SECONDS, seed=12)), USED, clips=1),
    Case("non-ASCII name, unreadable", "BACKGROUND/Größe_leer.wav", raw(lambda: b""),
         REJECTED, "empty (0 bytes)"),
    Case("file name not valid UTF-8 (Latin-1 bytes)", "LEAK/Gr\udcf6\udcdfe.wav",
         raw(lambda: riff_pcm16(noise(GOOD_SECONDS, seed=14))),  # b"Gr\xf6\xdfe.wav" on disk
         REJECTED, "file name is not valid UTF-8"),
    Case("int16 clipping", "NORMAL/clipped.wav", writer("PCM_16", clipped_int16),
         FLAGGED, "channel 0 is clipped: 10.00% of its samples at PCM_16 full scale",
         ("clipped",), clips=1),
    Case("DC offset", "BACKGROUND/dc.wav",
         writer("PCM_16", lambda: noise(GOOD_SECONDS, level=0.05, seed=13) + 0.3),
         FLAGGED, "channel 0 has a DC offset", ("dc_offset",), clips=1),
    RATE_ZERO := Case("sample rate 0 in the header", "LEAK/rate_zero.wav",
                      raw(lambda: riff_pcm16(noise(GOOD_SECONDS, seed=15), sr=0)),
                      REJECTED, "invalid header: sample rate 0 Hz"),
)
# "a source folder with no LEAK class": the whole build stops (exit 3), whatever on_error says;
# see test_source_without_leak_class.

REJECTED_CASES = [c for c in CASES if c.outcome == REJECTED]
KEPT_CASES = [c for c in CASES if c.outcome != REJECTED]
# each `fail` run of the command costs seconds (a fresh MLflow store); the newer cases go
# through `build` itself with `fail` instead (test_fail_on_a_rate_of_zero), as the command's
# handling of a failed build is the same for every case
CLI_FAIL_CASES = [c for c in REJECTED_CASES if c is not RATE_ZERO]


def shown(path: Path) -> str:
    """How messages write a path: its bytes, with those that are not UTF-8 as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def ids(cases: list[Case] | tuple[Case, ...]) -> list[str]:
    return [c.name for c in cases]


# -- running `leakpipe build` --------------------------------------------------------------------


@dataclass(frozen=True)
class BuildRun:
    code: int
    stderr: str
    source: Path
    out: Path
    report: Path

    @property
    def failed_report(self) -> Path:
        return self.report.with_name("build.failed.json")

    def errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]

    def warnings(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if " WARNING " in line]


@contextlib.contextmanager
def kept_logging() -> Iterator[None]:
    """`leakpipe.cli.main` binds the root logger to the stderr it captures; undo that after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def leakpipe_build(tmp: Path, source: Path, cfg: BuildConfig, on_error: str) -> BuildRun:
    """`leakpipe build` with the tiny features of ``cfg``, every clip, one worker."""
    build = dataclasses.asdict(dataclasses.replace(cfg, on_error=on_error, workers=1,
                                                   clips_per_recording="all"))
    params = tmp / "params.yaml"
    params.write_text(yaml.safe_dump({"build": json.loads(json.dumps(build))}))
    out, report = tmp / "processed", tmp / "reports" / "build.json"
    stderr = io.StringIO()
    with kept_logging(), contextlib.redirect_stderr(stderr):
        code = main(["build", "--params", str(params), "--source", str(source), "--out-dir",
                     str(out), "--report", str(report), "--no-progress"])
    return BuildRun(code, stderr.getvalue(), source, out, report)


def good_recordings(root: Path) -> None:
    """3 sites x LEAK / NORMAL / BACKGROUND, 1.5 s each: <CLASS>/s<site>_0.wav."""
    make_recordings(root, n_sites=3, per_class=1, sr=SR, seconds=GOOD_SECONDS, manifest=False)


def write_case(root: Path, case: Case) -> Path:
    path = root / case.rel
    path.parent.mkdir(parents=True, exist_ok=True)
    case.write(path)
    return path


Rows = dict[str, tuple[str, np.ndarray, np.ndarray]]  # recording_id -> split, labels, clip_index


def rows_by_recording(out: Path) -> Rows:
    """recording_id -> (split, labels as class names, clip_index) over the three split files."""
    rows: Rows = {}
    for split in SPLITS:
        with open_split(out / f"{split}.h5") as reader:
            rid = reader.recording_ids
            names = np.asarray(reader.class_names)[reader.h5["labels"][:]]
            clip_index = reader.h5["clip_index"][:]
            for r in dict.fromkeys(rid):
                assert r not in rows, f"{r} in two splits"
                rows[r] = (split, names[rid == r], clip_index[rid == r])
    return rows


def no_partial_output(out: Path) -> list[str]:
    """Whatever a failed build left in its output folder (should be nothing)."""
    return sorted(p.name for p in out.rglob("*")) if out.exists() else []


def copy_of(root: Path, tmp: Path) -> Path:
    target = tmp / "raw"
    for file in root.rglob("*.wav"):
        dest = target / file.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(file.read_bytes())
    return target
