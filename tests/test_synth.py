"""Tests of leakpipe.audio.synth, .site and .sources: layout, determinism, physics."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import welch

from leakpipe.audio import sources as src
from leakpipe.audio import synth
from leakpipe.audio.site import MATERIALS, Site, draw_site
from leakpipe.config import SynthConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, MANIFEST_NAME

SR = 8192
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"

BASE = SynthConfig(seed=123, classes=KNOWN_CLASSES, n_sites=3, recordings_per_class=1,
                   leak_share=0.42, scale=1.0, sample_rate=SR, duration_s=1.0, difficulty=1.0,
                   transient_rate_hz=0.4, subtype="PCM_16")
METAL, PLASTIC = draw_site(BASE.seed, 0), draw_site(BASE.seed, 1)


def read_manifest(root: Path) -> list[dict[str, str]]:
    with open(root / MANIFEST_NAME, newline="") as fh:
        return list(csv.DictReader(fh))


def psd(x: np.ndarray, nperseg: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    return welch(x, fs=SR, nperseg=nperseg)


def band_share(freqs: np.ndarray, power: np.ndarray, band: tuple[float, float]) -> float:
    inside = (freqs >= band[0]) & (freqs < band[1])
    return float(power[inside].sum() / power.sum())


def centroid(x: np.ndarray) -> float:
    freqs, power = psd(x)
    return float((freqs * power).sum() / power.sum())


def mean_psd(cfg: SynthConfig, site: Site, cls: str, count: int) -> tuple[np.ndarray, ...]:
    spectra = [psd(synth.render_recording(cfg, site, cls, i)) for i in range(count)]
    return spectra[0][0], np.mean([p for _, p in spectra], axis=0)


# --- sizes and layout ------------------------------------------------------------------------


@pytest.mark.parametrize(("classes", "per_class", "share", "scale", "expected"), [
    (KNOWN_CLASSES, 3, 0.42, 1.0, {"BACKGROUND": 3, "CRACK": 3, "LEAK": 9, "NORMAL": 3,
                                   "UNCLASSIFIED": 3}),
    (("LEAK", "NORMAL"), 3, 0.5, 1.0, {"LEAK": 3, "NORMAL": 3}),
    (("LEAK", "NORMAL"), 3, 0.5, 2.0, {"LEAK": 6, "NORMAL": 6}),
    (("LEAK", "NORMAL"), 1, 0.1, 0.1, {"LEAK": 1, "NORMAL": 1}),  # never below one
])
def test_counts_per_site(classes, per_class, share, scale, expected):
    cfg = dataclasses.replace(BASE, classes=classes, recordings_per_class=per_class,
                              leak_share=share, scale=scale)
    assert synth.counts_per_site(cfg) == expected


def test_default_params_stay_small_with_a_sizable_leak_minority():
    cfg = load_section(PARAMS, "synth")
    counts = synth.counts_per_site(cfg)
    total = cfg.n_sites * sum(counts.values())
    assert 300 <= total <= 400
    assert 0.35 <= counts["LEAK"] / sum(counts.values()) < 0.5


def test_generate_writes_manifest_and_readable_files(tmp_path):
    out = tmp_path / "raw"
    summary = synth.generate(BASE, out, progress=False)
    rows = read_manifest(out)
    with open(out / MANIFEST_NAME) as fh:
        assert fh.readline().strip() == "path,class,group,material,sample_rate,duration_s,seed"
    per_site = synth.counts_per_site(BASE)
    assert summary.n_recordings == len(rows) == BASE.n_sites * sum(per_site.values())
    assert dict(summary.class_counts) == {c: k * BASE.n_sites for c, k in per_site.items()}
    for site in range(BASE.n_sites):
        site_rows = [r for r in rows if r["group"] == draw_site(BASE.seed, site).site_id]
        assert len(site_rows) == sum(per_site.values())
        assert {r["material"] for r in site_rows} == {MATERIALS[site % 2]}
    for row in rows:
        info = sf.info(out / row["path"])
        assert row["path"].startswith(f"{row['class']}/{row['group']}_{row['class']}_")
        assert (info.samplerate, info.frames, info.subtype) == (SR, SR, "PCM_16")
        assert (row["sample_rate"], float(row["duration_s"]), row["seed"]) == ("8192", 1.0, "123")
    assert json.loads(json.dumps(summary.to_dict()))["n_sites"] == BASE.n_sites


@pytest.mark.parametrize("subtype", ["PCM_24", "FLOAT"])
def test_subtype_is_respected(tmp_path, subtype):
    cfg = dataclasses.replace(BASE, classes=("LEAK", "NORMAL"), n_sites=3, subtype=subtype)
    synth.generate(cfg, tmp_path / "raw", progress=False)
    row = read_manifest(tmp_path / "raw")[0]
    assert sf.info(tmp_path / "raw" / row["path"]).subtype == subtype


def test_class_subset_writes_only_those_classes_and_the_same_recordings(tmp_path):
    synth.generate(BASE, tmp_path / "full", progress=False)
    subset = dataclasses.replace(BASE, classes=("LEAK", "CRACK"))
    synth.generate(subset, tmp_path / "sub", progress=False)
    rows = read_manifest(tmp_path / "sub")
    assert {r["class"] for r in rows} == {"LEAK", "CRACK"}
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["CRACK", "LEAK",
                                                                      MANIFEST_NAME]
    crack = [r["path"] for r in rows if r["class"] == "CRACK"]
    for rel in crack:  # a recording depends on (seed, site, class, index) only
        assert (tmp_path / "sub" / rel).read_bytes() == (tmp_path / "full" / rel).read_bytes()


# --- determinism -----------------------------------------------------------------------------


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path):
    cfg = dataclasses.replace(BASE, classes=("LEAK", "NORMAL", "UNCLASSIFIED"))
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        synth.generate(dataclasses.replace(cfg, seed=seed), tmp_path / name, progress=False)
    a, b, c = (folder_bytes(tmp_path / n) for n in "abc")
    assert a == b
    wavs = [k for k in a if k.endswith(".wav")]
    assert wavs and all(a[k] != c[k] for k in wavs)


def test_render_does_not_depend_on_order():
    site = draw_site(BASE.seed, 2)
    keys = [(cls, i) for cls in ("LEAK", "CRACK") for i in range(2)]
    forward = {k: synth.render_recording(BASE, site, *k) for k in keys}
    backward = {k: synth.render_recording(BASE, site, *k) for k in reversed(keys)}
    assert all(np.array_equal(forward[k], backward[k]) for k in keys)
    assert not np.array_equal(forward[("LEAK", 0)], forward[("LEAK", 1)])


def test_sites_are_deterministic_and_alternate_material():
    assert draw_site(7, 3) == draw_site(7, 3)
    assert draw_site(7, 3) != draw_site(8, 3)
    assert [draw_site(7, i).material for i in range(4)] == ["metal", "plastic"] * 2


# --- physics ---------------------------------------------------------------------------------


@pytest.mark.parametrize("site", [METAL, PLASTIC], ids=["metal", "plastic"])
def test_leak_puts_more_energy_in_the_resonance_band_than_normal_flow(site):
    cfg = dataclasses.replace(BASE, duration_s=3.0)
    band = src.leak_band(site)
    freqs, leak = mean_psd(cfg, site, "LEAK", 6)
    _, normal = mean_psd(cfg, site, "NORMAL", 6)
    assert band_share(freqs, leak, band) > 1.5 * band_share(freqs, normal, band)


def test_metal_leak_band_sits_above_plastic_and_below_2_khz():
    rng = np.random.default_rng(0)
    sites = [draw_site(11, i) for i in range(10)]
    cents = {s.index: centroid(src.leak_noise(rng, 4 * SR, SR, s)) for s in sites}
    metal = [cents[s.index] for s in sites if s.material == "metal"]
    plastic = [cents[s.index] for s in sites if s.material == "plastic"]
    assert min(metal) > max(plastic)
    for site in sites:
        freqs, power = psd(src.leak_noise(rng, 4 * SR, SR, site))
        assert band_share(freqs, power, (0.0, 2000.0)) > 0.7


def test_normal_flow_noise_is_lower_than_leak_noise():
    rng = np.random.default_rng(1)
    for site in (METAL, PLASTIC):
        flow = src.flow_noise(rng, 4 * SR, SR, site)
        assert centroid(flow) < centroid(src.leak_noise(rng, 4 * SR, SR, site))


@pytest.mark.parametrize("index", range(4))
def test_background_shows_a_mains_hum_peak(index):
    site = draw_site(BASE.seed, index)
    x = synth.render_recording(dataclasses.replace(BASE, duration_s=4.0), site, "BACKGROUND", 0)
    freqs, power = psd(x, nperseg=4 * SR)  # 0.25 Hz bins
    low = (freqs > 40) & (freqs < 70)
    assert abs(freqs[low][np.argmax(power[low])] - site.mains_hz) < 0.5


def test_crack_is_impulsive_and_leak_is_sustained():
    cfg = dataclasses.replace(BASE, duration_s=3.0, transient_rate_hz=0.0)

    def crest_of_frame_energy(x: np.ndarray) -> float:
        energy = (x[: x.size // 256 * 256].reshape(-1, 256) ** 2).mean(axis=1)
        return float(energy.max() / np.median(energy))

    crack = [crest_of_frame_energy(synth.render_recording(cfg, METAL, "CRACK", i))
             for i in range(4)]
    leak = [crest_of_frame_energy(synth.render_recording(cfg, METAL, "LEAK", i))
            for i in range(4)]
    assert min(crack) > 5 * max(leak)


def test_transients_add_short_loud_events():
    rng = np.random.default_rng(2)
    none = src.transients(rng, 5 * SR, SR, METAL, rate_hz=0.0)
    many = src.transients(rng, 5 * SR, SR, METAL, rate_hz=4.0)
    assert not none.any()
    assert np.max(np.abs(many)) > 5.0  # well above the unit-RMS ambient


def test_recordings_never_clip(tmp_path):
    cfg = dataclasses.replace(BASE, transient_rate_hz=3.0, difficulty=0.0)
    for site_index in range(3):
        site = draw_site(cfg.seed, site_index)
        for cls in KNOWN_CLASSES:
            x = synth.render_recording(cfg, site, cls, 0)
            assert x.dtype == np.float32
            assert np.max(np.abs(x)) <= 10 ** (-synth.HEADROOM_DB / 20) + 1e-6
    synth.generate(cfg, tmp_path / "raw", progress=False)
    for row in read_manifest(tmp_path / "raw"):
        pcm, _ = sf.read(tmp_path / "raw" / row["path"], dtype="int16")
        assert np.max(np.abs(pcm.astype(np.int32))) < 32767


@pytest.mark.parametrize("sample_rate", [1000, 2000, 16000])
def test_other_sample_rates_render_finite_unclipped_audio(sample_rate):
    cfg = dataclasses.replace(BASE, sample_rate=sample_rate, transient_rate_hz=2.0)
    for cls in KNOWN_CLASSES:
        x = synth.render_recording(cfg, METAL, cls, 0)
        assert x.shape == (sample_rate,) and np.all(np.isfinite(x))
        assert 0 < np.max(np.abs(x)) < 1.0


# --- atomic output ---------------------------------------------------------------------------


def failing_after(count: int):
    real = synth.render_recording
    calls = {"n": 0}

    def render(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > count:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    return render


def test_failure_leaves_no_output_and_no_temp_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "render_recording", failing_after(3))
    with pytest.raises(RuntimeError, match="boom"):
        synth.generate(BASE, tmp_path / "raw", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_replaced_only_after_success(tmp_path, monkeypatch):
    out = tmp_path / "raw"
    out.mkdir()
    (out / "old.txt").write_text("previous run")
    with monkeypatch.context() as patch:
        patch.setattr(synth, "render_recording", failing_after(2))
        with pytest.raises(RuntimeError):
            synth.generate(BASE, out, progress=False)
    assert (out / "old.txt").read_text() == "previous run"
    synth.generate(BASE, out, progress=False)
    assert not (out / "old.txt").exists() and (out / MANIFEST_NAME).exists()
    assert [p.name for p in tmp_path.iterdir()] == ["raw"]


def test_progress_false_prints_nothing(tmp_path, capsys):
    synth.generate(dataclasses.replace(BASE, classes=("LEAK", "NORMAL")), tmp_path / "raw",
                   progress=False)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
