"""Tests of leakpipe.audio: synth, site, sources, tones_transients: layout, determinism, physics."""

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
from leakpipe.audio import spectral, synth, tones_transients
from leakpipe.audio.benchmark_recording import HEADROOM_DB, render_recording
from leakpipe.audio.site import MATERIALS, Site, draw_site
from leakpipe.config import SynthConfig, load_section
from leakpipe.constants import KNOWN_CLASSES, MANIFEST_NAME

SR = 8000
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"

BASE = SynthConfig(seed=123, classes=KNOWN_CLASSES, n_sites=3, recordings_per_class=1,
                   leak_share=0.42, scale=1.0, sample_rates=(SR,), duration_s=1.0,
                   difficulty=1.0, transient_rate_hz=0.4, gain_db=20.0, clip_share=0.0,
                   dc_share=0.0, subtype="PCM_16", workers=1)
METAL, PLASTIC = draw_site(BASE.seed, 0, (SR,)), draw_site(BASE.seed, 1, (SR,))


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
    spectra = [psd(render_recording(cfg, site, cls, i)) for i in range(count)]
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
    assert 1200 <= total <= 2000   # synth + build stay around 1.5 min of `make run` here
    split = load_section(PARAMS, "build").split
    assert cfg.n_sites * split.test >= 8      # the test split holds at least 8 sites
    assert cfg.n_sites * split.train >= 30    # and training sees many sites, not many takes
    assert 0.35 <= counts["LEAK"] / sum(counts.values()) < 0.5


def test_generate_writes_manifest_and_readable_files(tmp_path):
    out = tmp_path / "raw"
    summary = synth.generate(BASE, out, progress=False)
    rows = read_manifest(out)
    with open(out / MANIFEST_NAME) as fh:
        header = "path,class,group,material,sensor,sample_rate,duration_s,seed"
        assert fh.readline().strip() == header
    per_site = synth.counts_per_site(BASE)
    assert summary.n_recordings == len(rows) == BASE.n_sites * sum(per_site.values())
    assert dict(summary.class_counts) == {c: k * BASE.n_sites for c, k in per_site.items()}
    for site in range(BASE.n_sites):
        site_rows = [r for r in rows if r["group"] == draw_site(BASE.seed, site).site_id]
        assert {r["sensor"] for r in site_rows} == {draw_site(BASE.seed, site).sensor}
        assert len(site_rows) == sum(per_site.values())
        assert {r["material"] for r in site_rows} == {MATERIALS[site % 2]}
    for row in rows:
        info = sf.info(out / row["path"])
        assert row["path"].startswith(f"{row['class']}/{row['group']}_{row['class']}_")
        assert (info.samplerate, info.frames, info.subtype) == (SR, SR, "PCM_16")
        assert (row["sample_rate"], float(row["duration_s"]), row["seed"]) == ("8000", 1.0, "123")
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


def test_a_worker_pool_writes_the_same_bytes(tmp_path):
    cfg = dataclasses.replace(BASE, classes=("LEAK", "NORMAL"), n_sites=2)
    synth.generate(cfg, tmp_path / "one", progress=False)
    synth.generate(dataclasses.replace(cfg, workers=2), tmp_path / "two", progress=False)
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "two")


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path):
    cfg = dataclasses.replace(BASE, classes=("LEAK", "NORMAL", "UNCLASSIFIED"))
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        synth.generate(dataclasses.replace(cfg, seed=seed), tmp_path / name, progress=False)
    a, b, c = (folder_bytes(tmp_path / n) for n in "abc")
    assert a == b
    wavs = [k for k in a if k.endswith(".wav")]
    assert wavs and all(a[k] != c[k] for k in wavs)


def test_render_does_not_depend_on_order():
    site = draw_site(BASE.seed, 2, (SR,))
    keys = [(cls, i) for cls in ("LEAK", "CRACK") for i in range(2)]
    forward = {k: render_recording(BASE, site, *k) for k in keys}
    backward = {k: render_recording(BASE, site, *k) for k in reversed(keys)}
    assert all(np.array_equal(forward[k], backward[k]) for k in keys)
    assert not np.array_equal(forward[("LEAK", 0)], forward[("LEAK", 1)])


def test_sites_are_deterministic_and_alternate_material():
    assert draw_site(7, 3) == draw_site(7, 3)
    assert draw_site(7, 3) != draw_site(8, 3)
    assert [draw_site(7, i).material for i in range(4)] == ["metal", "plastic"] * 2


# --- physics ---------------------------------------------------------------------------------


def test_pipe_attenuation_grows_with_frequency_distance_and_softness():
    freqs = np.array([100.0, 500.0, 1000.0])
    for site in (METAL, PLASTIC):
        near, far = src.pipe_transfer(freqs, site, 5.0), src.pipe_transfer(freqs, site, 50.0)
        ripple = 10 ** (src.PIPE_RIPPLE_DB / 20)  # the section ripple spans this ratio at most
        assert np.all(far < near)
        assert far[2] / far[0] < near[2] / near[0] * ripple
    # the same 20 m of plastic pipe take far more of 1 kHz away than 20 m of metal pipe
    assert (src.pipe_transfer(freqs, PLASTIC, 20.0)[2]
            < 0.1 * src.pipe_transfer(freqs, METAL, 20.0)[2])


def test_plastic_leaks_sound_lower_than_metal_leaks():
    freqs = np.fft.rfftfreq(4 * SR, 1.0 / SR)
    sites = [draw_site(11, i, (SR,)) for i in range(10)]

    def centroid_of(site: Site) -> float:  # leak spectrum at a fixed corner and distance
        power = src.leak_gain(freqs, site, 800.0, 20.0) ** 2
        return float((freqs * power).sum() / power.sum())

    metal = [centroid_of(s) for s in sites if s.material == "metal"]
    plastic = [centroid_of(s) for s in sites if s.material == "plastic"]
    assert min(metal) > max(plastic)


def test_hydrophone_ambient_is_dominated_by_low_frequencies():
    sites = [draw_site(11, i, (SR,)) for i in range(20)]
    hydro = next(s for s in sites if s.sensor == "hydrophone")
    accel = next(s for s in sites if s.sensor == "accelerometer")
    rng = np.random.default_rng(3)
    for site, low_share in ((hydro, 0.75), (accel, None)):
        heard = spectral.apply_sensor(src.ambient_noise(rng, 4 * SR, SR, site), SR, site)
        freqs, power = psd(heard, nperseg=4096)
        share = band_share(freqs, power, (0.0, 60.0))
        if low_share is not None:
            assert share > low_share
        else:
            assert share < 0.5


def test_accelerometer_rises_12_db_per_octave_below_its_resonance():
    site = next(s for s in (draw_site(11, i, (SR,)) for i in range(20))
                if s.sensor == "accelerometer")
    r = spectral.sensor_response(np.array([200.0, 400.0]), site)
    assert 20 * np.log10(r[1] / r[0]) == pytest.approx(12.0, abs=1.0)


@pytest.mark.parametrize("rate", [8000, 16000, 44100])
def test_logger_band_limit_leaves_nothing_near_nyquist(rate):
    site = dataclasses.replace(METAL, sensor="hydrophone", sample_rate=rate)
    freqs = np.array([0.3 * rate, 0.49 * rate])
    r = spectral.sensor_response(freqs, site) / spectral.sensor_response(freqs[:1], site)
    assert r[1] < 0.05


def test_in_band_gain_sets_the_snr_against_the_ambient():
    rng = np.random.default_rng(4)
    n = 4 * SR
    freqs = np.fft.rfftfreq(n, 1.0 / SR)
    for site in (METAL, PLASTIC):
        hiss, gain = src.leak_noise(rng, n, SR, site)
        scaled = hiss * src.in_band_gain(freqs, gain, site, 6.0)
        heard_leak = spectral.apply_sensor(scaled, SR, site)
        heard_amb = spectral.apply_sensor(src.ambient_noise(rng, n, SR, site), SR, site)
        band = src.leak_band(freqs, (gain * spectral.sensor_response(freqs, site)) ** 2)
        f, p_leak = psd(heard_leak, nperseg=2048)
        _, p_amb = psd(heard_amb, nperseg=2048)
        inside = (f >= band[0]) & (f < band[1])
        snr = 10 * np.log10(p_leak[inside].sum() / p_amb[inside].sum())
        assert snr == pytest.approx(6.0, abs=2.0)


def test_water_use_is_leak_like_hiss_with_more_high_frequencies():
    rng = np.random.default_rng(5)
    for site in (METAL, PLASTIC):
        use = [centroid(src.water_use(rng, 4 * SR, SR, site)[0]) for _ in range(4)]
        flow = [centroid(src.flow_noise(rng, 4 * SR, SR, site)) for _ in range(4)]
        assert np.median(use) > 2 * np.median(flow)


def test_normal_flow_noise_is_lower_than_leak_noise_in_metal_pipes():
    # (in plastic pipes a distant leak is as low as flow noise: Gao et al. measured leak
    # noise mostly below 100 Hz there, which is what makes them hard)
    rng = np.random.default_rng(1)
    for site in (METAL, draw_site(BASE.seed, 2, (SR,))):
        flow = src.flow_noise(rng, 4 * SR, SR, site)
        assert centroid(flow) < centroid(src.leak_noise(rng, 4 * SR, SR, site)[0])


@pytest.mark.parametrize("index", range(4))
def test_background_shows_a_mains_hum_peak(index):
    site = draw_site(BASE.seed, index, (SR,))
    x = render_recording(dataclasses.replace(BASE, duration_s=4.0), site, "BACKGROUND", 0)
    freqs, power = psd(x, nperseg=4 * SR)  # 0.25 Hz bins
    low = (freqs > 40) & (freqs < 70)
    assert abs(freqs[low][np.argmax(power[low])] - site.mains_hz) < 0.5


def test_crack_is_impulsive_and_leak_is_sustained():
    cfg = dataclasses.replace(BASE, duration_s=3.0, transient_rate_hz=0.0)

    def crest_of_frame_energy(x: np.ndarray) -> float:
        energy = (x[: x.size // 256 * 256].reshape(-1, 256) ** 2).mean(axis=1)
        return float(energy.max() / np.median(energy))

    crack = [crest_of_frame_energy(render_recording(cfg, METAL, "CRACK", i))
             for i in range(4)]
    leak = [crest_of_frame_energy(render_recording(cfg, METAL, "LEAK", i))
            for i in range(4)]
    assert min(crack) > 5 * max(leak)


def test_transients_add_short_loud_events():
    rng = np.random.default_rng(2)
    none = tones_transients.transients(rng, 5 * SR, SR, METAL, rate_hz=0.0)
    many = tones_transients.transients(rng, 5 * SR, SR, METAL, rate_hz=4.0)
    assert not none.any()
    assert np.max(np.abs(many)) > 5.0  # well above the unit-RMS ambient


def test_recordings_without_clip_share_never_clip(tmp_path):
    cfg = dataclasses.replace(BASE, transient_rate_hz=3.0, difficulty=0.0)
    for site_index in range(3):
        site = draw_site(cfg.seed, site_index, (SR,))
        for cls in KNOWN_CLASSES:
            x = render_recording(cfg, site, cls, 0)
            assert x.dtype == np.float32
            assert np.max(np.abs(x)) <= 10 ** (-HEADROOM_DB / 20) + 1e-6
    synth.generate(cfg, tmp_path / "raw", progress=False)
    for row in read_manifest(tmp_path / "raw"):
        pcm, _ = sf.read(tmp_path / "raw" / row["path"], dtype="int16")
        assert np.max(np.abs(pcm.astype(np.int32))) < 32767


def test_clip_share_and_dc_share_make_clipped_and_offset_recordings():
    cfg = dataclasses.replace(BASE, clip_share=1.0, dc_share=1.0, duration_s=2.0)
    x = render_recording(cfg, METAL, "NORMAL", 0)
    assert np.sum(np.abs(x) >= 1.0) >= 3   # hard-clipped at full scale
    y = render_recording(dataclasses.replace(cfg, clip_share=0.0), METAL, "NORMAL", 0)
    assert abs(float(np.mean(y))) > 0.1 * float(np.std(y))  # a DC offset well above drift


def test_random_gain_makes_absolute_level_no_cue():
    levels = [20 * np.log10(np.std(render_recording(BASE, METAL, "LEAK", i)))
              for i in range(12)]
    assert max(levels) - min(levels) > 15.0
    flat = dataclasses.replace(BASE, gain_db=0.0)
    flat_levels = [20 * np.log10(np.std(render_recording(flat, METAL, "BACKGROUND", i)))
                   for i in range(6)]
    assert max(flat_levels) - min(flat_levels) < max(levels) - min(levels)


def test_each_site_writes_its_own_sample_rate(tmp_path):
    cfg = dataclasses.replace(BASE, classes=("LEAK", "NORMAL"), n_sites=6,
                              sample_rates=(8000, 16000, 44100))
    synth.generate(cfg, tmp_path / "raw", progress=False)
    rows = read_manifest(tmp_path / "raw")
    rates = set()
    for row in rows:
        site = draw_site(cfg.seed, int(row["group"][4:]), cfg.sample_rates)
        info = sf.info(tmp_path / "raw" / row["path"])
        assert info.samplerate == site.sample_rate == int(row["sample_rate"])
        assert info.frames == site.sample_rate  # duration_s = 1
        rates.add(info.samplerate)
    assert len(rates) >= 2


@pytest.mark.parametrize("sample_rate", [1000, 2000, 16000])
def test_other_sample_rates_render_finite_unclipped_audio(sample_rate):
    cfg = dataclasses.replace(BASE, sample_rates=(sample_rate,), transient_rate_hz=2.0)
    site = draw_site(cfg.seed, 0, cfg.sample_rates)
    for cls in KNOWN_CLASSES:
        x = render_recording(cfg, site, cls, 0)
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
