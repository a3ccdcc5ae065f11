"""LeakCNN: the original's parameter count, output shapes, init and the model params."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from leakpipe.config import ConfigError, ModelConfig, from_mapping, load_section
from leakpipe.model import LEVEL_BANDS, LeakCNN, count_parameters, create_model
from tests.conftest import PARAMS

# conv 1->32 (320) + 32->64 (18,496) + 64->128 (73,856) + fc 2048->256 (524,544)
# + class head 256->5 (1,285) + leak head 256->1 (257)
ORIGINAL_PARAMS_5_CLASSES = 618_758


def test_default_model_is_the_original_plus_its_level_features() -> None:
    cfg = load_section(PARAMS, "model")
    original = create_model(dataclasses.replace(cfg, level_input=False), n_classes=5)
    assert count_parameters(original) == ORIGINAL_PARAMS_5_CLASSES
    default = create_model(cfg, n_classes=5)             # model.level_input: true
    n_level = 1 + LEVEL_BANDS                           # level + band levels, batch-normed
    assert count_parameters(default) == (ORIGINAL_PARAMS_5_CLASSES + n_level * cfg.hidden
                                         + 2 * n_level)


@pytest.mark.parametrize(("n_mels", "n_frames"), [(64, 1), (16, 3), (8, 1)])
def test_forward_shapes(n_mels: int, n_frames: int) -> None:
    model = LeakCNN(3, widths=(4, 8, 8), pool_h=4, hidden=16).eval()
    logits, leak_logit = model(torch.randn(6, 1, n_mels, n_frames))
    assert logits.shape == (6, 3)
    assert leak_logit.shape == (6,)


def test_kaiming_init_scales_weights_and_zeroes_biases() -> None:
    torch.manual_seed(0)
    model = LeakCNN(5)
    fc = model.fc[0]
    expected_std = (2.0 / fc.in_features) ** 0.5
    assert fc.weight.std().item() == pytest.approx(expected_std, rel=0.05)
    assert all(m.bias.abs().sum() == 0 for m in model.modules() if hasattr(m, "bias")
               and isinstance(m.bias, torch.Tensor))


def test_dropout_follows_the_config() -> None:
    cfg = ModelConfig(widths=(4, 8, 8), dropout=0.25, pool_h=2, hidden=8)
    assert create_model(cfg, 2).dropout.p == 0.25


@pytest.mark.parametrize("widths", [[32, 64], [32, 0, 128], [1, 2, 3, 4]])
def test_widths_must_be_three_positive_counts(widths: list[int]) -> None:
    raw = {"widths": widths, "dropout": 0.1, "pool_h": 4, "hidden": 8, "level_input": False,
           "tonal_median": 0}
    with pytest.raises(ConfigError, match="model.widths: must be 3 positive"):
        from_mapping(ModelConfig, raw, "model", "params.yaml")
