"""Tests of leakpipe.audio.network: the `small_network` scenario of `synth` (docs/synth.md)."""

from __future__ import annotations

import csv
import dataclasses
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from scipy.ndimage import median_filter
from scipy.signal import welch

from leakpipe.audio import network, network_recording, network_site, synth
from leakpipe.audio.site import draw_site
from leakpipe.cli import build_parser, main
from leakpipe.config import ConfigError, SynthConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, MANIFEST_NAME
from leakpipe.data.manifest import read_manifest
from tests.conftest import PARAMS

DEFAULT = load_section(PARAMS, "synth")
NET = dataclasses.replace(DEFAULT, scenario="small_network", seed=123, network_sites=8,
                          workers=1)
BENCH = SynthConfig(seed=123, classes=("LEAK", "NORMAL"), n_sites=2, recordings_per_class=1,
                    leak_share=0.5, scale=1.0, sample_rates=(8000,), duration_s=0.5,
                    difficulty=1.0, transient_rate_hz=0.4, gain_db=20.0, clip_share=0.0,
                    dc_share=0.0, subtype="PCM_16", workers=1)


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("network") / "net"
    network.generate_network(NET, out, progress=False)
    return out


@pytest.fixture(scope="module")
def rows(net: Path) -> list[dict[str, str]]:
    with open(net / MANIFEST_NAME, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def audio(net: Path, rows: list[dict[str, str]]) -> list[np.ndarray]:
    return [sf.read(net / row["path"], dtype="float64")[0] for row in rows]


# --- layout ----------------------------------------------------------------------------------


def test_one_logger_model_two_classes_and_the_build_reads_it(net: Path, rows) -> None:
    assert {r["class"] for r in rows} == {"LEAK", "NOLEAK"}
    assert sorted(p.name for p in net.iterdir()) == sorted(["LEAK", "NOLEAK", MANIFEST_NAME])
    for row in rows:
        info = sf.info(net / row["path"])
        assert info.samplerate == 4096 and info.subtype == "PCM_16" and info.channels == 1
        assert 10.0 <= info.frames / 4096 <= 20.0
        assert float(row["duration_s"]) == pytest.approx(info.frames / 4096, abs=1e-3)
        name = rf"{row['class']}/{row['group']}_{row['class']}_\d{{4}}\.wav"
        assert re.fullmatch(name, row["path"]), row["path"]
        assert (row["sensor"], row["sample_rate"]) == ("accelerometer", "4096")
    groups = {r["group"] for r in rows}
    assert groups == {draw_site(NET.seed, i).site_id for i in range(NET.network_sites)}
    recordings = read_manifest(net / MANIFEST_NAME)   # what `leakpipe build --source` reads
    assert [(r.label, r.group) for r in recordings] == [(r["class"], r["group"]) for r in rows]


def test_sites_are_mostly_single_class_with_a_few_repaired(rows) -> None:
    per_site: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        per_site[row["group"]].append(row["class"])
    single = [classes for classes in per_site.values() if len(set(classes)) == 1]
    both = [classes for classes in per_site.values() if len(set(classes)) == 2]
    assert len(single) > 0.75 * len(per_site) and both
    assert all(1 <= len(classes) <= 3 for classes in per_site.values())
    for classes in both:  # recordings before the repair, then after it
        assert classes == sorted(classes) and classes[0] == "LEAK"
    leak_sites = sum(classes[0] == "LEAK" for classes in single)
    assert leak_sites > len(single) - leak_sites  # most single-class sites leak


@pytest.mark.parametrize("seed", [20250333, 1, 2])
def test_default_size_matches_a_utility_data_set(seed: int) -> None:
    cfg = dataclasses.replace(DEFAULT, scenario="small_network", seed=seed)
    sites = network_site.network_sites(cfg)
    kinds = Counter(ns.kind for ns in sites)
    assert len(sites) == cfg.network_sites == 30
    assert kinds == {"leak": 17, "noleak": 9, "repaired": 4}
    classes = Counter(c for ns in sites for c in ns.classes)
    assert 50 <= sum(classes.values()) <= 80
    assert 0.4 <= classes["LEAK"] / sum(classes.values()) <= 0.65


# --- the logger and the site's background ----------------------------------------------------


def test_most_recordings_carry_a_dc_offset(audio) -> None:
    ratio = np.array([abs(x.mean()) / np.sqrt(np.mean(x**2)) for x in audio])
    assert np.mean(ratio > 0.02) >= 0.7          # real network: 46 of 55
    assert 0.3 <= ratio.max() <= 0.95            # real network: up to 0.78
    assert np.any(ratio < 0.01)                  # and a few loggers have none
    assert ratio.std() > 0.1                     # spread, not one value


def line_fingerprint(x: np.ndarray) -> np.ndarray:
    """Narrow lines above the local floor, dB, 20-1800 Hz, unit norm."""
    _, power = welch(x - x.mean(), fs=4096, nperseg=4096)
    lines = np.clip(10 * np.log10(power / median_filter(power, size=31)), 0, None)[20:1800]
    return lines / np.linalg.norm(lines)


def test_a_sites_recordings_share_its_tonal_background(rows, audio) -> None:
    prints = np.array([line_fingerprint(x) for x in audio])
    similarity = prints @ prints.T
    groups = np.array([r["group"] for r in rows])
    same = (groups[:, None] == groups[None, :]) & ~np.eye(len(rows), dtype=bool)
    cross = groups[:, None] != groups[None, :]
    assert same.any()
    assert similarity[same].mean() > similarity[cross].mean() + 0.3
    assert similarity[same].min() > np.median(similarity[cross])


def test_the_site_machine_line_is_heard_in_its_quiet_recordings(rows, audio) -> None:
    sites = {ns.site.site_id: ns for ns in network_site.network_sites(NET)}
    quiet = [(row, x) for row, x in zip(rows, audio, strict=True) if row["class"] == "NOLEAK"]
    assert quiet
    for row, x in quiet:
        k = int(round(sites[row["group"]].machine_hz[0]))  # 1 Hz bins
        _, power = welch(x - x.mean(), fs=4096, nperseg=4096)
        floor = np.median(power[k - 15:k + 16])
        assert 10 * np.log10(power[k - 2:k + 3].max() / floor) > 3.0, row["path"]


# --- leaks: steady, from barely above the floor to clearly audible ------------------------------


def short_time_level(x: np.ndarray, frame: int = 512) -> np.ndarray:
    """Level (dB) of non-overlapping 0.125 s frames of ``x`` at 4096 Hz, its mean removed."""
    x = x - x.mean()
    return 10 * np.log10(np.mean(x[: x.size // frame * frame].reshape(-1, frame) ** 2, axis=1))


def spread_db(x: np.ndarray) -> float:
    """p90 - p10 of the short-time level: how much a recording's level comes and goes, dB."""
    p10, p90 = np.percentile(short_time_level(x), [10, 90])
    return float(p90 - p10)


def test_leaks_range_from_the_quiet_gaps_to_above_the_loud_moments() -> None:
    sites = [ns for seed in range(6)
             for ns in network_site.network_sites(dataclasses.replace(NET, seed=seed,
                                                                 network_sites=30))
             if ns.kind != "noleak"]
    snr = np.array([ns.leak_snr_db for ns in sites])
    vehicle = np.array([ns.night.traffic_db for ns in sites])
    assert 0.02 <= np.mean(snr < 0.0) <= 0.2          # a few below the site's quiet floor
    assert 0.5 <= np.mean(snr < vehicle) <= 0.9       # most below its street's typical vehicle
    assert np.mean(snr > vehicle) >= 0.1              # some louder than it
    assert np.median(snr) > 3.0


def test_a_leaking_pipe_is_steadier_than_a_quiet_one(rows, audio) -> None:
    """A leak runs all night while traffic, draw-offs and machines come and go, so a leak
    recording's short-time level spreads less, on average and at the same site and night."""
    spread = {c: np.mean([spread_db(x) for row, x in zip(rows, audio, strict=True)
                          if row["class"] == c]) for c in ("LEAK", "NOLEAK")}
    assert spread["LEAK"] < spread["NOLEAK"] - 2.0, spread
    paired = []
    for ns in network_site.network_sites(NET):  # the same night with and without the site's leak
        quiet = dataclasses.replace(ns, classes=("NOLEAK",) * len(ns.classes))
        leaking = dataclasses.replace(ns, classes=("LEAK",) * len(ns.classes))
        x, y = (network_recording.render_network_recording(NET.seed, s, 0).astype(np.float64)
                for s in (leaking, quiet))
        paired.append((spread_db(x), spread_db(y), *(np.percentile(short_time_level(z), 10)
                                                      for z in (x, y))))
    spread_leak, spread_quiet, p10_leak, p10_quiet = np.array(paired).T
    assert np.mean(spread_leak < spread_quiet) >= 0.75
    assert np.all(p10_leak > p10_quiet)   # a leak fills the quiet gaps


def test_a_leak_is_added_at_its_drawn_level_and_changes_nothing_else() -> None:
    ns = next(ns for ns in network_site.network_sites(NET) if ns.kind == "repaired")
    quiet = dataclasses.replace(ns, classes=("NOLEAK",) * len(ns.classes))
    leaking = dataclasses.replace(ns, classes=("LEAK",) * len(ns.classes))
    x = network_recording.render_network_recording(NET.seed, leaking, 0).astype(np.float64)
    y = network_recording.render_network_recording(NET.seed, quiet, 0).astype(np.float64)
    ambient = 10.0 ** ((network_site.AMBIENT_DBFS + ns.gain_db + ns.level_db) / 20.0)
    leak_db = 20 * np.log10(np.std(x - y) / ambient)
    assert abs(leak_db - ns.leak_snr_db) <= network_recording.LEAK_NIGHT_DB + 0.2
    assert 20 * np.log10(np.std(x) / np.std(y)) > 0.0


# --- one network, one calibration -------------------------------------------------------------


@pytest.mark.parametrize("seed", [123, 20250333, 1])
def test_one_networks_loggers_share_a_gain(seed: int) -> None:
    """Loggers of one network are one model set up alike: their gains differ by their own
    small spread around the network's gain, so absolute levels compare across its sites."""
    gains = np.array([ns.gain_db for ns in network_site.network_sites(
        dataclasses.replace(NET, seed=seed, network_sites=30))])
    shared = network_site.network_gain_db(seed)
    assert abs(shared) <= network_site.NETWORK_GAIN_DB
    assert np.all(np.abs(gains - shared) <= network_site.LOGGER_GAIN_DB)
    assert np.ptp(gains) <= 2 * network_site.LOGGER_GAIN_DB < 2 * network_site.NETWORK_GAIN_DB
    assert len({round(network_site.network_gain_db(s), 6) for s in range(6)}) == 6  # per network


def test_the_loggers_gain_sets_the_written_level() -> None:
    ns = dataclasses.replace(network_site.network_sites(NET)[0], dc_offset=0.0)
    louder = dataclasses.replace(ns, gain_db=ns.gain_db + 6.0)
    x, y = (network_recording.render_network_recording(NET.seed, s, 0).astype(np.float64)
            for s in (ns, louder))
    assert 20 * np.log10(np.std(y) / np.std(x)) == pytest.approx(6.0, abs=0.05)


# --- determinism and the benchmark -----------------------------------------------------------


def test_same_seed_same_bytes_for_any_worker_count(tmp_path: Path) -> None:
    cfg = dataclasses.replace(NET, network_sites=3)
    network.generate_network(cfg, tmp_path / "one", progress=False)
    network.generate_network(dataclasses.replace(cfg, workers=2), tmp_path / "two",
                             progress=False)
    network.generate_network(dataclasses.replace(cfg, seed=124), tmp_path / "other",
                             progress=False)
    one = folder_bytes(tmp_path / "one")
    assert one == folder_bytes(tmp_path / "two")
    assert one[MANIFEST_NAME] != folder_bytes(tmp_path / "other")[MANIFEST_NAME]


def test_the_benchmark_stays_the_default_and_ignores_the_network_keys(tmp_path: Path) -> None:
    assert DEFAULT.scenario == "benchmark" and BENCH.scenario == "benchmark"
    synth.generate(BENCH, tmp_path / "a", progress=False)
    synth.generate(dataclasses.replace(BENCH, network_sites=40), tmp_path / "b", progress=False)
    assert folder_bytes(tmp_path / "a") == folder_bytes(tmp_path / "b")
    with open(tmp_path / "a" / MANIFEST_NAME, newline="") as fh:
        assert {r["class"] for r in csv.DictReader(fh)} <= set(KNOWN_CLASSES)
    with pytest.raises(ValueError, match="small_network"):
        synth.generate(NET, tmp_path / "c", progress=False)
    assert not (tmp_path / "c").exists()


# --- params and the command ------------------------------------------------------------------


def write_params(tmp_path: Path, **synth_keys: object) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    raw["synth"].update(synth_keys)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("keys", "message"), [
    ({"scenario": "city"}, "synth.scenario: expected one of ['benchmark', 'small_network']"),
    ({"network_sites": 2}, "synth.network_sites: must be >= 3, got 2"),
    ({"network_sites": 1000}, "synth.network_sites: must be <= 999, got 1000"),
    ({"network_sites": 20.5}, "synth.network_sites: expected an integer"),
])
def test_bad_network_params_name_the_key(tmp_path: Path, keys: dict, message: str) -> None:
    path = write_params(tmp_path, **keys)
    with pytest.raises(ConfigError) as info:
        load_section(path, "synth")
    assert message in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_the_command_line_picks_the_scenario_without_editing_params() -> None:
    args = build_parser().parse_args(["synth", "--scenario", "small_network", "--seed", "7",
                                      "--network-sites", "25", "--out", "/tmp/net"])
    cfg = synth.synth_config(args.params, scenario=args.scenario, seed=args.seed,
                             network_sites=args.network_sites)
    assert (cfg.scenario, cfg.seed, cfg.network_sites) == ("small_network", 7, 25)
    assert dataclasses.replace(cfg, scenario="benchmark", seed=DEFAULT.seed,
                               network_sites=DEFAULT.network_sites) == DEFAULT
    assert synth.synth_config(PARAMS, scenario=None, seed=None) == DEFAULT


def test_the_documented_recipe_renders_a_network(tmp_path: Path, mlflow_store: str) -> None:
    out = tmp_path / "net"
    assert main(["synth", "--params", str(PARAMS), "--scenario", "small_network", "--seed", "9",
                 "--network-sites", "3", "--out", str(out), "--no-progress"]) == 0
    recordings = read_manifest(out / MANIFEST_NAME)
    assert {r.label for r in recordings} <= {"LEAK", "NOLEAK"}
    assert len({r.group for r in recordings}) == 3


def test_a_bad_command_line_value_stops_with_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["synth", "--params", str(PARAMS), "--scenario", "small_network",
                 "--network-sites", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "synth.network_sites: must be >= 3, got 2" in err[0]
    assert not out.exists()
