"""Law tables: a family whose quantile function is read from a table of another family's laws.

:class:`TabulatedFamily` tabulates an :class:`~attnspec.identify.family.MHSAFamily` on a box of its shape
parameters (a tensor-product cubic spline in the fit coordinates, linear in ``u``);
:class:`TabulatedBetaFamily` is the one-parameter case (``beta``, optionally with a profiled ``scale``).
The exact family's law is solved once per node; afterwards a quantile evaluation is a contraction of the
table, which makes the many refits of the parametric bootstrap cheap. Simulation, starting points and
configurations are the exact family's. :mod:`.staging` decides where the tables go.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from .family import Family, MHSAFamily

__all__ = ["TabulatedBetaFamily", "TabulatedFamily"]


class _Tabulated(Family):
    """A family whose law is read from a table of ``inner``'s laws: simulation, starting points and
    configurations are ``inner``'s."""

    inner: "MHSAFamily"

    def sample(self, theta, rng, model=None):
        return self.inner.sample(theta, rng, model=model)

    def start(self, eigs):
        return self.inner.start(eigs)

    def config(self, theta, d=None):
        return self.inner.config(theta, d)


class TabulatedBetaFamily(_Tabulated):
    """A ``beta`` (optionally ``beta, scale``) family tabulated on a grid of ``beta`` and interpolated.

    ``Q_beta(u)`` is precomputed at ``nodes`` values of ``beta`` on a fine ``u`` grid and interpolated
    by a cubic spline in ``beta`` (``log Q`` when positive) and linearly in ``u``. Use it to make a slow
    law (the operator-valued solver) cheap enough for bootstrap refits: the solver runs ``nodes``
    times once, instead of a few dozen times per fit.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.config import MHSAConfig
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, target="attention"))       # free: beta
    >>> table = TabulatedBetaFamily(fam, 0.8, 1.2, nodes=9)
    >>> bool(np.allclose(table.quantiles({"beta": 1.0}, [0.5]), fam.quantiles({"beta": 1.0}, [0.5])))
    True
    """

    def __init__(self, inner: MHSAFamily, lo: float, hi: float, nodes: int = 41, n_u: int = 4001):
        from scipy.interpolate import CubicSpline

        if "beta" not in inner.names or not set(inner.names) <= {"beta", "scale"}:
            raise ValueError("TabulatedBetaFamily wraps a family whose free parameters are beta (and scale)")
        self.inner = inner
        self.names = inner.names
        self.fixed = dict(inner.fixed)
        self.bounds = dict(inner.bounds, beta=(lo, hi))
        self.betas = np.linspace(lo, hi, nodes)
        t = np.linspace(0, 1, n_u)
        self.u = 0.5 * (1 - np.cos(np.pi * t))          # dense near u = 0 and u = 1
        table = np.array([inner.quantiles({"beta": b, "scale": 1.0}, self.u) for b in self.betas])
        self._q = CubicSpline(self.betas, table, axis=0)
        self._edge = CubicSpline(self.betas, [inner.right_edge({"beta": b, "scale": 1.0}) for b in self.betas])
        self.solves = int(nodes)

    def describe(self) -> str:
        return f"{self.inner.describe()} (tabulated at {self.betas.size} beta nodes in [{self.betas[0]}, {self.betas[-1]}])"

    def quantiles(self, theta, u):
        t = self.full(theta)
        return t.get("scale", 1.0) * np.interp(u, self.u, self._q(t["beta"]))

    def right_edge(self, theta) -> float:
        t = self.full(theta)
        return t.get("scale", 1.0) * float(self._edge(t["beta"]))



class TabulatedFamily(_Tabulated):
    """An MHSA family tabulated on a box of its shape parameters and interpolated (warm-started law table).

    The shape parameters are the free parameters other than ``scale`` (``beta``, ``psi``, ``phi``); in
    their fit coordinates ``eta`` (``log`` for ``psi`` and ``phi``, ``beta`` as is) the box is
    ``center -+ half_width`` (clipped to the family's bounds) with ``nodes`` equally spaced nodes per
    parameter. At every node the quantile function ``Q(u)`` of the law at ``scale = 1`` is tabulated on
    a grid ``u_j = (1 - cos(pi t_j))/2`` (dense near ``u = 0`` and ``1``); between nodes it is a
    tensor-product cubic spline in ``eta`` and linear in ``u``::

        Q_theta(u) = scale * interp_u( sum_{i_1..i_p} w_{i_1}(eta_1) ... w_{i_p}(eta_p) Q_{i_1..i_p}(u_j) ),

    where ``w_i`` are the cardinal cubic-spline weights (not-a-knot) of the nodes. The law is solved
    ``nodes^p`` times once; afterwards a quantile evaluation costs one contraction of the table
    (``nodes^p x n_u`` multiply-adds, well under a millisecond for ``p <= 2``) instead of a law solve.
    The box is the family's ``bounds``, so a fit on the table cannot leave it; :meth:`on_border` says
    whether a fitted point sits on an edge of the box that is not a bound of the exact family (then the
    table is too small and the caller re-centres it).

    Parameters
    ----------
    inner : MHSAFamily
        The exact family (its laws are tabulated; its ``sample`` is used as is).
    center : mapping name -> value
        Centre of the box (parameter values, not fit coordinates).
    half_width : mapping name -> float
        Half-width of the box per shape parameter, in fit coordinates (``0.1`` on a log coordinate is
        a factor ``e^{0.1}``).
    nodes : int >= 4
        Nodes per shape parameter.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.config import MHSAConfig
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, d_qk=50, target="attention"), free=("beta", "psi"))
    >>> table = TabulatedFamily(fam, {"beta": 1.0, "psi": 0.5}, {"beta": 0.1, "psi": 0.2}, nodes=5)
    >>> theta = {"beta": 1.0, "psi": 0.5}
    >>> bool(np.allclose(table.quantiles(theta, [0.5]), fam.quantiles(theta, [0.5]))), table.on_border(theta)
    (True, False)
    """

    def __init__(self, inner: MHSAFamily, center: Mapping[str, float], half_width: Mapping[str, float],
                 nodes: int = 9, n_u: int = 4001):
        from scipy.interpolate import CubicSpline

        if nodes < 4:
            raise ValueError(f"nodes must be >= 4 (cubic splines), got {nodes}")
        self.inner = inner
        self.names = inner.names
        self.shape_names = tuple(k for k in inner.names if k != "scale")
        if not self.shape_names:
            raise ValueError("TabulatedFamily needs at least one free parameter besides scale")
        self.fixed = dict(inner.fixed)
        self.log_scale = inner.log_scale
        self.bounds = dict(inner.bounds)
        self._eta_nodes, self._weights, self._exact_edges = [], [], []
        for k in self.shape_names:
            lo_b, hi_b = inner.bounds[k]
            to = math.log if k in self.log_scale else float
            fro = math.exp if k in self.log_scale else float
            c = to(float(np.clip(center[k], lo_b, hi_b)))
            a, b = max(to(lo_b), c - half_width[k]), min(to(hi_b), c + half_width[k])
            if b - a < 1e-9:
                raise ValueError(f"empty table box for {k}: center {center[k]} on its bound")
            e = np.linspace(a, b, nodes)
            self._eta_nodes.append(e)
            self._weights.append(CubicSpline(e, np.eye(nodes)))
            self.bounds[k] = (fro(a), fro(b))
            self._exact_edges.append((a <= to(lo_b) + 1e-12, b >= to(hi_b) - 1e-12))
        t = np.linspace(0.0, 1.0, n_u)
        self.u = 0.5 * (1.0 - np.cos(np.pi * t))
        grids = np.meshgrid(*self._eta_nodes, indexing="ij")
        shape = grids[0].shape
        table = np.empty(shape + (n_u,))
        edges = np.empty(shape)
        for idx in np.ndindex(*shape):
            th = {k: (math.exp(g[idx]) if k in self.log_scale else float(g[idx])) for k, g in zip(self.shape_names, grids)}
            th["scale"] = 1.0
            table[idx] = inner.quantiles(th, self.u)
            edges[idx] = inner.right_edge(th)
        self.table, self.edges = table, edges
        self.solves = int(np.prod(shape))

    def describe(self) -> str:
        box = ", ".join(f"{k} in [{self.bounds[k][0]:.4g}, {self.bounds[k][1]:.4g}]" for k in self.shape_names)
        return f"{self.inner.describe()} (tabulated at {self.solves} nodes: {box})"

    def _contract(self, arr: np.ndarray, theta: Mapping[str, float]) -> np.ndarray:
        t = self.full(theta)
        for k, spl in zip(self.shape_names, self._weights):
            e = math.log(t[k]) if k in self.log_scale else t[k]
            arr = np.tensordot(spl(e), arr, axes=(0, 0))
        return arr

    def quantiles(self, theta, u):
        t = self.full(theta)
        return t.get("scale", 1.0) * np.interp(u, self.u, self._contract(self.table, t))

    def right_edge(self, theta) -> float:
        t = self.full(theta)
        return t.get("scale", 1.0) * float(self._contract(self.edges, t))

    def on_border(self, theta: Mapping[str, float], frac: float = 0.01) -> bool:
        """Whether ``theta`` lies within ``frac`` of the box width of an edge that is not an exact bound."""
        for k, e, (lo_exact, hi_exact) in zip(self.shape_names, self._eta_nodes, self._exact_edges):
            v = math.log(theta[k]) if k in self.log_scale else theta[k]
            tol = frac * (e[-1] - e[0])
            if (v <= e[0] + tol and not lo_exact) or (v >= e[-1] - tol and not hi_exact):
                return True
        return False
