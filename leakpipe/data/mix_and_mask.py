"""The per-segment augmentations of a training batch, on the device: mixing with a NON-LEAK
segment of the same batch, and SpecAugment frequency masks.

Mixing adds powers, 10 log10(10^(a/10) + 10^((b + g)/10)), with the segment b of a NON-LEAK
file drawn from the same batch (no extra reads) and g set for a random segment-to-noise ratio
(difference of the two segments' mean log-mel). Frequency masks set random band ranges to the
segment's mean (or min) over bands, after normalisation; there are no time masks or shifts (a
default segment is one frame). Each takes its uniforms from the batch's draws
(``leakpipe.data.augment``): column 0 mix or not, 1 the donor, 2 the SNR; then two per mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from leakpipe.config import AugmentConfig

DB_TO_LN = math.log(10.0) / 10.0    # dB -> natural log of power


def donors(y: torch.Tensor, draws: torch.Tensor,
           leak_label: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's noise row: a random NON-LEAK row of the batch; and whether there is one.

    No host sync: the non-leak rows are sorted first and indexed by a uniform draw.
    """
    leak = y == leak_label                                            # (B,)
    order = torch.argsort(leak.to(torch.uint8), stable=True)         # non-leak first
    n_noise = (~leak).sum()                                           # on the device
    pick = torch.minimum((draws[:, 1] * n_noise).long(), (n_noise - 1).clamp(min=0))
    return order.index_select(0, pick), n_noise > 0


def mix(x: torch.Tensor, noise: torch.Tensor, draws: torch.Tensor, has_noise: torch.Tensor,
        a: AugmentConfig) -> torch.Tensor:
    """Power-add ``noise`` (b, 1, M, T) at the drawn SNR to the drawn share of rows."""
    snr = a.mix_snr_min_db + (a.mix_snr_max_db - a.mix_snr_min_db) * draws[:, 2]
    gain = x.mean(dim=(1, 2, 3)) - noise.mean(dim=(1, 2, 3)) - snr   # (b,) dB
    apply = (draws[:, 0] < a.mix_prob) & has_noise                    # (b,)
    gain = torch.where(apply, gain, -math.inf)    # unmixed rows add 10 log10(1 + 0) = 0
    # 10 log10(10^(x/10) + 10^((n + g)/10)) = x + 10 log10(1 + 10^((n + g - x)/10)):
    # one softplus with beta = ln(10) / 10
    relative = noise.sub_(x).add_(gain[:, None, None, None])         # (b, 1, M, T)
    return x + F.softplus(relative, beta=DB_TO_LN)


def mask(x: torch.Tensor, draws: torch.Tensor, a: AugmentConfig) -> torch.Tensor:
    """Set ``freq_masks`` random band ranges per segment to its mean / min over bands."""
    n_mels = x.shape[2]
    widest = min(a.freq_mask_bands, n_mels)
    band = torch.arange(n_mels, device=x.device)                      # (M,)
    masked = torch.zeros((len(x), n_mels), dtype=torch.bool, device=x.device)
    for k in range(a.freq_masks):
        width = (draws[:, 2 * k] * (widest + 1)).long().clamp(max=widest)       # (B,)
        first = (draws[:, 2 * k + 1] * (n_mels - width + 1)).long()             # (B,)
        first = torch.minimum(first, n_mels - width)
        offset = band - first[:, None]                                          # (B, M)
        masked |= (offset >= 0) & (offset < width[:, None])
    fill = (x.mean(dim=2, keepdim=True) if a.freq_mask_value == "mean"
            else x.amin(dim=2, keepdim=True))                         # (B, 1, 1, T)
    return torch.where(masked[:, None, :, None], fill, x)
