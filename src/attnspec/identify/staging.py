"""Where the fits run: exact laws, or law tables for speed (the staging of :func:`attnspec.identify.identify`).

With two or more shape parameters (``beta``, ``psi``, ``phi``; ``scale`` is profiled exactly) the law is
tabulated (:class:`~attnspec.identify.tables.TabulatedFamily`): a wide box around the moment start,
re-centred until the fit is inside it (:func:`fit_fast`), then a narrow box around the fit on which the
final fit and all bootstrap refits run (:func:`refit_table`). With the operator-valued solver and one
free ``beta`` (and ``scale``) a one-dimensional ``beta`` table does the same job
(:class:`~attnspec.identify.tables.TabulatedBetaFamily`).

Widths are in fit coordinates ``eta`` (``log`` for positive parameters; ``beta``'s relative to
``beta``, floored at 0.2).
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .family import Family, MHSAFamily
from .fit import Fit, fit_family
from .tables import TabulatedBetaFamily, TabulatedFamily

__all__ = ["fit_fast", "refit_table", "refit_stand_in", "shape_names"]

#: Half-widths of the wide search table and the smallest half-widths of the refit table.
_WIDE = {"beta": 0.25, "psi": 0.5, "phi": 0.5}
_NARROW = {"beta": 0.04, "psi": 0.1, "phi": 0.1}


def shape_names(family: Family) -> list[str]:
    """The free parameters other than the profiled ``scale``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> shape_names(MHSAFamily(MHSAConfig.uniform(16, 16, target="attention"), free=("beta", "scale")))
    ['beta']
    """
    return [k for k in family.names if k != "scale"]


def _half_widths(widths: Mapping[str, float], theta: Mapping[str, float], names) -> dict[str, float]:
    # beta is a linear coordinate: its half-width is relative to beta
    return {k: widths[k] * (max(theta["beta"], 0.2) if k == "beta" else 1.0) for k in names}


def _nodes(family: Family) -> tuple[int, int]:
    """Nodes per shape parameter of the wide and the refit table (fewer with more parameters)."""
    return (7, 9) if len(shape_names(family)) <= 2 else (5, 6)


def _fit_wide_table(x: np.ndarray, family: MHSAFamily, max_moves: int = 6) -> tuple[TabulatedFamily, Fit]:
    """Fit on a wide law table, re-centred on the fit until the fit is inside it."""
    shape = shape_names(family)
    center = family.start(x)
    for _ in range(max_moves):
        wide = TabulatedFamily(family, center, _half_widths(_WIDE, center, shape), nodes=_nodes(family)[0])
        fit = fit_family(x, wide, start=center)
        if not wide.on_border(fit.theta):
            break
        center = fit.theta
    return wide, fit


def fit_fast(x: np.ndarray, family: Family) -> tuple[Family, Fit]:
    """Fit ``family`` to the sorted eigenvalues ``x``, on a law table where that is faster.

    Two or more shape parameters: on a wide :class:`TabulatedFamily` (module docstring). The solver
    backend with free ``beta`` (and ``scale``): on a ``beta`` table spanning ``[0.8, 1.25]`` times the
    moment start (``m1 = e^{beta^2} - 1``) when the scale is known, the whole ``beta`` range otherwise;
    if the optimum lands on the table's border the exact family is fitted instead. Otherwise the
    exact family. Returns ``(family fitted, fit)``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.identify import marchenko_pastur_law
    >>> x = 1.5 * marchenko_pastur_law(0.5).quantile((np.arange(200) + 0.5) / 200)
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> fam, fit = fit_fast(x, MarchenkoPasturFamily(200, 400))
    >>> round(fit.theta["scale"], 2)
    1.5
    """
    if isinstance(family, MHSAFamily) and len(shape_names(family)) >= 2:
        return _fit_wide_table(x, family)
    if (isinstance(family, MHSAFamily) and family.backend == "solver" and "beta" in family.names
            and set(family.names) <= {"beta", "scale"}):
        lo, hi = family.bounds["beta"]
        if "scale" in family.names:
            table = TabulatedBetaFamily(family, lo, hi, nodes=41)
        else:
            b0 = family.start(x)["beta"]
            table = TabulatedBetaFamily(family, max(lo, 0.8 * b0), min(hi, 1.25 * b0), nodes=15)
        fit = fit_family(x, table)
        a, b = table.bounds["beta"]
        if a + 0.01 * (b - a) < fit.theta["beta"] < b - 0.01 * (b - a) or (a <= lo and fit.theta["beta"] < b) \
                or (b >= hi and fit.theta["beta"] > a):
            return table, fit
    return family, fit_family(x, family)


def refit_stand_in(family: Family, theta: Mapping[str, float]) -> Family:
    """A cheap stand-in for bootstrap refits: a local ``beta`` table (``beta -+ 15 %``, 31 nodes) for MHSA
    families with free ``beta`` (and ``scale``); tables and other families as they are.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, target="attention"))
    >>> stand_in = refit_stand_in(fam, {"beta": 1.0})
    >>> type(stand_in).__name__, stand_in.bounds["beta"]
    ('TabulatedBetaFamily', (0.85, 1.15))
    """
    if isinstance(family, (TabulatedBetaFamily, TabulatedFamily)):
        return family
    if isinstance(family, MHSAFamily) and "beta" in family.names and set(family.names) <= {"beta", "scale"}:
        b = theta["beta"]
        lo, hi = family.bounds["beta"]
        return TabulatedBetaFamily(family, max(lo, 0.85 * b), min(hi, 1.15 * b), nodes=31)
    return family


def refit_table(x: np.ndarray, wide: TabulatedFamily, fit: Fit, pilot: np.ndarray | None) -> tuple[TabulatedFamily, Fit]:
    """The table on which the final fit and all bootstrap refits run.

    It must hold ``eta_hat``, the point the bootstrap simulates at (``eta_hat - b1``, ``b1`` the pilot's
    offset) and the bootstrap cloud (centred near ``eta_hat``, within the pilot's reach): the box spans
    ``eta_hat``, ``eta_hat - b1`` and the pilot mean, plus ``max(6 sd_pilot, narrow floor)`` on each
    side. The final fit is redone on it, so that the fit and the refits share one interpolant (its
    error then largely cancels in the bias correction). ``pilot``: ``(P, p)`` refitted fit coordinates
    of pilot draws, or ``None``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, d_qk=50, target="attention"), free=("beta", "psi"))
    >>> x = np.sort(fam.sample({"beta": 1.0, "psi": 0.5}, np.random.default_rng(0)))
    >>> wide, fit = fit_fast(x, fam)
    >>> table, refit = refit_table(x, wide, fit, pilot=None)
    >>> bool(table.bounds["beta"][0] < refit.theta["beta"] < table.bounds["beta"][1])
    True
    """
    shape = list(wide.shape_names)
    inner = wide.inner
    idx = [wide.names.index(k) for k in shape]
    eta0 = wide.to_eta(fit.theta)[idx]
    if pilot is not None and len(pilot) > 1:
        p = pilot[:, idx]
        mean, sd = p.mean(axis=0), p.std(axis=0, ddof=1)
    else:
        mean, sd = eta0, np.zeros_like(eta0)
    pts = np.stack([eta0, mean, 2 * eta0 - mean])
    floor = np.array(list(_half_widths(_NARROW, fit.theta, shape).values()))
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    half = 0.5 * (hi - lo) + np.maximum(6 * sd, floor)
    center = {k: (math.exp(c) if k in inner.log_scale else float(c)) for k, c in zip(shape, 0.5 * (lo + hi))}
    table = TabulatedFamily(inner, center, dict(zip(shape, half)), nodes=_nodes(wide)[1])
    start = {**fit.theta, **{k: float(np.clip(fit.theta[k], *table.bounds[k])) for k in shape}}
    return table, fit_family(x, table, start=start)
