"""`model.tonal_median`: the convolutions see the spectrum with narrow lines removed; 0 is the
network as before; the inference form, the params key and old model files agree."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakpipe.config import ConfigError, ModelConfig, from_mapping
from leakpipe.config.training import ADDED_DEFAULTS, with_added_defaults
from leakpipe.inference import MelConvNet
from leakpipe.model import LeakCNN, create_model, tonal_median
from tests.helpers_detector import SMALL_MODEL

N_MELS = 32


def test_a_narrow_line_vanishes_and_a_broadband_slope_stays() -> None:
    slope = torch.linspace(-60.0, -20.0, N_MELS).view(1, 1, N_MELS, 1)
    line = slope.clone()
    line[0, 0, 12, 0] += 30.0                       # a tone two bands wide at most
    line[0, 0, 13, 0] += 25.0
    filtered = tonal_median(line, 5)
    step = float(slope[0, 0, 1, 0] - slope[0, 0, 0, 0])
    # on a slope the median may shift by the two raised bands' steps, never by the 30 dB line
    assert (filtered - slope).abs().max() <= 2 * step + 1e-4
    assert torch.allclose(filtered[0, 0, :8], slope[0, 0, :8])
    assert torch.equal(tonal_median(line, 0), line)
    assert filtered.shape == line.shape


def test_the_edges_keep_the_envelope_and_frames_are_filtered_apart() -> None:
    x = torch.stack([torch.full((N_MELS,), -40.0), torch.full((N_MELS,), -10.0)], dim=-1)
    x = x.view(1, 1, N_MELS, 2)
    assert torch.equal(tonal_median(x, 7), x)        # flat per frame: nothing to remove


def test_zero_is_the_original_network_and_the_inference_form_matches() -> None:
    torch.manual_seed(0)
    plain = LeakCNN(3, widths=(4, 8, 8), pool_h=8, hidden=8, level_input=True).eval()
    torch.manual_seed(0)
    filtered = LeakCNN(3, widths=(4, 8, 8), pool_h=8, hidden=8, level_input=True,
                       tonal_median=5).eval()
    assert plain.state_dict().keys() == filtered.state_dict().keys()  # no new parameter
    x = torch.randn(6, 1, N_MELS, 1) * 10 - 50
    x[:, :, 10] += 40.0                              # a line the filter removes
    with torch.no_grad():
        assert not torch.allclose(plain(x)[0], filtered(x)[0])
        for model in (plain, filtered):
            logits, leak = model(x)
            fast_logits, fast_leak = MelConvNet(model)(x)
            assert torch.allclose(logits, fast_logits, atol=1e-5)
            assert torch.allclose(leak, fast_leak, atol=1e-5)


def test_create_model_passes_the_key() -> None:
    cfg = dataclasses.replace(SMALL_MODEL, tonal_median=3)
    assert create_model(cfg, 2).tonal_median == 3


@pytest.mark.parametrize("value", [2, -1])
def test_even_or_negative_widths_are_refused(value: int) -> None:
    raw = {**dataclasses.asdict(SMALL_MODEL), "tonal_median": value}
    with pytest.raises(ConfigError, match=r"model\.tonal_median"):
        from_mapping(ModelConfig, raw, "model")


def test_model_files_without_the_key_mean_off() -> None:
    assert ADDED_DEFAULTS["model"]["tonal_median"] == 0
    old = {k: v for k, v in dataclasses.asdict(SMALL_MODEL).items() if k != "tonal_median"}
    assert with_added_defaults("model", old)["tonal_median"] == 0
