"""Poisson bootstrap over texts: per-head uncertainty without re-running the model.

Every text ``t`` of a diagnosis gets ``B`` (default :data:`N_BOOT` = 200) independent Poisson(1)
weights ``w_{bt}``, drawn from a generator seeded by ``(seed, Draw.BOOTSTRAP, 0, t)`` with ``t`` the
text's position in the caller's list (the key of every other per-text draw, :mod:`.noise`), so the
weights depend neither on batching, padding, sharding nor on which worker sees the text. Replicate
``b`` re-weights every text by ``w_{bt}``: for a statistic that is a sum over texts ``T = sum_t s_t``
the replicate is ``T*_b = sum_t w_{bt} s_t``, accumulated beside ``T`` as one ``(B, n_texts_batch)``
matrix product per batch (:func:`weighted`), so it merges by addition like ``T`` itself and its
memory is ``O(B x heads)``, independent of the corpus size. An estimator ``f(T_1, T_2, ...)`` (a ratio
of sums, a least-squares slope) gives the replicates ``f(T*_1b, T*_2b, ...)``; for pooled spectra the
replicate gives each eigenvalue its text's weight (:func:`weighted_w1`).

Poisson(1) weights are the large-sample equivalent of multinomial resampling of the texts (Hanley and
MacGibbon 2006; Chamandy et al. 2012): the total weight of a replicate is random (mean ``n``, variance
``n``) instead of exactly ``n``, which ratio estimators cancel. Intervals are percentile intervals of the
replicates (:func:`interval`, two-sided level :data:`LEVEL` = 0.95: each bound is a one-sided 97.5 %
bound).
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from ..seeding import seed_of
from .noise import Draw

__all__ = ["N_BOOT", "LEVEL", "weights", "weighted", "interval", "weighted_w1", "weighted_mean"]

#: Default number of bootstrap replicates.
N_BOOT = 200
#: Two-sided level of the reported intervals (``_lo``/``_hi`` columns).
LEVEL = 0.95


def weights(seed: int, text_ids: Sequence[int], n_boot: int = N_BOOT) -> np.ndarray:
    """Poisson(1) weights ``(n_boot, n_texts)`` (float64) of the texts ``text_ids`` (positions in the
    caller's list); column ``t`` depends only on ``(seed, text_ids[t], n_boot)``."""
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot!r}")
    ids = [int(t) for t in text_ids]
    out = np.empty((n_boot, len(ids)))
    for k, t in enumerate(ids):        # one generator per text (a loop over texts, not entries)
        out[:, k] = np.random.default_rng(seed_of(seed, int(Draw.BOOTSTRAP), 0, t)).poisson(1.0, n_boot)
    return out


def weighted(w: np.ndarray | None, per_text: np.ndarray) -> np.ndarray | float:
    """``sum_t w_{bt} s_t``: ``(n_boot, ...)`` from ``per_text`` ``(n_texts, ...)`` (0.0 when ``w`` is None)."""
    if w is None:
        return 0.0
    s = np.asarray(per_text, dtype=np.float64)
    return (w @ s.reshape(s.shape[0], -1)).reshape((w.shape[0],) + s.shape[1:])


def interval(reps: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of replicates ``(n_boot, ...)``: ``(lo, hi)`` at the ``(1 -/+ level)/2``
    quantiles over the replicates with a finite value (NaN where fewer than 10 are finite or there
    are no replicates)."""
    reps = np.asarray(reps, dtype=np.float64)
    shape = reps.shape[1:]
    if reps.ndim == 0 or reps.shape[0] == 0:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    a = (1 - level) / 2
    ok = np.isfinite(reps).sum(0) >= 10
    with warnings.catch_warnings():          # all-NaN slices (heads never measured) are expected
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(reps, [a, 1 - a], axis=0)
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def weighted_mean(x: np.ndarray, ix: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted means ``(n_boot,)`` of values ``x`` ``(n,)`` of texts ``ix`` under text weights ``w``
    ``(n_boot, n_texts)``: per text sums first, so the cost is one pass over ``x``."""
    n_texts = w.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ np.bincount(ix, weights=x, minlength=n_texts)) / (w @ np.bincount(ix, minlength=n_texts))


def weighted_w1(x: np.ndarray, ix: np.ndarray, y: np.ndarray, iy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """W1 distances ``(n_boot,)`` between the weighted empirical laws of ``x`` and ``y``.

    ``x`` ``(n,)`` and ``y`` ``(m,)`` values; ``ix``, ``iy`` the text (column of ``w``) of each value;
    ``w`` ``(n_boot, n_texts)`` the texts' weights. Replicate ``b`` gives value ``x_k`` the weight
    ``w[b, ix_k]``; ``W1 = int |F_x(z) - F_y(z)| dz`` with ``F`` the weighted CDFs. One sort of the
    pooled values, then one gather, cumulative sum and dot product per replicate (vectorized over
    replicates). With unit weights it equals :func:`attnspec.spectra.wasserstein1` of the two samples.
    """
    n_texts = w.shape[1]
    sx = w @ np.bincount(ix, minlength=n_texts).astype(np.float64)
    sy = w @ np.bincount(iy, minlength=n_texts).astype(np.float64)
    z = np.concatenate([x, y])
    order = np.argsort(z, kind="stable")
    dz = np.diff(z[order])
    t = np.concatenate([ix, iy])[order]
    with np.errstate(invalid="ignore", divide="ignore"):
        if np.array_equal(sx, sy):                  # same texts and counts (all the uses here): one scale
            sign = np.where(order < x.size, 1.0, -1.0)
            G = w[:, t] * sign
            scale = sx
        else:
            coef_x, coef_y = 1.0 / sx[:, None], -1.0 / sy[:, None]
            G = w[:, t] * np.where(order[None] < x.size, coef_x, coef_y)
            scale = np.ones_like(sx)
        np.cumsum(G, axis=1, out=G)
        np.abs(G, out=G)
        return (G[:, :-1] @ dz) / scale
