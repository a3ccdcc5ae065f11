"""Losses against hand-computed values; non-finite losses fail fast naming the components."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import pytest
import torch

from leakpipe.config import ConfigError, TrainConfig, from_mapping, load_section
from leakpipe.model import LeakCNN
from leakpipe.train.losses import (
    LossConfig,
    LossParts,
    NonFiniteLossError,
    NonFiniteWatch,
    build_loss,
    check_finite,
    class_weights,
    combined_loss,
    focal_loss,
    leak_aux_bce,
    oversampled_counts,
    weighted_ce,
)
from tests.conftest import PARAMS

LN2 = math.log(2.0)


def _cfg(**kw) -> LossConfig:
    base = dict(kind="ce", focal_gamma=2.0, focal_alpha=0.25, leak_weight_boost=1.0,
                leak_aux_weight=0.5, leak_oversample_factor=1)
    return LossConfig(**{**base, **kw})


def test_class_weights_inverse_frequency_mean_one_then_leak_boost() -> None:
    # inverse (0.1, 1/30, 1/60), mean 0.05 -> (2, 2/3, 1/3); LEAK (index 2) x 2 -> 2/3
    weights = class_weights([10, 30, 60], leak_index=2, leak_boost=2.0)
    assert weights.tolist() == pytest.approx([2.0, 2 / 3, 2 / 3])


def test_absent_class_gets_zero_weight() -> None:
    weights = class_weights([10, 0, 10], leak_index=0, leak_boost=1.0)
    assert weights.tolist() == pytest.approx([1.0, 0.0, 1.0])


def test_oversampling_enters_the_counts_so_it_does_not_stack_with_weights() -> None:
    counts = oversampled_counts([30, 10], leak_index=1, factor=3)
    assert counts == [30.0, 30.0]
    assert class_weights(counts, 1, 1.0).tolist() == pytest.approx([1.0, 1.0])


def test_weighted_ce_is_the_weighted_mean() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])   # p(y) = 1/2 and 1/4
    y = torch.tensor([0, 1])
    weight = torch.tensor([1.0, 3.0])
    expected = (1 * LN2 + 3 * math.log(4.0)) / (1 + 3)
    assert weighted_ce(logits, y, weight).item() == pytest.approx(expected)


def test_focal_loss_hand_computed() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    y = torch.tensor([1, 0])                                   # p_t = 1/2 (LEAK), 3/4
    got = focal_loss(logits, y, gamma=2.0, alpha=0.25, leak_index=1).item()
    leak = 0.25 * 0.5 ** 2 * LN2
    other = 0.75 * 0.25 ** 2 * -math.log(0.75)
    assert got == pytest.approx((leak + other) / 2)


def test_focal_without_focusing_is_alpha_weighted_ce() -> None:
    logits, y = torch.randn(16, 4), torch.randint(0, 4, (16,))
    got = focal_loss(logits, y, gamma=0.0, alpha=0.5, leak_index=2)
    assert got.item() == pytest.approx(0.5 * weighted_ce(logits, y).item(), rel=1e-5)


def test_aux_bce_targets_the_leak_index() -> None:
    leak_logit = torch.tensor([0.0, math.log(3.0)])            # sigmoid = 1/2, 3/4
    y = torch.tensor([2, 0])                                    # LEAK (index 2), not LEAK
    expected = (LN2 + -math.log(0.25)) / 2
    assert leak_aux_bce(leak_logit, y, leak_index=2).item() == pytest.approx(expected)


def test_total_is_class_plus_weighted_aux() -> None:
    logits, leak_logit, y = torch.randn(8, 3), torch.randn(8), torch.randint(0, 3, (8,))
    parts = combined_loss(logits, leak_logit, y, class_loss=weighted_ce, leak_index=1,
                          aux_weight=0.3)
    assert parts.total.item() == pytest.approx(parts.cls.item() + 0.3 * parts.aux.item())


@pytest.mark.parametrize("kind", ["ce", "focal"])
def test_build_loss_binds_the_config(kind: str) -> None:
    loss = build_loss(_cfg(kind=kind, leak_weight_boost=5.0), [10, 10], leak_index=1)
    logits, y = torch.tensor([[0.0, 0.0]]), torch.tensor([0])
    parts = loss(logits, torch.zeros(1), y)
    # ce: one NOLEAK sample, weighted mean -> plain CE ln 2; focal: 0.75 * 0.25 * ln 2
    expected = LN2 if kind == "ce" else 0.75 * 0.25 * LN2
    assert parts.cls.item() == pytest.approx(expected)
    assert parts.aux.item() == pytest.approx(LN2)


def test_boost_changes_the_leak_term_only_in_the_weights() -> None:
    plain = build_loss(_cfg(), [10, 10], 1)
    boosted = build_loss(_cfg(leak_weight_boost=4.0), [10, 10], 1)
    logits = torch.tensor([[2.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1])                                   # one wrong-ish leak
    assert boosted(logits, torch.zeros(2), y).cls > plain(logits, torch.zeros(2), y).cls


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny tensors: one thread is faster and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_loss_decreases_on_separable_toy_data() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 1, 8, 1)
    y = (x[:, 0, :4, 0].mean(dim=1) > 0).long()               # class = sign of the low bands
    model = LeakCNN(2, widths=(4, 8, 8), dropout=0.0, pool_h=2, hidden=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss_fn = build_loss(_cfg(), [int((y == 0).sum()), int((y == 1).sum())], leak_index=1)
    losses = []
    for _ in range(30):
        parts = loss_fn(*model(x), y)
        opt.zero_grad()
        parts.total.backward()
        opt.step()
        losses.append(parts.total.item())
    assert losses[-1] < 0.5 * losses[0]


def test_non_finite_loss_names_every_component() -> None:
    parts = LossParts(total=torch.tensor(float("nan")), cls=torch.tensor(float("nan")),
                      aux=torch.tensor(0.25))
    with pytest.raises(NonFiniteLossError, match=r"at step 7: total=nan class=nan aux=0.25"):
        check_finite(parts, "at step 7")


def test_finite_loss_passes() -> None:
    check_finite(LossParts(torch.tensor(1.0), torch.tensor(0.5), torch.tensor(1.0)), "x")


def test_watch_reports_the_first_bad_step_without_earlier_syncs() -> None:
    watch = NonFiniteWatch("cpu")
    ok = LossParts(torch.tensor(1.0), torch.tensor(1.0), torch.tensor(0.0))
    bad = LossParts(torch.tensor(float("inf")), torch.tensor(float("inf")), torch.tensor(2.0))
    worse = LossParts(torch.tensor(float("nan")), torch.tensor(1.0), torch.tensor(float("nan")))
    watch.update(ok, 1)
    watch.raise_if_seen("so far")                                  # nothing seen yet
    for step, parts in [(2, bad), (3, worse), (4, ok)]:
        watch.update(parts, step)
    with pytest.raises(NonFiniteLossError, match=r"first at step 2: total=inf class=inf aux=2"):
        watch.raise_if_seen("in epoch 0")


# ---------------------------------------------------------------------------------------------
# label smoothing (train.label_smoothing)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ce", "focal"])
def test_zero_smoothing_is_the_loss_of_before_bit_for_bit(kind: str) -> None:
    torch.manual_seed(0)
    logits, leak_logit, y = torch.randn(32, 5), torch.randn(32), torch.randint(0, 5, (32,))
    counts, leak = [40, 30, 20, 10, 5], 2
    parts = build_loss(_cfg(kind=kind, label_smoothing=0.0), counts, leak)(logits, leak_logit, y)
    if kind == "ce":          # the formulas as they were, without any smoothing argument
        weight = class_weights(oversampled_counts(counts, leak, 1), leak, 1.0)
        cls = torch.nn.functional.cross_entropy(logits.float(), y, weight=weight)
    else:
        log_p = torch.log_softmax(logits, dim=-1).gather(1, y[:, None]).squeeze(1)
        alpha_t = torch.where(y == leak, 0.25, 0.75)
        cls = (-alpha_t * (1.0 - log_p.exp()).pow(2.0) * log_p).mean()
    aux = torch.nn.functional.binary_cross_entropy_with_logits(leak_logit, (y == leak).float())
    assert torch.equal(parts.cls, cls) and torch.equal(parts.aux, aux)
    assert torch.equal(parts.total, cls + 0.5 * aux)


def test_smoothed_ce_is_the_cross_entropy_against_smoothed_targets() -> None:
    torch.manual_seed(1)
    logits, y, eps = torch.randn(16, 4), torch.randint(0, 4, (16,)), 0.2
    target = torch.full((16, 4), eps / 4).scatter_add_(1, y[:, None],
                                                      torch.full((16, 1), 1 - eps))
    expected = -(target * torch.log_softmax(logits, -1)).sum(1).mean()
    got = weighted_ce(logits, y, smoothing=eps)
    assert got.item() == pytest.approx(expected.item(), rel=1e-6)
    assert weighted_ce(logits, y, torch.ones(4), smoothing=eps).item() == pytest.approx(
        got.item(), rel=1e-6)                              # equal weights: the plain mean


def test_smoothed_focal_without_focusing_is_alpha_weighted_smoothed_ce() -> None:
    torch.manual_seed(2)
    logits, y = torch.randn(16, 4), torch.randint(0, 4, (16,))
    got = focal_loss(logits, y, gamma=0.0, alpha=0.5, leak_index=2, smoothing=0.1)
    expected = 0.5 * weighted_ce(logits, y, smoothing=0.1)
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_smoothed_focal_is_continuous_at_zero() -> None:
    torch.manual_seed(3)
    logits, y = torch.randn(16, 3), torch.randint(0, 3, (16,))
    plain = focal_loss(logits, y, gamma=2.0, alpha=0.3, leak_index=1)
    tiny = focal_loss(logits, y, gamma=2.0, alpha=0.3, leak_index=1, smoothing=1e-7)
    assert tiny.item() == pytest.approx(plain.item(), rel=1e-5)


def test_smoothed_aux_targets_are_half_eps_from_zero_and_one() -> None:
    eps = 0.2
    y = torch.tensor([2, 0, 2, 1])                              # LEAK is index 2
    p = torch.where(y == 2, 1 - eps / 2, eps / 2)
    leak_logit = torch.log(p / (1 - p)).requires_grad_(True)   # the smoothed targets exactly
    loss = leak_aux_bce(leak_logit, y, leak_index=2, smoothing=eps)
    loss.backward()
    assert leak_logit.grad.abs().max().item() < 1e-6           # the minimum: nothing to learn
    entropy = -(eps / 2 * math.log(eps / 2) + (1 - eps / 2) * math.log(1 - eps / 2))
    assert loss.item() == pytest.approx(entropy, rel=1e-5)


def test_build_loss_smooths_both_heads() -> None:
    logits, leak_logit, y = torch.tensor([[8.0, -8.0]]), torch.tensor([-8.0]), torch.tensor([0])
    sharp = build_loss(_cfg(), [10, 10], 1)(logits, leak_logit, y)
    smooth = build_loss(_cfg(label_smoothing=0.2), [10, 10], 1)(logits, leak_logit, y)
    assert smooth.cls > sharp.cls and smooth.aux > sharp.aux   # confident: penalised now


def test_label_smoothing_is_a_checked_train_key() -> None:
    raw = dataclasses.asdict(load_section(PARAMS, "train"))
    assert raw["label_smoothing"] == 0.0
    assert LossConfig.from_train(from_mapping(TrainConfig, {**raw, "label_smoothing": 0.1},
                                              "train")).label_smoothing == 0.1
    for bad, rule in ((0.5, "< 0.5"), (-0.1, ">= 0")):
        with pytest.raises(ConfigError, match=rf"train\.label_smoothing: must be {rule}"):
            from_mapping(TrainConfig, {**raw, "label_smoothing": bad}, "train", "params.yaml")
