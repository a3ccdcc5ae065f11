"""Tests of leakpipe.audio.field: the synthetic field set with a domain shift (stage `field`)."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from scipy.signal import welch

from leakpipe.audio import field, synth
from leakpipe.audio import sources as src
from leakpipe.audio.site import Machine, draw_machine, draw_site
from leakpipe.cli import main
from leakpipe.config import ConfigError, FieldConfig, SynthConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, MANIFEST_NAME
from leakpipe.data.manifest import read_manifest
from tests.conftest import PARAMS

SR = 8000
SYNTH = SynthConfig(seed=123, classes=KNOWN_CLASSES, n_sites=3, recordings_per_class=1,
                    leak_share=0.42, scale=1.0, sample_rates=(SR,), duration_s=1.0,
                    difficulty=1.0, transient_rate_hz=0.4, gain_db=20.0, clip_share=0.0,
                    dc_share=0.0, subtype="PCM_16", workers=1)
FIELD = FieldConfig(seed=77, n_sites=2, recordings_per_class=1, check_share=0.5,
                    duration_s=1.5, interference_snr_db_min=0.0, interference_snr_db_max=15.0,
                    interference_duty_min=0.3, interference_duty_max=0.8)
POOL_NAME = re.compile(r"site\d{4}_rec\d{4}\.wav")


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def field_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("field") / "field"
    field.generate_field(SYNTH, FIELD, out, progress=False)
    return out


# --- layout ----------------------------------------------------------------------------------


def test_pool_names_no_class_and_holds_no_manifest(field_set: Path) -> None:
    names = sorted(p.name for p in (field_set / field.POOL_DIR).iterdir())
    assert names and all(POOL_NAME.fullmatch(n) for n in names), names
    assert not any(cls.lower() in n.lower() for n in names for cls in KNOWN_CLASSES)
    assert sorted(p.name for p in field_set.iterdir()) == sorted(
        [field.POOL_DIR, field.CHECK_DIR, field.POOL_TRUTH])


def test_truth_rows_match_the_pool_files(field_set: Path) -> None:
    rows = read_csv(field_set / field.POOL_TRUTH)
    assert tuple(rows[0]) == field.TRUTH_FIELDS
    files = sorted(p.name for p in (field_set / field.POOL_DIR).iterdir())
    assert [r["path"] for r in rows] == files
    for row in rows:
        info = sf.info(field_set / field.POOL_DIR / row["path"])
        assert row["path"].startswith(f"{row['group']}_rec") and row["class"] in KNOWN_CLASSES
        assert info.samplerate == int(row["sample_rate"]) == SR
        assert info.frames == int(FIELD.duration_s * SR) and float(row["duration_s"]) == 1.5
        assert 0.0 <= float(row["interference_snr_db"]) <= 15.0
        assert 0.0 < float(row["interference_duty"]) <= 1.0


def test_check_set_is_a_labelled_manifest_and_every_class_is_in_both(field_set: Path) -> None:
    recordings = read_manifest(field_set / field.CHECK_DIR / MANIFEST_NAME)
    check_classes = {r.label for r in recordings}
    pool_classes = {r["class"] for r in read_csv(field_set / field.POOL_TRUTH)}
    assert check_classes == pool_classes == set(KNOWN_CLASSES)
    for rec in recordings:
        assert rec.path.is_file() and rec.path.parent.name == rec.label
        assert rec.path.name.startswith(f"{rec.group}_{rec.label}_")
    pool = {(r["group"], r["class"]) for r in read_csv(field_set / field.POOL_TRUTH)}
    assert {g for g, _ in pool} == {r.group for r in recordings} == {"site9000", "site9001"}


def test_pool_and_check_hold_different_recordings() -> None:
    items = field.plan(SYNTH, FIELD)
    keys = [(it.site.index, it.cls, it.index) for it in items]
    assert len(set(keys)) == len(keys) == len({it.rel for it in items})
    counts = synth.counts_per_site(field.render_config(SYNTH, FIELD))
    assert len(items) == FIELD.n_sites * sum(counts.values())
    assert {it.pooled for it in items} == {True, False}


@pytest.mark.parametrize(("n", "share", "expected"), [
    (2, 0.5, [1, 1]), (6, 0.5, [3, 3]), (6, 0.1, [1, 1]), (6, 0.99, [5, 5]),
    (10, 0.3, [3, 3]), (1, 0.5, [0, 1, 0, 1]), (1, 0.25, [0, 0, 0, 1]),
])
def test_check_count(n: int, share: float, expected: list[int]) -> None:
    assert [field.check_count(n, share, k) for k in range(len(expected))] == expected


def test_default_params_give_both_sets_every_class() -> None:
    synth_cfg, field_cfg = load_section(PARAMS, "synth"), load_section(PARAMS, "field")
    items = field.plan(synth_cfg, field_cfg)
    for pooled in (True, False):
        chosen = [it for it in items if it.pooled is pooled]
        assert {it.cls for it in chosen} == set(synth_cfg.classes)
        assert len(chosen) >= 5 * field_cfg.n_sites


# --- determinism and sites -------------------------------------------------------------------


def test_same_params_same_bytes_for_any_worker_count(field_set: Path, tmp_path: Path) -> None:
    field.generate_field(dataclasses.replace(SYNTH, workers=2), FIELD, tmp_path / "two",
                         progress=False)
    assert folder_bytes(tmp_path / "two") == folder_bytes(field_set)
    other = dataclasses.replace(FIELD, seed=78)
    field.generate_field(SYNTH, other, tmp_path / "other", progress=False)
    assert folder_bytes(tmp_path / "other")[field.POOL_TRUTH] != folder_bytes(field_set)[
        field.POOL_TRUTH]


def test_field_sites_are_never_labelled_sites() -> None:
    synth_cfg, field_cfg = load_section(PARAMS, "synth"), load_section(PARAMS, "field")
    labelled = [draw_site(synth_cfg.seed, i, synth_cfg.sample_rates)
                for i in range(synth_cfg.n_sites)]
    sites = {it.site for it in field.plan(synth_cfg, field_cfg)}
    assert len(sites) == field_cfg.n_sites
    assert not {s.site_id for s in sites} & {s.site_id for s in labelled}
    pressures = {round(s.pressure_bar, 9) for s in labelled}
    assert not {round(s.pressure_bar, 9) for s in sites} & pressures  # new draws, not copies
    # even with the same seed the indices differ, so the sites are new ones
    same_seed = dataclasses.replace(field_cfg, seed=synth_cfg.seed)
    assert not {it.site.site_id for it in field.plan(synth_cfg, same_seed)} & {
        s.site_id for s in labelled}


def test_too_many_labelled_sites_for_the_field_ids(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="synth.n_sites"):
        field.generate_field(dataclasses.replace(SYNTH, n_sites=field.FIELD_SITE_OFFSET + 1),
                             FIELD, tmp_path / "f", progress=False)
    assert list(tmp_path.iterdir()) == []


# --- the shift -------------------------------------------------------------------------------


def band_energy(x: np.ndarray, band: tuple[float, float], window: int) -> np.ndarray:
    """Energy in ``band`` of every window (hop = window / 2)."""
    hop = window // 2
    frames = np.stack([x[i:i + window] for i in range(0, x.size - window + 1, hop)])
    freqs = np.fft.rfftfreq(window, 1.0 / SR)
    power = np.abs(np.fft.rfft(frames * np.hanning(window), axis=1)) ** 2
    return power[:, (freqs >= band[0]) & (freqs < band[1])].sum(axis=1)


def machine_band(machine: Machine) -> tuple[float, float]:
    half = 2.0 ** (machine.bandwidth_oct / 2)
    return machine.centre_hz / half, machine.centre_hz * half


def test_every_field_recording_carries_an_intermittent_machine() -> None:
    cfg_field = dataclasses.replace(FIELD, duration_s=6.0, interference_snr_db_min=15.0,
                                    interference_snr_db_max=15.0, interference_duty_min=0.5,
                                    interference_duty_max=0.5)
    cfg = field.render_config(SYNTH, cfg_field)
    site = field.field_site(SYNTH, cfg_field, 0)
    machine = draw_machine(cfg_field.seed, site.index)
    for cls in KNOWN_CLASSES:
        on = field.render_field_recording(cfg, cfg_field, site, machine, cls, 0)
        off = field.render_field_recording(cfg, cfg_field, site, machine, cls, 0,
                                           interfere=False)
        assert on.snr_db == 15.0 and 0.0 < on.duty < 1.0 and off.duty == 0.0
        assert not np.array_equal(on.samples, off.samples)
        if cls != "BACKGROUND":  # elsewhere a leak, a valve or water use may drown it out
            continue
        window = SR // 4   # 0.25 s: the default long segment
        ratio = (band_energy(on.samples, machine_band(machine), window)
                 / band_energy(off.samples, machine_band(machine), window))
        # relative to the clean render, some windows barely change (the machine is off) and
        # others gain far more band energy (it runs)
        assert ratio.max() > 10 * ratio.min(), ratio
        assert 0.2 < np.mean(ratio > 3 * ratio.min()) < 0.8, ratio


def test_machine_noise_is_a_band_modulated_at_the_engine_rate() -> None:
    rng = np.random.default_rng(0)
    machine = Machine(centre_hz=800.0, bandwidth_oct=1.0, engine_hz=25.0, am_depth=0.8)
    site = field.field_site(SYNTH, FIELD, 0)
    x, _, duty = src.machine_noise(rng, 8 * SR, SR, site, machine, 0.99)
    assert duty > 0.7
    freqs, power = welch(x, fs=SR, nperseg=2048)
    inside = (freqs >= 800 / 1.6) & (freqs < 800 * 1.6)
    assert power[inside].sum() > 0.85 * power.sum()
    envelope = np.abs(np.fft.rfft(x**2 - np.mean(x**2)))
    env_freqs = np.fft.rfftfreq(x.size, 1.0 / SR)
    search = (env_freqs > 10) & (env_freqs < 60)
    assert abs(env_freqs[search][np.argmax(envelope[search])] - 25.0) < 0.5


def test_machine_gate_runs_in_bursts_near_its_duty() -> None:
    rng = np.random.default_rng(1)
    gates = [src.machine_gate(rng, 60 * SR, SR, duty) for duty in (0.3, 0.8)]
    low, high = (float(np.mean(g)) for g in gates)
    assert 0.15 < low < 0.45 and 0.6 < high < 0.9
    for gate in gates:
        assert gate.min() == 0.0 and gate.max() == 1.0
        assert np.max(np.abs(np.diff(gate))) < 0.01        # smooth ramps, no clicks
    short = src.machine_gate(np.random.default_rng(2), SR // 2, SR, 0.05)
    assert short.max() > 0.99                                 # never without a burst


def test_labelled_recordings_are_unchanged_by_the_hook() -> None:
    site = draw_site(SYNTH.seed, 1, (SR,))
    for cls in ("LEAK", "NORMAL", "UNCLASSIFIED"):
        plain = synth.render_recording(SYNTH, site, cls, 0)
        silent = synth.render_recording(SYNTH, site, cls, 0, extra=lambda n, sr: np.zeros(n))
        assert plain.tobytes() == silent.tobytes()    # the hook draws nothing of its own
    cfg = field.render_config(SYNTH, FIELD)
    fsite = field.field_site(SYNTH, FIELD, 1)
    clean = field.render_field_recording(cfg, FIELD, fsite, draw_machine(FIELD.seed, 9001),
                                         "LEAK", 0, interfere=False)
    assert clean.samples.tobytes() == synth.render_recording(cfg, fsite, "LEAK", 0).tobytes()


# --- params, CLI, atomic output --------------------------------------------------------------


def bad_params(tmp_path: Path, **values: object) -> Path:
    raw = yaml.safe_load(PARAMS.read_text())
    raw["field"].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(("values", "message"), [
    ({"duration_s": -1}, "field.duration_s: must be > 0, got -1"),
    ({"check_share": 1.0}, "field.check_share: must be < 1"),
    ({"interference_snr_db_min": 20.0}, "field.interference_snr_db_min: must not exceed"),
    ({"n_sites": "ten"}, "field.n_sites: expected an integer"),
])
def test_bad_field_params_name_the_key(tmp_path: Path, values: dict, message: str) -> None:
    path = bad_params(tmp_path, **values)
    with pytest.raises(ConfigError) as info:
        load_section(path, "field")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_stops_on_a_bad_param_with_one_line(tmp_path: Path, capsys) -> None:
    path = bad_params(tmp_path, duration_s=-1)
    assert main(["field", "--params", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}: field.duration_s: must be > 0, got -1.0"]
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as info:
        main(["field", "--help"])
    assert info.value.code == 0 and "--no-progress" in capsys.readouterr().out


def test_failure_leaves_no_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real, calls = field.render_field_recording, {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 2:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(field, "render_field_recording", failing)
    with pytest.raises(RuntimeError, match="boom"):
        field.generate_field(SYNTH, FIELD, tmp_path / "field", progress=False)
    assert list(tmp_path.iterdir()) == []
