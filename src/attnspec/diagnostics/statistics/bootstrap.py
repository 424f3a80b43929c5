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

from typing import Sequence

import numpy as np

from ...seeding import seed_of
from .noise import Draw

__all__ = ["N_BOOT", "LEVEL", "weights", "weighted", "interval", "simultaneous_interval", "replicate_sd", "weighted_w1",
           "weighted_mean", "supports_intervals"]

#: Default number of bootstrap replicates.
N_BOOT = 200
#: Fewest texts behind an interval: with fewer, a diagnosis reports no interval and every verdict is
#: ``undetermined``. A Poisson bootstrap over n texts resamples n units: one text gives zero-width intervals, and
#: MiniLM's dependent heads fall from 57 (1 text) and 46 (2) to 25 (6) and 16-20 (8 to 24 texts), the level of
#: the whole corpus (docs/validity.md).
MIN_TEXTS_FOR_INTERVALS = 8
#: Fewest finite replicates behind a percentile interval (:func:`interval`; fewer: NaN). A diagnosis asked for
#: fewer replicates (``n_boot`` 1 to 9) reports no interval, as with ``n_boot = 0``.
MIN_REPLICATES = 10
#: Budget (bytes) of the block of replicates :func:`weighted_w1` gathers and sums at once (float64 ``(block, n + m)``,
#: at least one replicate): the block stays in the cache while each replicate's row is summed along memory.
W1_BLOCK_BYTES = 2 ** 20
#: Two-sided level of the reported intervals (``_lo``/``_hi`` columns).
LEVEL = 0.95


def supports_intervals(n_texts: int, n_boot: int) -> bool:
    """Whether ``n_texts`` texts and ``n_boot`` replicates give intervals (:data:`MIN_TEXTS_FOR_INTERVALS`,
    :data:`MIN_REPLICATES`); with fewer a diagnosis reports none and draws no replicate.

    Examples
    --------
    >>> supports_intervals(8, 200), supports_intervals(7, 200), supports_intervals(64, 9)
    (True, False, False)
    """
    return int(n_texts) >= MIN_TEXTS_FOR_INTERVALS and int(n_boot) >= MIN_REPLICATES


def weights(seed: int, text_ids: Sequence[int], n_boot: int = N_BOOT) -> np.ndarray:
    """Poisson(1) bootstrap weights of the texts ``text_ids``, one row per replicate.

    Column ``t`` is drawn from a generator seeded by ``(seed, Draw.BOOTSTRAP, 0, text_ids[t])``: it
    depends only on ``(seed, text_ids[t], n_boot)``, not on which other texts are in the call.

    Parameters
    ----------
    seed : int
        Seed of the diagnosis.
    text_ids : sequence of int
        Positions of the texts in the caller's list.
    n_boot : int, optional
        Number of replicates, ``>= 0`` (default :data:`N_BOOT`).

    Returns
    -------
    numpy.ndarray
        ``(n_boot, len(text_ids))`` float64 non-negative integers (mean 1, variance 1).

    Raises
    ------
    ValueError
        If ``n_boot`` is not an integer ``>= 0``.

    Examples
    --------
    >>> import numpy as np
    >>> w = weights(0, [0, 1, 2], n_boot=2000)
    >>> w.shape, bool((w == np.round(w)).all()), round(float(w.mean()), 1)
    ((2000, 3), True, 1.0)
    >>> bool((weights(0, [5, 2], 20)[:, 1] == weights(0, [2], 20)[:, 0]).all())   # text 2's column
    True
    """
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot!r}")
    ids = [int(t) for t in text_ids]
    out = np.empty((n_boot, len(ids)))
    for k, t in enumerate(ids):        # one generator per text (a loop over texts, not entries)
        out[:, k] = np.random.default_rng(seed_of(seed, int(Draw.BOOTSTRAP), 0, t)).poisson(1.0, n_boot)
    return out


def weighted(w: np.ndarray | None, per_text: np.ndarray) -> np.ndarray | float:
    """Bootstrap replicates of a sum over texts: ``T*_b = sum_t w_{bt} s_t``.

    Parameters
    ----------
    w : numpy.ndarray or None
        ``(n_boot, n_texts)`` weights of :func:`weights`; None when no bootstrap is run.
    per_text : numpy.ndarray
        ``(n_texts, ...)`` the statistic ``s_t`` of each text.

    Returns
    -------
    numpy.ndarray or float
        ``(n_boot, ...)`` float64, or ``0.0`` when ``w`` is None.

    Examples
    --------
    >>> import numpy as np
    >>> w = np.array([[1., 0., 2.], [1., 1., 1.]])
    >>> weighted(w, np.array([[1., 10.], [2., 20.], [3., 30.]]))
    array([[ 7., 70.],
           [ 6., 60.]])
    >>> weighted(None, np.ones(3))
    0.0
    """
    if w is None:
        return 0.0
    s = np.asarray(per_text, dtype=np.float64)
    return (w @ s.reshape(s.shape[0], -1)).reshape((w.shape[0],) + s.shape[1:])


def interval(reps: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of replicates.

    ``lo`` and ``hi`` are the ``(1 - level)/2`` and ``(1 + level)/2`` quantiles over the replicates
    with a finite value; NaN where fewer than 10 are finite or there are no replicates.

    Parameters
    ----------
    reps : numpy.ndarray
        ``(n_boot, ...)`` replicates.
    level : float, optional
        Two-sided level in (0, 1) (default :data:`LEVEL`).

    Returns
    -------
    tuple of numpy.ndarray
        ``(lo, hi)``, each of shape ``reps.shape[1:]``.

    Examples
    --------
    >>> import numpy as np
    >>> reps = np.stack([np.arange(101.), np.r_[np.arange(5.), np.full(96, np.nan)]], axis=1)
    >>> interval(reps, level=0.9)        # the second column has only 5 finite replicates
    (array([ 5., nan]), array([95., nan]))
    """
    reps = np.asarray(reps, dtype=np.float64)
    shape = reps.shape[1:]
    if reps.ndim == 0 or reps.shape[0] == 0:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    a = (1 - level) / 2
    finite = np.isfinite(reps)
    ok = finite.sum(0) >= MIN_REPLICATES
    full = ok & finite.all(0)       # the usual case: plain quantiles, ten times faster than nanquantile's
    part = ok & ~full
    lo, hi = np.full(shape, np.nan), np.full(shape, np.nan)
    if full.any():
        lo[full], hi[full] = np.quantile(reps[:, full], [a, 1 - a], axis=0)
    if part.any():                  # only where enough replicates are finite: no all-NaN slice, no warning
        lo[part], hi[part] = np.nanquantile(reps[:, part], [a, 1 - a], axis=0)   # (no warnings filter: thread-safe)
    return lo, hi


def replicate_sd(reps: np.ndarray) -> np.ndarray:
    """Standard deviation over the replicates (axis 0) of those with a finite value (0 where none is), without the
    warnings of ``nanstd`` on all-NaN slices.

    Examples
    --------
    >>> import numpy as np
    >>> replicate_sd(np.array([[1.0, np.nan], [3.0, np.nan]]))
    array([1., 0.])
    """
    reps = np.asarray(reps, dtype=np.float64)
    finite = np.isfinite(reps)
    n = np.maximum(finite.sum(0), 1)
    mean = np.where(finite, reps, 0.0).sum(0) / n
    return np.sqrt((np.where(finite, reps - mean, 0.0) ** 2).sum(0) / n)


def simultaneous_interval(x: np.ndarray, reps: np.ndarray, level: float = LEVEL,
                          family: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap max-t band over the last axis (one head's rules): ``x +- c se`` with ``se`` the replicates' standard
    deviation and ``c`` the ``level`` quantile over replicates of ``max_r |reps_r - x_r| / se_r`` over the rules of
    ``family`` (default: every rule with a finite estimate); all of them inside at once with probability about
    ``level``. Rules without replicates' spread get ``[x, x]``; NaN where fewer than 10 replicates are finite.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., R)
    reps : numpy.ndarray, shape (n_boot, ..., R)
    level : float
    family : numpy.ndarray of bool, shape (..., R), optional

    Returns
    -------
    lo, hi : numpy.ndarray, shape (..., R)

    Examples
    --------
    Two independent rules: the band is wider than each rule's own 95 % interval (1.96 se), about 2.24 se:

    >>> rng = np.random.default_rng(0)
    >>> reps = rng.standard_normal((4000, 2))
    >>> lo, hi = simultaneous_interval(np.zeros(2), reps)
    >>> bool(2.15 < hi[0] < 2.35), bool(np.allclose(lo, -hi))
    (True, True)
    """
    x = np.asarray(x, dtype=np.float64)
    reps = np.asarray(reps, dtype=np.float64)
    lo, hi = np.full(x.shape, np.nan), np.full(x.shape, np.nan)
    if reps.shape[0] == 0:
        return lo, hi
    fam = np.isfinite(x) if family is None else (np.asarray(family, bool) & np.isfinite(x))
    enough = np.isfinite(reps).sum(0) >= MIN_REPLICATES                      # (..., R)
    se = replicate_sd(reps)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.abs(reps - x) / np.where(se > 0, se, np.nan)                  # (n_boot, ..., R)
    t = np.where((fam & enough & (se > 0))[None], t, np.nan)
    with np.errstate(invalid="ignore"):
        worst = np.nanmax(np.where(np.isnan(t), -np.inf, t), axis=-1)            # (n_boot, ...)
    worst = np.where(np.isfinite(worst), worst, np.nan)
    counted = np.isfinite(worst).sum(0) >= MIN_REPLICATES
    c = np.full(worst.shape[1:], np.nan)
    if counted.any():
        c[counted] = np.nanquantile(worst[:, counted], level, axis=0)
    c = np.where(counted, c, 0.0)[..., None]
    half = np.where(se > 0, c * np.where(se > 0, se, 0.0), 0.0)
    ok = enough & np.isfinite(x)
    lo[ok], hi[ok] = (x - half)[ok], (x + half)[ok]
    return lo, hi


def weighted_mean(x: np.ndarray, ix: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Bootstrap replicates of the mean of values pooled over texts.

    ``mean_b = sum_k w[b, ix_k] x_k / sum_k w[b, ix_k]``, computed from per-text sums (one pass over
    ``x``).

    Parameters
    ----------
    x : numpy.ndarray
        ``(n,)`` values.
    ix : numpy.ndarray
        ``(n,)`` int, the text (column of ``w``) of each value.
    w : numpy.ndarray
        ``(n_boot, n_texts)`` text weights.

    Returns
    -------
    numpy.ndarray
        ``(n_boot,)``; NaN for a replicate that gives every value weight 0.

    Examples
    --------
    >>> import numpy as np
    >>> x, ix = np.array([1., 3., 10.]), np.array([0, 0, 1])
    >>> weighted_mean(x, ix, np.array([[1., 1.], [1., 0.], [0., 2.]]))
    array([ 4.66666667,  2.        , 10.        ])
    """
    n_texts = w.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ np.bincount(ix, weights=x, minlength=n_texts)) / (w @ np.bincount(ix, minlength=n_texts))


def weighted_w1(x: np.ndarray, ix: np.ndarray, y: np.ndarray, iy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """W1 distances ``(n_boot,)`` between the weighted empirical laws of ``x`` and ``y``.

    Replicate ``b`` gives value ``x_k`` the weight
    ``w[b, ix_k]``; ``W1 = int |F_x(z) - F_y(z)| dz`` with ``F`` the weighted CDFs. One sort of the
    pooled values ``z``; then, over blocks of replicates (:data:`W1_BLOCK_BYTES`), each replicate's signed weights in
    pooled order gathered into one contiguous row (``+w / s_x`` for ``x``, ``-w / s_y`` for ``y``), its cumulative
    sum along the row (``F_x - F_y`` after each value) and ``sum_k |F_x - F_y|_k (z_{k+1} - z_k)`` as one product
    with the gaps. In float64: when both laws have the same total weight in every replicate (the same texts and
    counts: every use here) the unnormalized weights are summed, integers for Poisson weights, exactly, and the scale
    divided out at the end. With unit weights it equals :func:`attnspec.spectra.wasserstein1` of the two samples.

    Parameters
    ----------
    x, y : numpy.ndarray
        ``(n,)`` and ``(m,)`` values.
    ix, iy : numpy.ndarray
        ``(n,)`` and ``(m,)`` int, the text (column of ``w``) of each value.
    w : numpy.ndarray
        ``(n_boot, n_texts)`` the texts' weights.

    Returns
    -------
    numpy.ndarray
        ``(n_boot,)`` non-negative.

    Examples
    --------
    Two texts; ``x`` is shifted from ``y`` by 1 on text 0 and by 3 on text 1:

    >>> import numpy as np
    >>> y, iy = np.array([0., 0.]), np.array([0, 1])
    >>> x, ix = np.array([1., 3.]), np.array([0, 1])
    >>> weighted_w1(x, ix, y, iy, np.array([[1., 1.], [1., 0.], [0., 1.], [3., 1.]]))
    array([2. , 1. , 3. , 1.5])

    Blocks of any size give the same numbers (up to the order of the last sum's terms):

    >>> import attnspec.diagnostics.statistics.bootstrap as bs
    >>> w = weights(0, range(2), 50)
    >>> whole = weighted_w1(x, ix, y, iy, w)
    >>> bs.W1_BLOCK_BYTES, saved = 1, bs.W1_BLOCK_BYTES
    >>> bool(np.allclose(weighted_w1(x, ix, y, iy, w), whole, rtol=1e-14, atol=0, equal_nan=True))
    True
    >>> bs.W1_BLOCK_BYTES = saved
    """
    import torch
    n_texts = w.shape[1]
    sx = w @ np.bincount(ix, minlength=n_texts).astype(np.float64)
    sy = w @ np.bincount(iy, minlength=n_texts).astype(np.float64)
    z = np.concatenate([x, y])
    order = np.argsort(z, kind="stable")
    dz = torch.from_numpy(np.diff(z[order]))
    cols = np.concatenate([ix, iy + n_texts])[order]        # each value's column of the signed weights, pooled order
    with np.errstate(invalid="ignore", divide="ignore"):
        if np.array_equal(sx, sy):                  # same total weight in every replicate: one scale, exact sums
            signed, scale = np.concatenate([w, -w], axis=1).astype(np.float64), sx
        else:
            signed, scale = np.concatenate([w * (1.0 / sx)[:, None], w * (-1.0 / sy)[:, None]], axis=1), np.ones_like(sx)
        out = np.empty(w.shape[0])
        step = max(1, W1_BLOCK_BYTES // max(1, 8 * cols.size))
        for b in range(0, w.shape[0], step):        # replicates are independent: a block at a time
            G = torch.from_numpy(np.take(signed[b:b + step], cols, axis=1))   # (block, n + m), pooled order
            G.cumsum_(1).abs_()                                               # |F_x - F_y| after each value
            out[b:b + step] = (G[:, :-1] @ dz).numpy()
        return out / scale


def weighted_relative_w1(x: np.ndarray, y: np.ndarray, ix: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Replicates ``(n_boot,)`` of ``W1(x, y) / m1(y)`` (:func:`weighted_w1` over :func:`weighted_mean`) for two
    spectra of the same texts and counts, ``ix`` the text of each value of either; NaN for an empty spectrum.

    Examples
    --------
    >>> import numpy as np
    >>> y, x, ix = np.array([1., 1.]), np.array([2., 4.]), np.array([0, 1])
    >>> weighted_relative_w1(x, y, ix, np.array([[1., 1.], [1., 0.]]))
    array([2., 1.])
    """
    if x.size == 0 or y.size == 0:
        return np.full(w.shape[0], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return weighted_w1(x, ix, y, ix, w) / weighted_mean(y, ix, w)
