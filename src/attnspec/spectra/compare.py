"""Comparing spectra: moments, fraction of zero eigenvalues, quantiles, bulk/outlier split, W1 and KS distances.

All functions take eigenvalue samples as 1-D arrays; a stack ``(draws, l)`` is pooled (flattened)
first, so every eigenvalue of every draw carries the same weight. A *law* is given by its CDF
``F`` (a vectorized callable) and, for W1, an upper end of its support.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = [
    "pooled", "moments", "log_moments", "zero_fraction", "quantiles", "split_outliers",
    "wasserstein1", "ks_distance", "wasserstein1_to_cdf", "ks_to_cdf", "summarize",
]

_LOG_FLOAT_MAX = math.log(np.finfo(float).max)


def pooled(eigs: np.ndarray) -> np.ndarray:
    """Flatten a sample (any shape) to 1-D float64.

    Examples
    --------
    >>> pooled(np.ones((2, 3))).shape
    (6,)
    """
    return np.asarray(eigs, dtype=float).ravel()


def log_moments(eigs: np.ndarray, k: int = 4) -> np.ndarray:
    """``log m_j`` for ``j = 1..k`` with ``m_j = mean(lambda^j)``, computed without overflow.

    Uses ``log m_j = j log s + log mean((lambda/s)^j)`` with ``s = max lambda``; ``-inf`` when the
    sample is all zeros.

    Examples
    --------
    >>> np.round(log_moments([1.0, 3.0], k=2), 4)          # log 2, log 5
    array([0.6931, 1.6094])
    """
    x = np.abs(pooled(eigs))
    s = x.max(initial=0.0)
    if s == 0.0:
        return np.full(k, -np.inf)
    j = np.arange(1, k + 1)
    return j * math.log(s) + np.log(np.mean((x / s)[None, :] ** j[:, None], axis=1))


def moments(eigs: np.ndarray, k: int = 4) -> np.ndarray:
    """Moments ``m_j = mean(lambda^j)``, ``j = 1..k``, over the whole sample (zeros included).

    A moment too large for float64 (e.g. surrogate spectra at beta = 20, where ``m_2 ~ e^{800}``) is
    returned as ``inf`` without a floating-point warning; :func:`log_moments` still holds it.

    Examples
    --------
    >>> moments([1.0, 3.0], k=3)
    array([ 2.,  5., 14.])
    """
    lm = log_moments(eigs, k)
    out = np.full(k, np.inf)
    ok = lm < _LOG_FLOAT_MAX
    out[ok] = np.exp(lm[ok])
    return out


def zero_fraction(eigs: np.ndarray, rtol: float = 1e-11) -> float:
    """Fraction of eigenvalues ``<= rtol * max(eigs)``: the sample's rank deficiency ``1 - rank(Y)/l``.

    The empirical counterpart of a law's ``atom_at_zero`` (:func:`attnspec.theory.closed_forms.atom_at_zero`).

    Examples
    --------
    >>> zero_fraction([0.0, 1e-15, 2.0, 3.0])
    0.5
    """
    x = pooled(eigs)
    if x.size == 0:
        raise ValueError("eigs is empty")
    return float(np.mean(x <= rtol * x.max(initial=0.0)))



def quantiles(eigs: np.ndarray, q=(0.05, 0.25, 0.5, 0.75, 0.95, 0.99)) -> np.ndarray:
    """Empirical quantiles (linear interpolation) at levels ``q`` in [0, 1].

    Examples
    --------
    >>> quantiles(np.arange(101.0), q=[0.1, 0.5])
    array([10., 50.])
    """
    q = np.asarray(q, dtype=float)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f"q must lie in [0, 1], got {q}")
    return np.quantile(pooled(eigs), q)


def split_outliers(eigs: np.ndarray, edge: float, rel_tol: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """Split a sample at ``edge * (1 + rel_tol)``: (bulk, outliers), both sorted ascending.

    ``edge`` is the right edge of the reference: a law's right edge, or the largest eigenvalue of a
    surrogate sample (the Gaussian equivalent has no outliers). ``rel_tol`` absorbs the
    ``O(l^{-2/3})`` edge fluctuation of a finite sample.

    Examples
    --------
    >>> bulk, out = split_outliers([3.0, 1.0, 2.0, 9.0], edge=3.0)
    >>> bulk, out
    (array([1., 2., 3.]), array([9.]))
    """
    if not np.isfinite(edge) or edge < 0:
        raise ValueError(f"edge must be a finite number >= 0, got {edge}")
    x = np.sort(pooled(eigs))
    cut = np.searchsorted(x, edge * (1.0 + rel_tol), side="right")
    return x[:cut], x[cut:]


def _ecdf(sorted_x: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_x, at, side="right") / sorted_x.size


def wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between two empirical distributions: ``int |F_a(x) - F_b(x)| dx`` (exact).

    Examples
    --------
    >>> wasserstein1([0.0, 1.0], [0.5, 1.5])            # a shift by 0.5
    0.5
    """
    a, b = np.sort(pooled(a)), np.sort(pooled(b))
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples must be non-empty")
    grid = np.sort(np.concatenate([a, b]))
    return float(np.sum(np.abs(_ecdf(a, grid[:-1]) - _ecdf(b, grid[:-1])) * np.diff(grid)))


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov–Smirnov distance ``sup_x |F_a(x) - F_b(x)|``.

    Examples
    --------
    >>> ks_distance([1.0, 2.0, 3.0, 4.0], [3.0, 4.0, 5.0, 6.0])
    0.5
    """
    a, b = np.sort(pooled(a)), np.sort(pooled(b))
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples must be non-empty")
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(_ecdf(a, grid) - _ecdf(b, grid))))


def wasserstein1_to_cdf(sample: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray], upper: float,
                        n_grid: int = 20001) -> float:
    """W1 between a sample and a law on ``[0, upper]`` given by its CDF ``F``.

    ``int_0^inf |F_n(x) - F(x)| dx`` on the union of the sample points and a uniform grid of
    ``n_grid`` points; on each cell ``F_n`` is constant and ``F`` is taken at the midpoint
    (error ``O(h^2)`` for a smooth ``F``).

    Examples
    --------
    >>> u = (np.arange(1000) + 0.5) / 1000                # midpoint quantiles of U(0, 1): W1 = 1/(4 n)
    >>> round(wasserstein1_to_cdf(u, lambda x: np.clip(x, 0, 1), upper=1.0), 6)
    0.00025
    """
    x = np.sort(pooled(sample))
    hi = max(float(upper), float(x[-1]))
    lo = min(0.0, float(x[0]))
    grid = np.union1d(np.linspace(lo, hi, n_grid), x)
    mid = 0.5 * (grid[:-1] + grid[1:])
    diff = np.abs(_ecdf(x, grid[:-1]) - np.asarray(cdf(mid), dtype=float))
    return float(np.sum(diff * np.diff(grid)))


def ks_to_cdf(sample: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """One-sample KS distance ``sup_x |F_n(x) - F(x)|``, exact for ties and for atoms of ``F``.

    The supremum is attained at a sample point, from the right (``F_n(x) - F(x)``) or from the left
    (``F(x^-) - F_n(x^-)``, with ``F(x^-)`` taken at the next float below ``x``).

    Examples
    --------
    >>> ks_to_cdf([0.25, 0.75], lambda x: np.clip(x, 0, 1))
    0.25
    """
    x = np.sort(pooled(sample))
    n = x.size
    right = np.searchsorted(x, x, side="right") / n
    left = np.searchsorted(x, x, side="left") / n
    F = np.asarray(cdf(x), dtype=float)
    F_left = np.asarray(cdf(np.nextafter(x, -np.inf)), dtype=float)
    return float(max(np.max(right - F), np.max(F_left - left), 0.0))


def summarize(eigs: np.ndarray, edge: float | None = None, rel_tol: float = 0.02) -> dict:
    """Plain-data summary of a sample: size, moments m1..m4, atom at zero, quantiles, max, outliers.

    Examples
    --------
    >>> s = summarize([0.0, 1.0, 2.0, 3.0], edge=2.0)
    >>> s["moments"][:2], s["atom_at_zero"], s["n_outliers"]
    ([1.5, 3.5], 0.25, 1)
    """
    x = pooled(eigs)
    out = {
        "n": int(x.size),
        "moments": [float(m) for m in moments(x)],
        "log_moments": [float(m) for m in log_moments(x)],
        "atom_at_zero": zero_fraction(x),
        "quantiles": dict(zip(["q05", "q25", "q50", "q75", "q95", "q99"], map(float, quantiles(x)))),
        "max": float(x.max()),
    }
    if edge is not None:
        out["edge"] = float(edge)
        out["n_outliers"] = int(split_outliers(x, edge, rel_tol)[1].size)
    return out
