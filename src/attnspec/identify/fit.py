"""Fitting a family to an observed spectrum: minimum bulk W1 (quantile matching), outliers apart.

Criterion. For the sorted observed eigenvalues ``x_(1) <= ... <= x_(n)`` and a law with quantile
function ``Q_theta``, the W1 distance between the empirical law and the model is
``int_0^1 |Q_n(u) - Q_theta(u)| du``; on the bulk (the ``n_b = n - k`` eigenvalues not above the
fitted edge) it is discretized at the midpoints ``u_i = (i - 1/2)/n``::

    W1_bulk(theta) = (1/n) sum_{i <= n_b} |x_(i) - Q_theta(u_i)|.

The ``k`` outliers (eigenvalues above ``edge_theta * (1 + rel_tol)``, at most ``max_outlier_frac * n``
of them) are reported separately: a finite softmax layer has a few isolated large eigenvalues its
Gaussian equivalent lacks (docs/theory.md, "The Gaussian equivalent"), and they must not drag the bulk fit.

Two passes: (1) fit with the top ``trim`` fraction ignored (robust start); (2) count the outliers
above the edge of fit 1 and refit on the bulk. One parameter: a coarse scan of the bounded interval
followed by Brent's method around the best node. Several: Nelder–Mead in transformed coordinates
(log for positive parameters) from the moment start. A free ``scale`` never enters the search: for
fixed shape parameters the optimal scale is the weighted median of ``x_(i)/Q(u_i)`` with weights
``Q(u_i)`` (the L1 analogue of least squares), computed exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from .family import Family

__all__ = ["Fit", "fit_family", "bulk_w1", "bulk_ks"]


@dataclass
class Fit:
    """A fitted point: parameters, criterion, outliers.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> x = np.append(fam.sample({"scale": 2.0}, np.random.default_rng(0))[:-1], 50.0)    # one spike
    >>> fit = fit_family(x, fam)
    >>> round(fit.theta["scale"], 1), fit.n_outliers, fit.outliers
    (2.0, 1, array([50.]))
    """

    theta: dict[str, float]
    criterion: float               # W1 on the bulk (eigenvalue units)
    ks: float                      # KS distance on the bulk (the bulk's own empirical CDF vs the law's, truncated)
    edge: float                    # fitted law's right edge
    n: int
    n_outliers: int
    outliers: np.ndarray = field(repr=False)
    evaluations: int = 0

    @property
    def relative_criterion(self) -> float:
        """``W1_bulk / mean(bulk)``: scale-free."""
        return self.criterion / self._scale if self._scale > 0 else math.inf

    _scale: float = 1.0


def _u(n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) / n


def bulk_w1(x_sorted: np.ndarray, family: Family, theta, n_bulk: int) -> float:
    """The fit criterion ``(1/n) sum_{i <= n_bulk} |x_(i) - Q_theta((i - 1/2)/n)|`` (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> x = fam.quantiles({"scale": 1.0}, (np.arange(100) + 0.5) / 100)   # the law's own midpoint quantiles
    >>> bulk_w1(x, fam, {"scale": 1.0}, n_bulk=100)
    0.0
    """
    n = x_sorted.size
    q = family.quantiles(theta, _u(n)[:n_bulk])
    return float(np.sum(np.abs(x_sorted[:n_bulk] - q)) / n)


def bulk_ks(x_sorted: np.ndarray, family: Family, theta, n_bulk: int) -> float:
    """``sup |F_n - F_theta|`` over the bulk's points, with ``F_theta`` from the quantile table.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> x = fam.quantiles({"scale": 1.0}, (np.arange(100) + 0.5) / 100)
    >>> round(bulk_ks(x, fam, {"scale": 1.0}, n_bulk=100), 3)    # 1/(2 n) for midpoint quantiles
    0.005
    """
    n = x_sorted.size
    xb = x_sorted[:n_bulk]
    u = np.linspace(0, 1, 4001)
    qs = family.quantiles(theta, u)
    F = np.interp(xb, qs, u, left=0.0, right=1.0)
    i = np.arange(1, n_bulk + 1)
    return float(max(np.max(i / n - F), np.max(F - (i - 1) / n)))


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    o = np.argsort(v)
    c = np.cumsum(w[o])
    return float(v[o][np.searchsorted(c, 0.5 * c[-1])])


def _profile_scale(x: np.ndarray, q: np.ndarray) -> float:
    """``argmin_s sum |x_i - s q_i|`` = weighted median of ``x_i/q_i`` with weights ``q_i`` (``q_i > 0``)."""
    pos = q > 0
    if not np.any(pos):
        return 1.0
    return _weighted_median(x[pos] / q[pos], q[pos])


def _minimize(x: np.ndarray, family: Family, n_bulk: int, start: dict, scan: int = 13) -> tuple[dict, float, int]:
    """Minimize the bulk W1. A free ``scale`` is profiled out exactly (weighted median), so the search
    runs over the other parameters only."""
    profile = "scale" in family.names
    names = [k for k in family.names if k != "scale"]
    n = x.size
    u = _u(n)[:n_bulk]
    xb = x[:n_bulk]
    lo = family.to_eta({k: family.bounds[k][0] for k in names}, names)
    hi = family.to_eta({k: family.bounds[k][1] for k in names}, names)
    slo, shi = family.bounds.get("scale", (0.0, math.inf))
    count = [0]

    def evaluate(eta) -> tuple[float, dict]:
        eta = np.asarray(eta, dtype=float)
        if np.any(eta < lo) or np.any(eta > hi):
            return 1e300, {}
        count[0] += 1
        th = family.from_eta(eta, names)
        if profile:
            q = family.quantiles(dict(th, scale=1.0), u)
            th["scale"] = float(np.clip(_profile_scale(xb, q), slo, shi))
            return float(np.sum(np.abs(xb - th["scale"] * q)) / n), th
        return float(np.sum(np.abs(xb - family.quantiles(th, u))) / n), th

    def f(eta) -> float:
        return evaluate(eta)[0]

    eta0 = np.clip(family.to_eta(start, names), lo, hi)
    if not names:
        val, th = evaluate(eta0)
        return th, val, count[0]
    if len(names) == 1:
        grid = np.unique(np.concatenate([np.linspace(lo[0], hi[0], scan), eta0]))
        vals = np.array([f([g]) for g in grid])
        j = int(np.argmin(vals))
        a, b = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
        res = minimize_scalar(lambda e: f([e]), bounds=(a, b), method="bounded",
                              options={"xatol": 1e-7 * max(1.0, abs(grid[j]))})
        best = res.x if res.fun <= vals[j] else grid[j]
        val, th = evaluate([best])
        return th, val, count[0]
    res = minimize(f, eta0, method="Nelder-Mead",
                   options={"xatol": 1e-5, "fatol": 1e-12, "maxiter": 300 * len(names), "adaptive": True})
    res2 = minimize(f, res.x, method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-13, "maxiter": 150 * len(names)})
    best = res2.x if res2.fun <= res.fun else res.x
    val, th = evaluate(best)
    return th, val, count[0]


def fit_family(eigs: np.ndarray, family: Family, start: dict | None = None, rel_tol: float = 0.02,
               trim: float = 0.01, max_outlier_frac: float = 0.02) -> Fit:
    """Fit ``family`` to the eigenvalues ``eigs`` (any shape, pooled) by minimum bulk W1 (module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.identify import MHSAFamily
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, target="attention"))
    >>> x = fam.sample({"beta": 1.0}, np.random.default_rng(0))
    >>> round(fit_family(x, fam).theta["beta"], 2)
    1.0
    """
    x = np.sort(np.asarray(eigs, dtype=float).ravel())
    n = x.size
    if n < 8:
        raise ValueError(f"need at least 8 eigenvalues to fit, got {n}")
    start = dict(start or family.start(x))
    theta1, _, c1 = _minimize(x, family, n - int(trim * n), start)
    edge1 = family.right_edge(theta1)
    k = min(int(np.sum(x > edge1 * (1 + rel_tol))), int(max_outlier_frac * n))
    theta, crit, c2 = _minimize(x, family, n - k, theta1)
    edge = family.right_edge(theta)
    fit = Fit(theta=theta, criterion=crit, ks=bulk_ks(x, family, theta, n - k), edge=edge, n=n, n_outliers=k,
              outliers=x[n - k:], evaluations=c1 + c2)
    fit._scale = float(np.mean(x[:n - k])) if n - k else 1.0
    return fit
