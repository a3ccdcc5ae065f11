"""A low-rank Gaussian (probabilistic PCA) of rows and the Mahalanobis distance under it. Pure
numpy.

The domain check (``leakpipe.decision.domain``) describes the training recordings' spectral
shapes with it: the leading principal axes keep the strong correlation between neighbouring
mel bands that a per-dimension z ignores (a shape the training recordings never combine is far
even when every band is within its own range), and the variance left off those axes keeps a
direction the axes miss from counting as near. ``A * K + 2 K + A`` floats describe it, so a
detector file carries it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LowRank:
    """A low-rank Gaussian (probabilistic PCA) of (R, K) rows: their mean, the leading principal
    axes with their variances and the per-dimension variance left off those axes."""

    mean: np.ndarray          # (K,)
    axes: np.ndarray          # (A, K) unit principal axes, each with a fixed sign
    axis_var: np.ndarray      # (A,) variance along each axis
    resid_var: np.ndarray     # (K,) variance off the axes


def fit_lowrank(rows: np.ndarray, axes: int, floor: float, *,
                relative: bool = False) -> LowRank:
    """The low-rank Gaussian of (R, K) ``rows`` with ``axes`` axes; every variance at least
    ``floor`` (times the largest eigenvalue when ``relative``: rows of no natural unit)."""
    mean = rows.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov((rows - mean).T))     # ascending
    top = np.argsort(values)[::-1][:axes]
    axes_ = vectors[:, top].T                                      # (A, K)
    axes_ *= np.where(axes_.sum(axis=1, keepdims=True) < 0, -1.0, 1.0)   # a fixed sign
    off = (rows - mean) - ((rows - mean) @ axes_.T) @ axes_
    least = floor * float(values.max()) if relative else floor
    return LowRank(mean=mean, axes=axes_, axis_var=np.maximum(values[top], least),
                   resid_var=np.maximum(np.mean(off**2, axis=0), least))


def lowrank_distance(model: LowRank, rows: np.ndarray) -> np.ndarray:
    """(R, K) rows -> (R,) Mahalanobis distance under ``model``, RMS per dimension:
    ``sqrt((sum_k a_k^2 / l_k + sum_j e_j^2 / v_j) / K)`` of the rows' coordinates ``a`` on the
    axes (variances ``l``) and their rest ``e`` off them (variances ``v``)."""
    d = rows - model.mean                                          # (R, K)
    a = d @ model.axes.T                                           # (R, A)
    e = d - a @ model.axes                                         # (R, K)
    d2 = np.sum(a**2 / model.axis_var, axis=1) + np.sum(e**2 / model.resid_var, axis=1)
    return np.sqrt(d2 / rows.shape[1])


__all__ = ["LowRank", "fit_lowrank", "lowrank_distance"]
