"""The network: ``LeakCNN``, the original system's LeakCNNMulti with the same layers and init.

One segment's log-mel (1, n_mels, n_frames) goes through three 3x3 convolutions with two
height-only max pools, an adaptive average pool to (pool_h, 1), dropout and one hidden fully
connected layer, then two heads: the class logits and one auxiliary leak logit.

With ``model.level_input`` (``LevelFeatures``) the convolutions see each segment minus its mean
log-mel, i.e. spectral shape only, and the segment's level and coarse band levels join the
hidden layer's input: the level is a cue of its own instead of being entangled with the shape
in every conv feature. Without it the network is the original, bit for bit.

With ``model.tonal_median`` = k (odd, 0 = off) the convolutions see each segment's log-mel
spectrum after a running median over k adjacent mel bands (``tonal_median``): a narrow spectral
line (a pump's or a machine's tone, mains hum and its harmonics) is narrower than k bands and
vanishes, while a broadband spectrum (turbulent leak noise, flow) keeps its envelope. Tones
are what makes one site's background recognisable, so a network that cannot see them has less
to memorise a site by; the level features still see the raw spectrum.

``SegmentScorer`` is its serving form (the model logged to MLflow): one output tensor of class
probabilities plus the segment leak probability, so a pyfunc ``predict`` returns one array.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from leakpipe.config import ModelConfig
from leakpipe.decision.voting import ProbMode, segment_leak_prob

log = logging.getLogger(__name__)

WRAPPER_PREFIXES = ("_orig_mod.", "module.")  # torch.compile, DistributedDataParallel
KERNEL = 3      # conv kernel size (square)
PADDING = 1     # keeps height and width
POOL = (2, 1)   # halves the mel axis, keeps the (usually single) frame axis
LEVEL_BANDS = 4  # coarse band levels of LevelFeatures: equal groups of mel bands


def _conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, KERNEL, padding=PADDING), nn.ReLU(inplace=True))


def segment_level(x: torch.Tensor) -> torch.Tensor:
    """(B, 1, M, T) log-mel dB -> (B, 1, 1, 1) float32: each segment's mean over bands, frames."""
    return x.float().mean(dim=(1, 2, 3), keepdim=True)


def tonal_median(x: torch.Tensor, k: int) -> torch.Tensor:
    """(B, 1, M, T) -> the same shape: running median over ``k`` (odd) adjacent mel bands, the
    edges replicated; k <= 1 returns ``x``."""
    if k <= 1:
        return x
    half = k // 2
    padded = F.pad(x.transpose(2, 3), (half, half, 0, 0), mode="replicate")  # (B, 1, T, M+k-1)
    return padded.unfold(-1, k, 1).median(dim=-1).values.transpose(2, 3)


class LevelFeatures(nn.Module):
    """(B, 1, M, T) log-mel dB -> (B, 1 + bands): the segment's level and its ``bands`` band
    levels (means over frames of equal groups of mel bands), each standardised by BatchNorm1d.

    Batch normalisation, not a fixed dB / 20: log-mel values have no reference level (under
    input_norm ``none`` their mean depends on the recorder's full scale and the STFT; about 0
    under ``clip_level``), so a fixed scale leaves an arbitrary offset, often several times the
    spread; the running mean / variance (buffers, saved with the weights) are the training
    data's, so at inference a level is read against the training population, deterministically.
    Not LayerNorm: normalising over these features would subtract their mean, i.e. the level.
    The features join the hidden layer after the dropout (five inputs; dropping one is noise).
    """

    def __init__(self, bands: int = LEVEL_BANDS) -> None:
        super().__init__()
        self.bands = bands
        self.norm = nn.BatchNorm1d(1 + bands)

    @property
    def size(self) -> int:
        return 1 + self.bands

    def forward(self, x: torch.Tensor, level: torch.Tensor) -> torch.Tensor:
        """``x`` (B, 1, M, T), ``level`` = segment_level(x) -> (B, 1 + bands) float32."""
        band = F.adaptive_avg_pool2d(x.float(), (self.bands, 1))  # (B, 1, bands, 1)
        feats = torch.cat([level.flatten(1), band.flatten(1)], dim=1)  # (B, 1 + bands)
        if self.training and feats.shape[0] == 1:  # no batch statistics of one segment
            norm = self.norm
            return F.batch_norm(feats, norm.running_mean, norm.running_var, norm.weight,
                                norm.bias, training=False, eps=norm.eps)
        return self.norm(feats)


class LeakCNN(nn.Module):
    """Segment classifier with an auxiliary leak head; forward -> (logits, leak_logit).

    ``level_input``: see ``LevelFeatures``; False adds no module, parameter or operation.
    ``tonal_median``: see ``tonal_median``; 0 adds no operation.
    """

    def __init__(self, n_classes: int, widths: tuple[int, int, int] = (32, 64, 128),
                 dropout: float = 0.3, pool_h: int = 16, hidden: int = 256,
                 level_input: bool = False, tonal_median: int = 0) -> None:
        super().__init__()
        c1, c2, c3 = widths
        self.tonal_median = tonal_median
        self.features = nn.Sequential(
            _conv(1, c1), _conv(c1, c2), nn.MaxPool2d(POOL),
            _conv(c2, c3), nn.MaxPool2d(POOL),
            nn.AdaptiveAvgPool2d((pool_h, 1)))
        self.dropout = nn.Dropout(dropout)
        self.level = LevelFeatures() if level_input else None
        n_level = self.level.size if self.level is not None else 0
        self.fc = nn.Sequential(nn.Linear(c3 * pool_h + n_level, hidden), nn.ReLU(inplace=True))
        self.head = nn.Linear(hidden, n_classes)
        self.leak_head = nn.Linear(hidden, 1)
        self.apply(_kaiming_init)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        extra = None
        if self.level is not None:
            level = segment_level(x)                  # (B, 1, 1, 1)
            extra = self.level(x, level)              # (B, 1 + LEVEL_BANDS)
            x = x - level                             # the convs see spectral shape only
        x = tonal_median(x, self.tonal_median)        # narrow lines removed (0: identity)
        h = self.features(x)                      # (B, c3, pool_h, 1)
        h = self.dropout(torch.flatten(h, 1))     # (B, c3 * pool_h)
        if extra is not None:
            h = torch.cat([h, extra], dim=1)      # (B, c3 * pool_h + 1 + LEVEL_BANDS)
        h = self.fc(h)                            # (B, hidden)
        return self.head(h), self.leak_head(h).squeeze(-1)  # (B, C), (B,)


class SegmentScorer(nn.Module):
    """(B, 1, n_mels, n_frames) -> (B, C + 1): class probabilities, then the leak probability."""

    def __init__(self, model: nn.Module, leak_index: int, prob_mode: ProbMode) -> None:
        super().__init__()
        self.model = model
        self.leak_index = leak_index
        self.prob_mode = prob_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, leak_logit = self.model(x.float())                  # (B, C), (B,)
        leak = segment_leak_prob(logits, leak_logit, self.leak_index, self.prob_mode)  # (B,)
        return torch.cat([torch.softmax(logits.float(), dim=-1), leak[:, None]], dim=1)


def _kaiming_init(module: nn.Module) -> None:
    """He-normal weights for ReLU layers, zero biases (as the original)."""
    if isinstance(module, nn.Conv2d | nn.Linear):
        nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
        nn.init.zeros_(module.bias)


def create_model(cfg: ModelConfig, n_classes: int) -> LeakCNN:
    """Build the network described by the `model` params section."""
    model = LeakCNN(n_classes, widths=tuple(cfg.widths), dropout=cfg.dropout,
                    pool_h=cfg.pool_h, hidden=cfg.hidden, level_input=cfg.level_input,
                    tonal_median=cfg.tonal_median)
    log.debug("LeakCNN: %d classes, %d parameters", n_classes, count_parameters(model))
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside torch.compile / DDP wrappers."""
    for attr in ("_orig_mod", "module"):
        inner = getattr(model, attr, None)
        if isinstance(inner, nn.Module):
            return unwrap(inner)
    return model


def strip_prefixes(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove wrapper prefixes from state-dict keys."""
    out = {}
    for key, value in state.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        out[key] = value
    return out


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return strip_prefixes(unwrap(model).state_dict())
