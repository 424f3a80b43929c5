"""The limiting spectral law of ``Y Y^T`` (or ``Y_att Y_att^T``) as a :class:`Law`.

``solve_law(config)`` builds the pencil (:func:`build_pencil`, identical heads merged), then with
``g(z) = (1/l) tr (z - Y Y^T)^{-1}``, ``g_b = g - atom/z`` (the atom at 0 from the generic rank,
:func:`closed_forms.atom_at_zero`) and ``rho(x) = -Im g_b(x + i y)/pi`` (``y`` tiny):

1. right edge ``E``: a log grid up to ``1.25 B`` (``B`` the norm bound squared) brackets it; rounds of
   24-section on ``rho > tau`` (at least two, and until the last one has two support points) and a
   square-root extrapolation give it to about 1e-7 relative;
2. left edge: ``B`` can exceed ``E`` by orders of magnitude, so small scales are searched apart with a
   scale-free support test: ``x`` is in the support when ``-Im g_b > theta |g_b|`` at ``Im z = eps x``
   (order one in the support, ``O(eps x / (L - x))`` in a gap ``[0, L)``). In a gap at ``1e-12 E``:
   probes, one per decade, bracket the lowest support point; four k-sections at ``Im z = 1e-10 x`` and a
   square-root extrapolation place the edge to about 1e-7 relative;
3. density: a grid dense near 0 (geometric down to ``1e-8 E``, where ``rho`` may blow up like
   ``x^{-a}``; ``Im z <= 1e-7 x``, so the Poisson smoothing is negligible) or above the left edge, and
   near the edges (``sin^2`` map); then adaptive refinement of every cell whose mass is uncertain by more
   than 1e-10 (new points by Newton warm-started from their neighbours when that stays consistent);
4. cell masses: the cubic through four neighbouring points in a variable where the density is smooth
   (``t`` of the ``sin^2`` map for square-root edges, ``log(x - lo)`` for a power-law head or a small left
   edge), whichever has the smaller error estimate; a square-root extrapolation in cells that hold an
   edge; nothing in gaps (the support test again: the Poisson tail of a component is not density);
5. when the support reaches 0, the mass on ``[0, 1e-8 E]`` exactly from
   ``F(x) = (x/pi) int_0^pi Re[e^{i theta} g(x e^{i theta})] dtheta`` (Gauss–Legendre; the integrand
   continues analytically through the support, so a few nodes give machine precision);
6. moments ``m_k = (1/2 pi i) oint z^k g(z) dz`` on the circle of centre ``E/2`` and radius ``0.75 E``
   (trapezoid rule on 128 points, exponentially accurate; conjugate symmetry halves the work).

The CDF cumulates the cell masses on top of the atom and a power-law head on ``[0, x_0]`` (in a cell: the
monotone cubic Hermite interpolant with the density as slope); ``mass`` (atom plus head plus cells, nothing
normalized) is 1 to about 1e-7, and the CDF agrees with the contour integral above to about 1e-8.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..config import MHSAConfig
from ..spectra import ks_to_cdf, split_outliers, wasserstein1_to_cdf
from . import closed_forms
from .dyson import DysonSolver, LawSolverError
from .pencil import Pencil, build_pencil

__all__ = ["Law", "solve_law", "law_distances", "pencil_moments"]


@dataclass(frozen=True, eq=False)
class Law:
    """Limiting spectral law of ``Y Y^T``: continuous density on ``grid``, atom at 0, edges, moments.

    ``moments`` are ``m_1..m_4`` of the whole law (atom included, which adds nothing for ``k >= 1``).
    ``checks`` holds closed-form cross-checks (``m1_closed_form``, ``m2_closed_form`` where known,
    ``mass``: atom plus integrated density).
    """
    config: MHSAConfig
    grid: np.ndarray
    density: np.ndarray
    atom_at_zero: float
    right_edge: float
    left_edge: float | None
    moments: np.ndarray
    mass: float
    checks: dict = field(default_factory=dict)
    _head: tuple = (0.0, 0.0)      # (exponent 1 - a, mass) of the power-law head on [0, grid[0]]
    _cum: np.ndarray | None = None

    # ------------------------------------------------------------------ distribution
    def _cells_at(self, i: np.ndarray):
        """Cell ``i``'s ``(start value, increment, slopes at both ends)`` of the CDF in the cell coordinate
        ``s in [0, 1]``: the slopes are ``rho h``, limited (Fritsch–Carlson) so that the cubic is monotone."""
        g, c, r = self.grid, self._cum, self.density
        h = g[i + 1] - g[i]
        d = np.maximum(c[i + 1] - c[i], 0.0)
        m0, m1 = r[i] * h, r[i + 1] * h
        with np.errstate(all="ignore"):
            k = np.sqrt(m0 * m0 + m1 * m1) / (3.0 * d)
            lim = np.where(d > 0, np.where(k > 1, 1.0 / k, 1.0), 0.0)
        return c[i], d, m0 * lim, m1 * lim

    @staticmethod
    def _hermite(c0, d, m0, m1, s):
        """The cubic Hermite interpolant of the CDF in a cell: ``c0`` at ``s = 0``, ``c0 + d`` at 1."""
        return c0 + d * s * s * (3 - 2 * s) + m0 * s * (1 - s) ** 2 - m1 * s * s * (1 - s)

    def cdf(self, x) -> np.ndarray:
        """``F(x) = mu((-inf, x])``, atom included; 1 at and above the right edge. Between grid points, the
        cubic Hermite interpolant of the cumulated cell masses with the density as slope (monotone),
        consistent with the cell masses to their order; below the grid, the atom and a power-law head."""
        x = np.asarray(x, dtype=float)
        g = self.grid
        i = np.clip(np.searchsorted(g, x, side="right") - 1, 0, g.size - 2)
        s = np.clip((x - g[i]) / (g[i + 1] - g[i]), 0.0, 1.0)
        F = self._hermite(*self._cells_at(i), s)
        x0 = g[0]
        p, head = self._head
        low = (x >= 0) & (x < x0)
        if np.any(low):
            F = np.where(low, self.atom_at_zero + head * np.clip(x / x0, 0, 1) ** p, F)
        F = np.where(x < 0, 0.0, F)
        return np.clip(np.where(x >= self.right_edge, 1.0, F), 0.0, 1.0)

    def quantile(self, u) -> np.ndarray:
        """Generalized inverse of :meth:`cdf`: the smallest ``x`` with ``F(x) >= u`` (inside a cell by
        bisection on the monotone cubic)."""
        u = np.asarray(u, dtype=float)
        if np.any((u < 0) | (u > 1)):
            raise ValueError("quantile levels must lie in [0, 1]")
        cum = np.maximum.accumulate(self._cum)
        g = self.grid
        i = np.clip(np.searchsorted(cum, u, side="left") - 1, 0, g.size - 2)
        cell = self._cells_at(i)
        lo, hi = np.zeros(u.shape), np.ones(u.shape)
        for _ in range(52):
            mid = 0.5 * (lo + hi)
            below = self._hermite(*cell, mid) < u
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        x = np.where(u >= cum[-1], g[-1], g[i] + hi * (g[i + 1] - g[i]))
        p, head = self._head
        F0 = self.atom_at_zero + head
        if head > 0:
            frac = np.clip((u - self.atom_at_zero) / head, 0.0, 1.0)
            x = np.where(u < F0, self.grid[0] * frac ** (1.0 / p), x)
        x = np.where(u <= self.atom_at_zero, 0.0, x)
        if self.left_edge is not None:
            x = np.where(u > self.atom_at_zero, np.maximum(x, self.left_edge), x)
        return np.minimum(x, self.right_edge)

    def pdf(self, x) -> np.ndarray:
        """Continuous density at ``x`` (linear interpolation of the grid values)."""
        return np.interp(np.asarray(x, dtype=float), self.grid, self.density, left=0.0, right=0.0)

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict:
        """Plain JSON-able data."""
        return {
            "config": self.config.to_dict(),
            "description": self.config.describe(),
            "moments": [float(m) for m in self.moments],
            "right_edge": float(self.right_edge),
            "left_edge": None if self.left_edge is None else float(self.left_edge),
            "atom_at_zero": float(self.atom_at_zero),
            "mass": float(self.mass),
            "checks": {k: (None if v is None else float(v)) for k, v in self.checks.items()},
            "grid": [float(x) for x in self.grid],
            "density": [float(r) for r in self.density],
        }

    def plot(self, ax=None, label: str | None = None, **kwargs):
        """Draw the density (and the atom as a note in the label) on a matplotlib axis."""
        if ax is None:
            import matplotlib.pyplot as plt
            ax = plt.gca()
        atom = f", atom {self.atom_at_zero:.3f}" if self.atom_at_zero > 1e-3 else ""
        lab = label if label is not None else f"law (edge {self.right_edge:.4g}{atom})"
        kwargs.setdefault("color", "black")
        kwargs.setdefault("lw", 1.5)
        ax.plot(self.grid, self.density, label=lab, **kwargs)
        return ax


_Y_REL = 1e-7        # Im z <= _Y_REL * x: the Poisson smoothing of rho near 0 is biased by O(Im z / x)
_HEAD = 1e-8         # the grid starts at _HEAD * E when the support reaches 0; below, F from a contour integral
_DEPTH = 1e-12       # gaps ending below _DEPTH * E are not looked for
_PROBE_Y, _PROBE_THETA = 1e-3, 3e-2   # support test of the probes: Im z = _PROBE_Y x, threshold


def _rho(g: np.ndarray, x: np.ndarray, y: np.ndarray, atom: float) -> np.ndarray:
    return np.maximum(-(g.imag + atom * y / (x * x + y * y)) / math.pi, 0.0)


def _solve_g(solver: DysonSolver, x: np.ndarray, y: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``(g, u)`` at ``x + i y`` followed down from ``Im z = 2 scale`` (from ``10 B``, ``B`` the norm bound
    squared, if that start fails)."""
    try:
        return solver.solve_near_axis(x, y, y0=2.0 * scale)
    except LawSolverError:
        if scale >= solver.pencil.norm_bound() ** 2:
            raise
        return solver.solve_near_axis(x, y, y0=10.0 * solver.pencil.norm_bound() ** 2)


def _solve_points(solver: DysonSolver, x: np.ndarray, y: np.ndarray, scale: float,
                  delta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(g, u)`` at ``x + i y`` (:func:`_solve_g`); points with ``y < delta`` (near 0, more continuation
    levels) are solved apart when they are a minority of many."""
    near0 = y < delta
    if x.size > 64 and 8 <= near0.sum() < x.size // 2:
        g, u = np.empty(x.size, dtype=complex), np.empty((x.size, solver.nu), dtype=complex)
        for part in (near0, ~near0):
            g[part], u[part] = _solve_g(solver, x[part], y[part], scale)
        return g, u
    return _solve_g(solver, x, y, scale)


def _density(solver: DysonSolver, x: np.ndarray, scale: float, delta: float, atom: float = 0.0,
             return_u: bool = False):
    """``rho(x) = -Im [g(z) - atom/z]/pi`` at ``z = x + i y``, ``y = min(delta, 1e-7 x)`` (the atom's
    Lorentzian removed; ``y/x`` this small keeps the Poisson smoothing of an ``x^{-a}`` head below 1e-8 of
    its mass), followed down from ``Im z = 2 scale`` (:func:`_solve_points`). ``return_u``: ``(rho, u, g)``
    with the solved unknowns and ``g``."""
    y = np.minimum(delta, _Y_REL * x)
    g, u = _solve_points(solver, x, y, scale, delta)
    rho = _rho(g, x, y, atom)
    return (rho, u, g) if return_u else rho


def _warm_start(xn: np.ndarray, xs: np.ndarray, U: np.ndarray, Gs: np.ndarray):
    """``(u0, g_ref, g_tol)`` for new points ``xn`` inside the cells of the solved points ``xs`` (sorted;
    rows of ``U``/``Gs`` NaN where not solved): linear interpolation of the neighbours' unknowns, or the one
    solved neighbour's (e.g. next to an edge, where nothing is solved)."""
    i = np.clip(np.searchsorted(xs, xn) - 1, 0, xs.size - 2)
    t = ((xn - xs[i]) / (xs[i + 1] - xs[i]))[:, None]
    fl, fr = np.all(np.isfinite(U[i]), axis=1), np.all(np.isfinite(U[i + 1]), axis=1)
    both = fl & fr
    u0 = np.where(both[:, None], (1 - t) * U[i] + t * U[i + 1], np.where(fl[:, None], U[i], U[i + 1]))
    t = t[:, 0]
    gref = np.where(both, (1 - t) * Gs[i] + t * Gs[i + 1], np.where(fl, Gs[i], Gs[i + 1]))
    with np.errstate(invalid="ignore"):
        gtol = np.where(both, np.abs(Gs[i + 1] - Gs[i]) + 0.01 * np.abs(gref), 0.05 * np.abs(gref))
    return u0, gref, np.where(np.isfinite(gtol), gtol, -1.0)


def _density_between(solver: DysonSolver, xn: np.ndarray, grid: np.ndarray, U: np.ndarray, Gs: np.ndarray,
                     right: float, delta: float, atom: float):
    """``(rho, u, g)`` at new points inside solved cells: Newton warm-started from the neighbours'
    unknowns (:func:`_warm_start`), accepted only if ``g`` stays within the neighbours' spread; the rest by
    continuation (:func:`_density`)."""
    u0, gref, gtol = _warm_start(xn, grid, U, Gs)
    y = np.minimum(delta, _Y_REL * xn)
    g, u, ok = solver.warm_near_axis(xn, y, u0, gref, gtol)
    rho = _rho(g, xn, y, atom)
    if not ok.all():
        rho[~ok], u[~ok], g[~ok] = _density(solver, xn[~ok], right, delta, atom, return_u=True)
    return rho, u, g


def _ksection(solver: DysonSolver, lo: float, hi: float, tau: float, scale: float, delta: float, rising: bool,
              rounds: int = 2, k: int = 24, max_rounds: int = 5) -> float:
    """Locate the edge in ``[lo, hi]`` where ``rho`` crosses ``tau`` (``rising``: below at ``lo``).

    At least ``rounds`` k-sections, each shrinking the bracket by ``k + 1``, and more (up to ``max_rounds``)
    until the last one has two points above ``tau`` (else the innermost support points can lie far from
    the edge); the edge is then extrapolated from the two innermost support points with the square-root
    law (``rho^2`` linear in ``x``): their distance to the edge is below two spacings of the last round,
    about 1e-3 of the bracket, so the edge is good to about 1e-7 relative.
    """
    xs, rs = [], []
    for r in range(max_rounds):
        x = np.linspace(lo, hi, k + 2)[1:-1]
        rho = _density(solver, x, scale, delta)
        pos = rho > tau
        xs += list(x[pos])
        rs += list(rho[pos])
        if rising:
            i = int(np.argmax(pos)) if pos.any() else k
            lo, hi = (x[i - 1] if i > 0 else lo), (x[i] if i < k else hi)
        else:
            i = int(np.flatnonzero(pos)[-1]) if pos.any() else -1
            lo, hi = (x[i] if i >= 0 else lo), (x[i + 1] if i + 1 < k else hi)
        if r + 1 >= rounds and pos.sum() >= 2:
            break
    edge = 0.5 * (lo + hi)
    if len(xs) >= 2:
        xs, rs = np.array(xs), np.array(rs)
        order = np.argsort(xs)
        inner = order[-2:] if not rising else order[:2][::-1]      # (farther, nearer) from the edge
        (xa, xb), (ra, rb) = xs[inner], rs[inner]
        den = ra ** 2 - rb ** 2
        if den > 0:
            e = xb + rb ** 2 * (xb - xa) / den
            if lo <= e <= hi:
                edge = e
    return float(edge)


def _support_of(g: np.ndarray, x: np.ndarray, y: np.ndarray, atom: float,
                theta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(in_support, rho)`` from ``g`` at ``z = x + i y``: with ``g_b = g - atom/z``, ``x`` is in the
    support when ``-Im g_b > theta |g_b|``.

    Scale-free: inside the support ``-Im g_b / |g_b|`` is of order one (``sin(pi a)`` under an ``x^{-a}``
    head, ``~1/log(1/x)`` for a finite density at 0), in a gap ``[0, L)`` it is ``O(y / (L - x))``
    (the Poisson tail of the bulk; an error in the atom leaves only ``O(y/x)``)."""
    gb = g - atom / (x + 1j * y)
    with np.errstate(all="ignore"):
        sup = np.isfinite(gb) & (-gb.imag > theta * np.abs(gb))
    return sup, np.maximum(-gb.imag / math.pi, 0.0)


def _left_edge(solver: DysonSolver, x_top: float, right: float, atom: float, depth: float = _DEPTH,
               per_decade: int = 1) -> float:
    """Left edge of the support when the support test at ``depth * right`` said "gap" (:func:`_reaches_zero`).

    ``x_top`` is a point of the support. Probes at ``per_decade`` points per decade from ``depth * right``
    to ``x_top`` (:func:`_support_of` with ``Im z = 1e-3 x``, ``theta = 0.03``); the lowest support probe
    and the gap point below it bracket the edge (the lowest: a small component below a gap is found),
    refined by :func:`_edge_ksection`."""
    x_min = depth * right
    n = max(2, int(math.ceil(per_decade * math.log10(max(x_top / x_min, 10.0)))))
    probes = np.geomspace(x_min, max(x_top, 10 * x_min), n + 1)[1:-1]
    g, _ = _solve_g(solver, probes, _PROBE_Y * probes, right)
    sup = _support_of(g, probes, _PROBE_Y * probes, atom, _PROBE_THETA)[0]
    j = int(np.argmax(sup)) if sup.any() else probes.size
    lo = probes[j - 1] if j > 0 else x_min
    hi = probes[j] if j < probes.size else x_top
    return _edge_ksection(solver, lo, hi, right, atom, x_top)


def _reaches_zero(solver: DysonSolver, right: float, atom: float) -> bool:
    """The support test (:func:`_support_of`, ``Im z = 1e-3 x``, ``theta = 0.03``) at ``_DEPTH * right``.

    In the support there: the support reaches 0, for the law (a gap ending lower holds less than about
    ``_DEPTH^{1/2}`` of the mass, and the head's mass comes from the exact :func:`_cdf_contour` anyway)."""
    x = np.array([_DEPTH * right])
    g, _ = _solve_g(solver, x, _PROBE_Y * x, right)
    return bool(_support_of(g, x, _PROBE_Y * x, atom, _PROBE_THETA)[0][0])


def _contour_nodes(x: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``z_j = x e^{i theta_j}`` and weights ``w_j`` with ``F(x) = sum_j w_j Re[z_j g(z_j)]`` (see
    :func:`_cdf_contour`)."""
    s, w = np.polynomial.legendre.leggauss(n)
    th = 0.5 * np.pi * (s + 1.0)
    return x * np.exp(1j * th), 0.5 * w


def _edge_ksection(solver: DysonSolver, lo: float, hi: float, scale: float, atom: float, x_top: float,
                   ks: tuple[int, ...] = (8, 12, 12, 12)) -> float:
    """The left edge in ``[lo, hi]`` (``lo`` in the gap, ``hi`` in the support by the probes' test):
    k-sections with ``ks[r]`` points in round ``r`` (geometric while ``hi/lo > 1.5``), each point classified
    by :func:`_support_of` at ``Im z = 1e-10 x``, ``theta = 1e-5`` (the test flips within about 1e-10
    relative of a square-root edge), then the square-root extrapolation (``rho^2`` linear) from the two
    lowest support points (about 1e-4 relative from the edge after the default rounds, so the edge is
    good to ~1e-7). The first round also tests ``hi`` and moves the bracket up (towards ``x_top``) if no
    point is in the support: the probes' coarser test may call a point just below the edge "support".
    Later rounds are warm-started from the previous round's solutions."""
    y_rel, theta = 1e-10, 1e-5
    X = np.array([lo])
    U = np.full((1, solver.nu), np.nan, dtype=complex)
    G = np.full(1, np.nan, dtype=complex)
    xs, rs = [], []

    def keep(x, u, g):
        nonlocal X, U, G
        order = np.argsort(np.concatenate([X, x]), kind="stable")
        X, U, G = np.concatenate([X, x])[order], np.concatenate([U, u])[order], np.concatenate([G, g])[order]

    for r, k in enumerate(ks):
        x = (np.geomspace if hi > 1.5 * lo else np.linspace)(lo, hi, k + 2)[1:-1]
        if r == 0:
            for _ in range(4):
                x = np.append((np.geomspace if hi > 1.5 * lo else np.linspace)(lo, hi, k + 2)[1:-1], hi)
                g, u = _solve_g(solver, x, y_rel * x, scale)
                keep(x, u, g)
                sup = _support_of(g, x, y_rel * x, atom, theta)[0]
                if sup.any() or hi >= x_top:
                    break
                lo, hi = hi, min(10.0 * hi, x_top)
            k = x.size
        else:
            u0, gref, gtol = _warm_start(x, X, U, G)
            g, u, ok = solver.warm_near_axis(x, y_rel * x, u0, gref, gtol)
            if not ok.all():
                g[~ok], u[~ok] = _solve_g(solver, x[~ok], y_rel * x[~ok], scale)
            keep(x, u, g)
        sup, rho = _support_of(g, x, y_rel * x, atom, theta)
        xs += list(x[sup])
        rs += list(rho[sup])
        i = int(np.argmax(sup)) if sup.any() else k
        lo, hi = (x[i - 1] if i > 0 else lo), (x[i] if i < k else hi)
    edge = 0.5 * (lo + hi)
    xs, rs = np.array(xs), np.array(rs)
    order = np.argsort(xs)
    if xs.size >= 2:
        (xb, xa), (rb, ra) = xs[order[:2]], rs[order[:2]]
        den = ra ** 2 - rb ** 2
        if den > 0:
            e = xb - rb ** 2 * (xa - xb) / den
            if lo <= e <= hi:
                edge = e
    return float(edge)


def _edges(solver: DysonSolver, scale: float, n_coarse: int = 64) -> tuple[float, float]:
    """``(right edge, the lowest coarse point in the support)``.

    Coarse log grid on ``[1e-5 B, 1.25 B]`` (``B`` the norm bound squared) with ``Im z = 1e-12 B``; a point
    is in the support when ``x rho(x) > 1e-6 max(x rho)`` (outside, ``rho`` is only the ``O(Im z)``
    Lorentzian tail). Then k-section with ``Im z = 1e-11 E`` and threshold ``1e-7 max(x rho)/E``, and a
    square-root extrapolation. The norm bound can exceed ``E`` by orders of magnitude: the coarse grid
    says nothing about a left edge (see :func:`_reaches_zero`, :func:`_left_edge`).
    """
    x = np.geomspace(1e-5 * scale, 1.25 * scale, n_coarse)   # the bound can be attained (MP)
    rho = _density(solver, x, scale, 1e-12 * scale)
    q = x * rho
    pos = np.flatnonzero(q > 1e-6 * q.max())
    if q.max() <= 0 or pos.size == 0:
        raise LawSolverError("no spectral density found below the norm bound", x + 0j, rho)
    j = pos[-1]
    if j == n_coarse - 1:
        raise LawSolverError("density does not vanish at the norm bound (solver on a wrong branch?)", x[-1:] + 0j, rho[-1:])
    e0 = x[j + 1]
    tau = 1e-7 * q.max() / e0
    right = _ksection(solver, x[j], x[j + 1], tau, e0, 1e-11 * e0, rising=False)
    return right, float(min(x[pos[0]], 0.5 * right))


def _cubic_cells(v: np.ndarray, f: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """``(integral, stencil)`` over each cell ``[v_i, v_{i+1}]`` of the cubic through ``f`` at the four
    points starting at ``i - 1 + shift``; NaN where the stencil leaves the grid."""
    n = v.size
    i = np.arange(n - 1)
    s = i - 1 + shift
    idx = np.clip(s, 0, max(n - 4, 0))[:, None] + np.arange(4)[None, :]
    out = np.full(n - 1, np.nan)
    if n < 4:
        return out, idx
    h = v[i + 1] - v[i]
    with np.errstate(all="ignore"):
        q = (v[idx] - v[i][:, None]) / h[:, None]          # nodes in cell units: the cell is [0, 1]
        total = np.zeros(n - 1)
        for k in range(4):                                 # int_0^1 of the Lagrange basis polynomial k
            o = q[:, [j for j in range(4) if j != k]]
            e1, e2, e3 = o.sum(axis=1), o[:, 0] * o[:, 1] + o[:, 0] * o[:, 2] + o[:, 1] * o[:, 2], o.prod(axis=1)
            den = np.prod(q[:, k:k + 1] - o, axis=1)
            total += (0.25 - e1 / 3.0 + 0.5 * e2 - e3) / den * f[idx[:, k]]
        out = np.where((s >= 0) & (s + 3 <= n - 1), h * total, np.nan)
    return out, idx


def _cells(grid: np.ndarray, rho: np.ndarray, Gs: np.ndarray, lo: float, right: float, known: np.ndarray,
           atom: float):
    """``(masses, error estimates, in_support)`` of the cells (and points) of ``grid``.

    A grid point is in the support when :func:`_support_of` (``theta = 1e-5``) says so from its ``g`` (or is
    a known edge, ``known``): unlike a threshold on ``rho``, this tells the Poisson tail of a small
    component from a density. Inside the support (all four stencil points in it) a cell's
    mass integrates the cubic through four neighbouring points in one of two variables, where the
    integrand is smooth: ``t`` with ``x = lo + (E - lo) sin^2(pi t/2)`` (square-root edges at ``lo`` and
    ``E``) or ``log(x - lo)`` (``x^{-a}`` head, structure at the scale of a small left edge). Each
    variable's error is estimated by the spread of the cubic over the three stencils containing the cell;
    the variable with the smaller estimate is used. A cell with one end in a gap and the other in the
    support holds an edge: square-root extrapolation from the support side, error estimate half its mass.
    A cell in a gap (both ends out of the support) holds nothing. A negative cubic result falls back to
    the power-law rule.
    """
    pl = _cell_masses(grid, rho)
    sup = known | _support_of(Gs, grid, np.minimum(1e-9 * right, _Y_REL * grid), atom, 1e-5)[0]
    span = right - lo
    with np.errstate(all="ignore"):
        t = (2.0 / np.pi) * np.arcsin(np.sqrt(np.clip((grid - lo) / span, 0.0, 1.0)))
        ft = rho * span * (0.5 * np.pi) * np.sin(np.pi * t)
        dv = grid - lo
        lv = np.where(dv > 0, np.log(np.where(dv > 0, dv, 1.0)), -np.inf)
        fl = dv * rho
    best_val = np.full(pl.size, np.nan)
    best_err = np.full(pl.size, np.inf)
    for v, f in ((t, ft), (lv, fl)):
        vals, oks = [], []
        for shift in (0, -1, 1):
            c, idx = _cubic_cells(v, f, shift)
            ok = np.isfinite(c) & np.all(sup[idx], axis=1) & np.all(np.isfinite(v[idx]), axis=1)
            vals.append(np.where(ok, c, np.nan))
            oks.append(ok)
        V = np.array(vals)
        n_ok = np.sum(oks, axis=0)
        first = np.where(oks[0], V[0], np.where(oks[1], V[1], V[2]))
        W = np.where(np.isfinite(V), V, 0.0)
        spread = np.max(np.where(oks, W, -np.inf), axis=0) - np.min(np.where(oks, W, np.inf), axis=0)
        err = np.where(n_ok >= 2, spread, np.abs(first - pl))
        err = np.where(n_ok >= 1, err, np.inf)
        better = (n_ok >= 1) & (err < best_err) & (first >= 0)
        best_val = np.where(better, first, best_val)
        best_err = np.where(better, err, best_err)
    masses = np.where(np.isfinite(best_val), best_val, np.where(sup[:-1] | sup[1:], pl, 0.0))
    err = np.where(np.isfinite(best_val), best_err, 0.0)
    # edges inside the grid: one end in a gap, the other in the support
    s0, s1 = sup[:-1], sup[1:]
    rising = ~s0 & s1
    falling = s0 & ~s1
    for cells, side, nxt in ((np.flatnonzero(rising), 1, 2), (np.flatnonzero(falling), 0, -1)):
        for i in cells:
            xs, rs = grid[i + side], rho[i + side]
            j = i + nxt
            m = 0.5 * rs * (grid[i + 1] - grid[i])
            if 0 <= j < grid.size and sup[j] and rho[j] > rs:
                e = xs - rs ** 2 * (grid[j] - xs) / (rho[j] ** 2 - rs ** 2)
                if grid[i] <= e <= grid[i + 1]:
                    m = (2.0 / 3.0) * rs * abs(xs - e)
            masses[i] = m
            err[i] = 0.5 * m
    return masses, err, sup


def _refine(solver: DysonSolver, grid: np.ndarray, rho: np.ndarray, U: np.ndarray, Gs: np.ndarray, right: float,
            lo: float, known_lo: bool, atom: float, rounds: int = 10, cell_tol: float = 1e-10,
            split: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adaptive refinement: split (into ``split`` parts) every cell whose error estimate (:func:`_cells`)
    exceeds ``cell_tol``, at most ``rounds`` times. Returns ``(grid, rho, cell masses)``, ``rho`` set to 0
    out of the support (where it is only the Poisson tail of the density at ``Im z > 0``).
    ``U``, ``Gs``: unknowns and ``g`` at the grid points (NaN where not solved) for warm starts."""
    def known_of(grid):
        return (grid == right) | ((grid == lo) & known_lo)

    for _ in range(rounds):
        masses, err, _ = _cells(grid, rho, Gs, lo, right, known_of(grid), atom)
        cells = np.flatnonzero(err > cell_tol)
        w = np.diff(grid)
        cells = cells[w[cells] > 1e-12 * grid[cells + 1]]
        if cells.size == 0:
            break
        u = np.arange(1, split) / split
        xn = (grid[cells, None] + w[cells, None] * u[None, :]).ravel()
        xn = xn[(xn > 0) & (xn < right)]
        rn, un, gn = _density_between(solver, xn, grid, U, Gs, right, 1e-9 * right, atom)
        order = np.argsort(np.concatenate([grid, xn]), kind="stable")
        grid, rho = np.concatenate([grid, xn])[order], np.concatenate([rho, rn])[order]
        U, Gs = np.concatenate([U, un])[order], np.concatenate([Gs, gn])[order]
    masses, _, sup = _cells(grid, rho, Gs, lo, right, known_of(grid), atom)
    return grid, np.where(sup, rho, 0.0), masses


def _cdf_contour(solver: DysonSolver, x: float, scale: float, n: int = 12) -> float:
    """``F(x) = mu([0, x])`` (atom included) from ``F(x) = (1/pi) Im int g dz`` along the upper half circle
    ``z = x e^{i theta}``, ``theta: 0 -> pi`` (following ``log(z - t)`` along it gains ``i pi`` exactly for
    the eigenvalues ``t < x``), i.e. ``F(x) = (x/pi) int_0^pi Re[e^{i theta} g(x e^{i theta})] dtheta``,
    ``n``-point Gauss–Legendre in ``theta``. ``g`` continues analytically through the support at
    ``theta = 0``, so the rule converges exponentially (machine precision with about 8 nodes) unless an
    edge lies near ``x``."""
    z, w = _contour_nodes(x, n)
    g, _ = _solve_g(solver, z.real, z.imag, scale)
    return float(np.real(g * z) @ w)


def _head(grid: np.ndarray, rho: np.ndarray) -> float:
    """Exponent ``1 - a`` of the power law ``rho = C x^{-a}`` through the first two grid points (``a``
    clipped to ``[0, 0.95]``): the shape of the CDF on ``[0, grid[0]]``."""
    if not (rho[0] > 0 and rho[1] > 0):
        return 1.0
    a = -math.log(rho[1] / rho[0]) / math.log(grid[1] / grid[0])
    return 1.0 - min(max(a, 0.0), 0.95)


def _cell_masses(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """``int_{x_i}^{x_{i+1}} rho`` per cell, exact for a local power law ``rho = C x^{-a}`` through both
    end values (this handles the ``x^{-a}`` blow-up at 0 on a geometric grid); trapezoid where an end
    value is 0."""
    x1, x2, r1, r2 = x[:-1], x[1:], r[:-1], r[1:]
    out = 0.5 * (r1 + r2) * (x2 - x1)
    ok = (r1 > 0) & (r2 > 0) & (x1 > 0)
    L = np.log(x2[ok] / x1[ok])
    p = 1.0 + np.log(r2[ok] / r1[ok]) / L          # 1 - a
    t = p * L
    with np.errstate(all="ignore"):
        f = np.where(np.abs(t) > 1e-8, np.expm1(t) / t, 1.0 + 0.5 * t)
    out[ok] = x1[ok] * r1[ok] * L * f
    return out


def _grid(right: float, left: float | None, n: int, atom: float = 0.0) -> np.ndarray:
    t = np.linspace(0.0, 1.0, n)
    if left is None:
        bulk = right * np.sin(0.5 * np.pi * t[1:]) ** 2
        head = right * np.geomspace(_HEAD, 1.0, max(16, n // 5))[:-1]
        return np.unique(np.concatenate([head, bulk]))
    # sin^2 (dense at both edges) plus a geometric part resolving structure at small scales above the left edge
    geo = (right - left) * np.geomspace(1e-10, 1.0, max(16, n // 5))[1:-1]
    return np.unique(np.concatenate([left + (right - left) * np.sin(0.5 * np.pi * t) ** 2, left + geo]))


def _contour_moments(solver: DysonSolver, right: float, n: int = 64, k: int = 4) -> np.ndarray:
    c, R = 0.5 * right, 0.75 * right
    z, g = solver.g_on_circle(c, R, n)
    e = (z - c) / R
    j = np.arange(k + 1)[:, None]
    # (1/2 pi i) oint z^j g dz over the full circle = mean over 2n points of z^j g R e^{i theta};
    # the lower half is the conjugate of the upper half.
    return np.real(np.sum(z[None, :] ** j * g * R * e, axis=1)) / n


def pencil_moments(pencil: Pencil, k: int = 4, n_contour: int = 64, tol: float = 1e-12) -> tuple[np.ndarray, float]:
    """``(m_1..m_k, right edge)`` of the law of ``Y Y^T`` for any pencil (e.g. Marchenko–Pastur or
    products of Gaussian blocks built with :func:`pencil_from_monomials`)."""
    solver = DysonSolver(pencil, tol=tol)
    right, _ = _edges(solver, pencil.norm_bound() ** 2)
    return _contour_moments(solver, right, n_contour, k)[1:], right


def solve_law(config: MHSAConfig, n_grid: int = 200, n_contour: int = 64, reduce: bool = True,
              tol: float = 1e-12, pencil: Pencil | None = None, n_head: int = 12, symmetric: bool = True) -> Law:
    """The limiting law of ``config`` (docs/theory.md, "Computing the law: the linear pencil"). Raises
    :class:`LawSolverError` on non-convergence (with the failing points and residuals), ``ValueError`` for
    ``beta = 0``.

    ``n_grid``: density grid points (plus a geometric head near 0); ``n_contour``: contour points on the
    upper half circle; ``reduce``: merge identical uncoupled heads; ``symmetric``: collapse identical coupled
    heads by their exchange symmetry (:mod:`.symmetry`; the same law, ``False`` solves the full equation);
    ``pencil``: use this pencil
    instead (e.g. a hand-built one; ``config`` still supplies the atom and the closed-form checks);
    ``n_head``: Gauss–Legendre nodes of the contour integral for the mass below the grid when the support
    reaches 0 (``checks['head_contour_error']``: its change from ``n_head/2`` nodes). Only the ratios,
    ``beta``, sharing/tying and ``inputs`` matter; ``centering`` does not change the law.
    """
    if not isinstance(config, MHSAConfig):
        raise TypeError(f"config must be an MHSAConfig, got {type(config).__name__}")
    if config.beta == 0:
        raise ValueError("beta = 0: the centered output is exactly 0 (law = point mass at 0); nothing to solve")
    pencil = pencil if pencil is not None else build_pencil(config, reduce=reduce)
    solver = DysonSolver(pencil, tol=tol, symmetric=symmetric)
    scale = pencil.norm_bound() ** 2
    atom = closed_forms.atom_at_zero(config)
    right, x_top = _edges(solver, scale)
    left = None if _reaches_zero(solver, right, atom) else _left_edge(solver, x_top, right, atom)
    grid = _grid(right, left, n_grid, atom)
    inner = (grid > 0) & (grid < right) & ((grid > left) if left is not None else True)
    rho = np.zeros_like(grid)
    U = np.full((grid.size, solver.nu), np.nan, dtype=complex)
    Gs = np.full(grid.size, np.nan, dtype=complex)
    x = grid[inner]
    y = np.minimum(1e-9 * right, _Y_REL * x)
    n = x.size
    if left is None:    # with the grid, the nodes of the contour integral for F(grid[0]) (n_head, n_head/2 nodes)
        (z1, w1), (z2, w2) = _contour_nodes(grid[0], n_head), _contour_nodes(grid[0], n_head // 2)
        x, y = np.concatenate([x, z1.real, z2.real]), np.concatenate([y, z1.imag, z2.imag])
    g, u = _solve_points(solver, x, y, right, 1e-9 * right)
    rho[inner], U[inner], Gs[inner] = _rho(g[:n], x[:n], y[:n], atom), u[:n], g[:n]
    lo = 0.0 if left is None else left
    grid, rho, masses = _refine(solver, grid, rho, U, Gs, right, lo, left is not None, atom)
    moments_all = _contour_moments(solver, right, n_contour)
    checks = {}
    if left is None:    # the mass on [0, grid[0]] from the contour integral of g, its shape a power law
        F0 = float(np.real(g[n:n + n_head] * z1) @ w1)
        checks["head_contour_error"] = abs(F0 - float(np.real(g[n + n_head:] * z2) @ w2))
        head_p, head_mass = _head(grid, rho), max(F0 - atom, 0.0)
    else:
        head_p, head_mass = 1.0, 0.0
    cum = atom + head_mass + np.concatenate([[0.0], np.cumsum(masses)])
    mass = float(cum[-1])
    checks.update({"m0_contour": float(moments_all[0]), "m1_closed_form": closed_forms.first_moment(config),
                   "m2_closed_form": closed_forms.second_moment(config), "mass": mass,
                   "norm_bound_squared": scale, "mp_edge": closed_forms.mp_edge(config.beta)})
    if config.target == "attention" and config.inputs == "orthonormal":
        checks["edge_closed_form"] = closed_forms.attention_edge(config.beta, config.gamma, config.psi[0])
        checks["m4_closed_form"] = float(closed_forms.attention_moments(config.beta, config.gamma, config.psi[0])[3])
    return Law(config=config, grid=grid, density=rho, atom_at_zero=float(atom), right_edge=float(right),
               left_edge=None if left is None else float(left), moments=moments_all[1:], mass=mass,
               checks=checks, _head=(head_p, head_mass), _cum=cum)


def law_distances(law: Law, eigenvalues, rel_tol: float = 0.02, zero_tol: float = 1e-9) -> dict:
    """W1 and KS between ``law`` and an eigenvalue sample (pooled), and W1 of the bulk.

    Eigenvalues ``<= zero_tol * max`` are exact zeros (rank deficiency; round-off makes them ~1e-15).
    ``w1`` uses :func:`attnspec.spectra.wasserstein1_to_cdf`, ``ks`` :func:`attnspec.spectra.ks_to_cdf`
    (exact at the law's atom at zero). ``w1_bulk`` drops the sample's eigenvalues above
    ``right_edge * (1 + rel_tol)`` (:func:`attnspec.spectra.split_outliers`); ``n_outliers`` counts them.
    """
    x = np.asarray(eigenvalues, dtype=float).ravel()
    x = np.where(x <= zero_tol * max(float(x.max(initial=0.0)), 1e-300), 0.0, x)
    bulk, out = split_outliers(x, law.right_edge, rel_tol)
    ks = ks_to_cdf(x, law.cdf)
    return {
        "w1": wasserstein1_to_cdf(x, law.cdf, law.right_edge),
        "ks": ks,
        "w1_bulk": wasserstein1_to_cdf(bulk, law.cdf, law.right_edge) if bulk.size else float("nan"),
        "n_outliers": int(out.size),
    }
