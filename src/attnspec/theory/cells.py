"""Cell masses of the law's density on its grid: cubic rules in smooth variables, edges, refinement.

Used by :func:`attnspec.theory.law.solve_law` (steps 3-4 of its docstring): the grid (dense near 0 and near the
edges), the mass of each cell by the cubic through four neighbouring points in the variable where the density is
smooth (``sin^2`` map for square-root edges, ``log(x - lo)`` for a power-law head), square-root extrapolation in
cells holding an edge, nothing in gaps, and adaptive refinement of cells whose mass is uncertain.
"""
from __future__ import annotations

import math

import numpy as np

from .dyson import DysonSolver
from .edges import _HEAD, _Y_REL, _density_between, _support_of

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
