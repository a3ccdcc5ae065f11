"""The inference form: the same outputs as LeakCNN, and only where the rewrite is exact."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from leakpipe.config import load_section
from leakpipe.inference import MelConvNet, has_inference_form, inference_form, max_pool
from leakpipe.model import LeakCNN, create_model
from tests.conftest import PARAMS

ATOL = 1e-5


def _trained_like(model: LeakCNN, seed: int) -> LeakCNN:
    """Random non-zero biases too (init zeroes them), so every parameter is exercised."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return model.eval()


@pytest.mark.parametrize(("n_mels", "widths", "pool_h"), [
    (64, (32, 64, 128), 16),   # the default: mel axis 64 -> 16 rows, adaptive pool skipped
    (64, (8, 8, 8), 4),        # adaptive pool 16 -> 4 rows
    (30, (4, 6, 8), 5),        # 30 -> 15 -> 7 (odd: pooling floors) -> adaptive 5
    (9, (3, 3, 3), 3),         # 9 -> 4 -> 2 -> adaptive (upsampling) 3
])
def test_outputs_match_leakcnn(n_mels: int, widths: tuple[int, int, int], pool_h: int) -> None:
    torch.manual_seed(0)
    model = _trained_like(LeakCNN(5, widths=widths, pool_h=pool_h, hidden=32), seed=1)
    x = torch.randn(40, 1, n_mels, 1) * 20 - 40                     # log-mel-like values
    fast = inference_form(model, n_frames=1)
    assert isinstance(fast, MelConvNet)
    with torch.inference_mode():
        logits, leak = model(x)
        fast_logits, fast_leak = fast(x)
    torch.testing.assert_close(fast_logits, logits, atol=ATOL, rtol=1e-5)
    torch.testing.assert_close(fast_leak, leak, atol=ATOL, rtol=1e-5)
    # the same class wins, except where the reference's top two are within the tolerance
    flipped = fast_logits.argmax(-1) != logits.argmax(-1)
    top2 = logits.topk(2, dim=-1).values
    assert bool(((top2[:, 0] - top2[:, 1]) <= 2 * (ATOL + 1e-5 * top2[:, 0].abs()))[flipped].all())


def test_the_default_model_has_an_inference_form() -> None:
    model = create_model(load_section(PARAMS, "model"), n_classes=5).eval()
    assert has_inference_form(model, 1)
    x = torch.randn(8, 1, 64, 1)
    with torch.inference_mode():
        torch.testing.assert_close(inference_form(model, 1)(x)[0], model(x)[0], atol=ATOL,
                                   rtol=1e-5)


def test_several_frames_run_the_model_unchanged() -> None:
    model = LeakCNN(3, widths=(4, 4, 4), pool_h=2, hidden=8)
    assert not has_inference_form(model, 3)
    assert inference_form(model, 3) is model
    assert not model.training


def test_other_networks_run_unchanged() -> None:
    class Wider(LeakCNN):
        pass

    other = Wider(3, widths=(4, 4, 4), pool_h=2, hidden=8)
    plain = nn.Sequential(nn.Flatten(), nn.Linear(64, 2))
    assert inference_form(other, 1) is other
    assert inference_form(plain, 1) is plain


def test_inference_form_follows_later_weight_changes_only_when_rebuilt() -> None:
    model = LeakCNN(3, widths=(4, 4, 4), pool_h=2, hidden=8).eval()
    fast = inference_form(model, 1)
    with torch.no_grad():
        model.features[0][0].weight.mul_(2.0)
    x = torch.randn(4, 1, 16, 1)
    with torch.inference_mode():
        assert not torch.allclose(fast(x)[0], model(x)[0])          # a copy of the old conv
        torch.testing.assert_close(inference_form(model, 1)(x)[0], model(x)[0], atol=ATOL,
                                   rtol=1e-5)


def test_inference_form_refuses_training_mode() -> None:
    fast = inference_form(LeakCNN(3, widths=(4, 4, 4), pool_h=2, hidden=8), 1)
    assert not fast.training
    fast.eval()
    with pytest.raises(RuntimeError, match="inference form"):
        fast.train()


@pytest.mark.parametrize(("length", "size"), [(8, 2), (7, 2), (2, 2), (9, 3)])
def test_max_pool_equals_max_pool1d(length: int, size: int) -> None:
    h = torch.randn(3, 4, length)
    assert torch.equal(max_pool(h, size), F.max_pool1d(h, size))


def test_building_the_inference_form_draws_no_random_numbers() -> None:
    """Validation builds the form every epoch: it must leave the global generator alone, or
    training's dropout / augmentation would depend on validation."""
    from leakpipe.config import ModelConfig
    from leakpipe.inference import inference_form
    from leakpipe.model import create_model

    model = create_model(ModelConfig(widths=(4, 8, 8), dropout=0.1, pool_h=2, hidden=16), 5)
    torch.manual_seed(3)
    want = torch.rand(4)
    torch.manual_seed(3)
    inference_form(model.eval(), 1)
    assert torch.equal(torch.rand(4), want)
