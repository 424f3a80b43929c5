"""The limiting spectral law of ``Y Y^T`` (or ``Y_att Y_att^T``) as a :class:`Law`.

``solve_law(config)`` builds the pencil (:func:`build_pencil`, identical heads merged), then with
``g(z) = (1/l) tr (z - Y Y^T)^{-1}`` and ``rho(x) = -Im[g(x + i y) - atom/z]/pi`` (``y`` tiny):

1. edges: a log grid up to ``1.25 B`` (``B`` the norm bound squared) brackets the support; two rounds
   of 24-section on ``rho > tau`` and a square-root extrapolation give the right edge (and the left edge
   when the bulk is separated from 0) to about 1e-7 relative;
2. density: a grid dense near 0 (geometric down to ``1e-8 E``, where ``rho`` may blow up like
   ``x^{-a}``) and near the edges (``sin^2`` map), then up to three rounds of adaptive refinement of the
   cells whose mass is uncertain (power-law vs trapezoid rule, edges inside the grid); new points are
   solved by Newton warm-started from their neighbours when that stays consistent with them;
3. moments ``m_k = (1/2 pi i) oint z^k g(z) dz`` on the circle of centre ``E/2`` and radius ``0.75 E``
   (trapezoid rule on 128 points, exponentially accurate; conjugate symmetry halves the work);
4. the atom at 0 from the generic rank (:func:`closed_forms.atom_at_zero`), its ``atom/z`` removed
   from ``g`` before taking the density.

The CDF integrates the density cell by cell, exactly for a local power law (so the ``x^{-a}`` head is
right), plus a power-law head on ``[0, x_0]``; ``mass`` (atom plus integral) is 1 to about 1e-4.
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
    def cdf(self, x) -> np.ndarray:
        """``F(x) = mu((-inf, x])``, atom included; 1 at and above the right edge."""
        x = np.asarray(x, dtype=float)
        F = np.interp(x, self.grid, self._cum)
        x0 = self.grid[0]
        p, head = self._head
        low = (x >= 0) & (x < x0)
        if np.any(low):
            F = np.where(low, self.atom_at_zero + head * np.clip(x / x0, 0, 1) ** p, F)
        F = np.where(x < 0, 0.0, F)
        return np.clip(np.where(x >= self.right_edge, 1.0, F), 0.0, 1.0)

    def quantile(self, u) -> np.ndarray:
        """Generalized inverse of :meth:`cdf`: the smallest ``x`` with ``F(x) >= u``."""
        u = np.asarray(u, dtype=float)
        if np.any((u < 0) | (u > 1)):
            raise ValueError("quantile levels must lie in [0, 1]")
        cum = np.maximum.accumulate(self._cum)
        x = np.interp(u, cum, self.grid)
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


def _rho(g: np.ndarray, x: np.ndarray, y: np.ndarray, atom: float) -> np.ndarray:
    return np.maximum(-(g.imag + atom * y / (x * x + y * y)) / math.pi, 0.0)


def _density(solver: DysonSolver, x: np.ndarray, scale: float, delta: float, atom: float = 0.0,
             return_u: bool = False):
    """``rho(x) = -Im [g(z) - atom/z]/pi`` at ``z = x + i y``, ``y = min(delta, 1e-3 x)`` (the atom's
    Lorentzian removed), followed down from ``Im z = 2 scale`` (from ``10 B``, ``B`` the norm bound
    squared, if that start fails). ``return_u``: ``(rho, u, g)`` with the solved unknowns and ``g``."""
    y = np.minimum(delta, 1e-3 * x)
    near0 = y < delta
    if x.size > 64 and 8 <= near0.sum() < x.size // 2:   # the head near 0 needs more levels: solve apart
        out, u, g = np.empty_like(x), np.empty((x.size, solver.nu), dtype=complex), np.empty(x.size, dtype=complex)
        for part in (near0, ~near0):
            out[part], u[part], g[part] = _density(solver, x[part], scale, delta, atom, return_u=True)
        return (out, u, g) if return_u else out
    try:
        g, u = solver.solve_near_axis(x, y, y0=2.0 * scale)
    except LawSolverError:
        if scale >= solver.pencil.norm_bound() ** 2:
            raise
        g, u = solver.solve_near_axis(x, y, y0=10.0 * solver.pencil.norm_bound() ** 2)
    rho = _rho(g, x, y, atom)
    return (rho, u, g) if return_u else rho


def _density_between(solver: DysonSolver, xn: np.ndarray, grid: np.ndarray, U: np.ndarray, Gs: np.ndarray,
                     right: float, delta: float, atom: float):
    """``(rho, u, g)`` at new points inside solved cells: Newton warm-started from the linear interpolation
    of the neighbours' unknowns, accepted only if ``g`` stays within the neighbours' spread; the rest by
    continuation (:func:`_density`)."""
    i = np.clip(np.searchsorted(grid, xn) - 1, 0, grid.size - 2)
    t = (xn - grid[i]) / (grid[i + 1] - grid[i])
    u0 = (1 - t)[:, None] * U[i] + t[:, None] * U[i + 1]
    y = np.minimum(delta, 1e-3 * xn)
    gref = (1 - t) * Gs[i] + t * Gs[i + 1]
    gtol = np.abs(Gs[i + 1] - Gs[i]) + 0.01 * np.abs(gref)
    g, u, ok = solver.warm_near_axis(xn, y, u0, gref, np.where(np.isfinite(gtol), gtol, -1.0))
    rho = _rho(g, xn, y, atom)
    if not ok.all():
        rho[~ok], u[~ok], g[~ok] = _density(solver, xn[~ok], right, delta, atom, return_u=True)
    return rho, u, g


def _ksection(solver: DysonSolver, lo: float, hi: float, tau: float, scale: float, delta: float, rising: bool,
              rounds: int = 2, k: int = 24) -> float:
    """Locate the edge in ``[lo, hi]`` where ``rho`` crosses ``tau`` (``rising``: below at ``lo``).

    ``rounds`` k-sections shrink the bracket by ``(k+1)^rounds``; the edge is then extrapolated from the
    two innermost points of the last round with the square-root law (``rho^2`` linear in ``x``).
    """
    xs = rs = None
    for _ in range(rounds):
        x = np.linspace(lo, hi, k + 2)[1:-1]
        r = _density(solver, x, scale, delta)
        pos = r > tau
        xs, rs = x[pos], r[pos]
        if rising:
            i = int(np.argmax(pos)) if pos.any() else k
            lo, hi = (x[i - 1] if i > 0 else lo), (x[i] if i < k else hi)
        else:
            i = int(np.flatnonzero(pos)[-1]) if pos.any() else -1
            lo, hi = (x[i] if i >= 0 else lo), (x[i + 1] if i + 1 < k else hi)
    edge = 0.5 * (lo + hi)
    if xs is not None and xs.size >= 2:
        (xa, xb), (ra, rb) = (xs[-2:], rs[-2:]) if not rising else (xs[:2][::-1], rs[:2][::-1])
        den = ra ** 2 - rb ** 2
        if den > 0:
            e = xb + rb ** 2 * (xb - xa) / den
            if lo <= e <= hi:
                edge = e
    return float(edge)


def _edges(solver: DysonSolver, scale: float, n_coarse: int = 64) -> tuple[float, float | None]:
    """Right edge (and left edge if the bulk is separated from 0).

    Coarse log grid on ``[1e-5 B, B]`` (``B`` the norm bound squared) with ``Im z = 1e-12 B``; a point is
    in the support when ``x rho(x) > 1e-6 max(x rho)`` (outside, ``rho`` is only the ``O(Im z)`` Lorentzian
    tail). Then k-section with ``Im z = 1e-11 E`` and threshold ``1e-7 max(x rho)/E``, and a square-root
    extrapolation.
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
    left = None
    i = pos[0]
    if i > 0:
        left = _ksection(solver, x[i - 1], x[i], tau, e0, 1e-11 * e0, rising=True)
    return right, left


def _refine(solver: DysonSolver, grid: np.ndarray, rho: np.ndarray, U: np.ndarray, Gs: np.ndarray, right: float,
            atom: float, rounds: int = 3, cell_tol: float = 1e-5, split: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive refinement: split (into ``split`` parts) every cell whose mass is uncertain by more than
    ``cell_tol`` — where the power-law and trapezoid rules disagree, and on both sides of an edge inside
    the grid (density switching between 0 and positive: gaps, components at smaller scales).
    ``U``, ``Gs``: unknowns and ``g`` at the grid points (NaN where not solved) for warm starts."""
    for _ in range(rounds):
        tau = 1e-5 * np.max(grid * rho) / right      # well above the O(Im z) Lorentzian tails in a gap
        zero = rho <= tau
        lin = 0.5 * (rho[1:] + rho[:-1]) * np.diff(grid)
        err = np.abs(_cell_masses(grid, rho) - lin)
        trans = np.flatnonzero(zero[1:] != zero[:-1])
        for k in (-1, 0, 1):      # the edge cell and its two neighbours
            i = np.clip(trans + k, 0, lin.size - 1)
            err[i] = np.maximum(err[i], 0.5 * lin[i])
        cells = np.flatnonzero(err > cell_tol)
        if cells.size == 0:
            break
        u = np.arange(1, split) / split
        xn = (grid[cells, None] + np.diff(grid)[cells, None] * u[None, :]).ravel()
        xn = xn[(xn > 0) & (xn < right)]
        rn, un, gn = _density_between(solver, xn, grid, U, Gs, right, 1e-9 * right, atom)
        order = np.argsort(np.concatenate([grid, xn]), kind="stable")
        grid, rho = np.concatenate([grid, xn])[order], np.concatenate([rho, rn])[order]
        U, Gs = np.concatenate([U, un])[order], np.concatenate([Gs, gn])[order]
    return grid, rho


def _head(grid: np.ndarray, rho: np.ndarray) -> tuple[float, float, float]:
    """``(1 - a, mass, error)`` of the power law ``rho = C x^{-a}`` through the first two grid points, on
    ``[0, x_0]`` (``a`` clipped to ``[0, 0.95]``). ``error ~ mass |da/dlog x| / (1 - a)^2`` estimates what
    a drifting exponent (from the first three points) does to the head's mass."""
    if not (rho[0] > 0 and rho[1] > 0):
        return 1.0, 0.0, 0.0
    L = np.log(grid[:3])
    a01 = -math.log(rho[1] / rho[0]) / (L[1] - L[0])
    a = min(max(a01, 0.0), 0.95)
    mass = grid[0] * rho[0] / (1.0 - a)
    err = 0.0
    if rho[2] > 0:
        a12 = -math.log(rho[2] / rho[1]) / (L[2] - L[1])
        err = mass * abs(a12 - a01) / (0.5 * (L[2] - L[0])) / (1.0 - a) ** 2
    return 1.0 - a, mass, err


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
        head = right * np.geomspace(1e-8, 1.0, max(16, n // 5))[:-1]
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
              tol: float = 1e-12, pencil: Pencil | None = None) -> Law:
    """The limiting law of ``config`` (THEORY.md section 3). Raises :class:`LawSolverError` on
    non-convergence (with the failing points and residuals), ``ValueError`` for ``beta = 0``.

    ``n_grid``: density grid points (plus a geometric head near 0); ``n_contour``: contour points on the
    upper half circle; ``reduce``: merge identical uncoupled heads; ``pencil``: use this pencil
    instead (e.g. a hand-built one; ``config`` still supplies the atom and the closed-form checks).
    Only the ratios, ``beta``, sharing/tying and ``inputs`` matter; ``centering`` does not change the law.
    """
    if not isinstance(config, MHSAConfig):
        raise TypeError(f"config must be an MHSAConfig, got {type(config).__name__}")
    if config.beta == 0:
        raise ValueError("beta = 0: the centered output is exactly 0 (law = point mass at 0); nothing to solve")
    pencil = pencil if pencil is not None else build_pencil(config, reduce=reduce)
    solver = DysonSolver(pencil, tol=tol)
    scale = pencil.norm_bound() ** 2
    atom = closed_forms.atom_at_zero(config)
    right, left = _edges(solver, scale)
    grid = _grid(right, left, n_grid, atom)
    inner = (grid > 0) & (grid < right) & ((grid > left) if left is not None else True)
    rho = np.zeros_like(grid)
    U = np.full((grid.size, solver.nu), np.nan, dtype=complex)
    Gs = np.full(grid.size, np.nan, dtype=complex)
    rho[inner], U[inner], Gs[inner] = _density(solver, grid[inner], right, 1e-9 * right, atom, return_u=True)
    grid, rho = _refine(solver, grid, rho, U, Gs, right, atom)
    moments_all = _contour_moments(solver, right, n_contour)
    # power-law head on [0, grid[0]]
    head_p, head_mass, head_err = _head(grid, rho) if left is None else (1.0, 0.0, 0.0)
    for _ in range(2):      # a drifting x^{-a} blow-up: the extrapolated head is unsure, go deeper
        if head_err <= 1e-4:
            break
        xh = grid[0] * np.geomspace(1e-4, 1.0, 9)[:-1]
        grid, rho = np.concatenate([xh, grid]), np.concatenate([_density(solver, xh, right, 1e-9 * right, atom), rho])
        head_p, head_mass, head_err = _head(grid, rho)
    cum = atom + head_mass + np.concatenate([[0.0], np.cumsum(_cell_masses(grid, rho))])
    mass = float(cum[-1])
    checks = {"m0_contour": float(moments_all[0]), "m1_closed_form": closed_forms.first_moment(config),
              "m2_closed_form": closed_forms.second_moment(config), "mass": mass,
              "norm_bound_squared": scale, "mp_edge": closed_forms.mp_edge(config.beta)}
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
