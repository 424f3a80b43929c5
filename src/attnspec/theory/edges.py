"""The Stieltjes transform near the real axis: density, support test, edges and contour integrals.

Used by :func:`attnspec.theory.law.solve_law` (its docstring gives the steps). With ``g(z) = (1/l) tr (z - Y Y^T)^{-1}``
from :class:`attnspec.theory.dyson.DysonSolver`, ``g_b = g - atom/z`` and ``rho(x) = -Im g_b(x + i y) / pi`` (``y``
tiny): the right edge by k-sections on ``rho > tau`` and a square-root extrapolation, the left edge by a scale-free
support test, the CDF below a point and the moments by contour integrals of ``g``.
"""
from __future__ import annotations

import math

import numpy as np

from .dyson import DysonSolver, LawSolverError

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



def _solve_grid(solver: DysonSolver, x: np.ndarray, y: np.ndarray, scale: float, delta: float,
                stride: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """``(g, u)`` at grid points ``x + i y`` (``x`` ascending): every ``stride``-th point (and the last) by
    continuation (:func:`_solve_points`), the others by Newton warm-started from their two solved neighbours
    (:meth:`DysonSolver.warm_near_axis`, accepted only when ``g`` stays within the neighbours' spread), the rest
    by continuation too."""
    n = x.size
    if n < 8 * stride:
        return _solve_points(solver, x, y, scale, delta)
    coarse = np.zeros(n, dtype=bool)
    coarse[::stride] = True
    coarse[-1] = True
    g, u = np.empty(n, dtype=complex), np.empty((n, solver.nu), dtype=complex)
    g[coarse], u[coarse] = _solve_points(solver, x[coarse], y[coarse], scale, delta)
    rest = np.flatnonzero(~coarse)
    u0, gref, gtol = _warm_start(x[rest], x[coarse], u[coarse], g[coarse])
    gr, ur, ok = solver.warm_near_axis(x[rest], y[rest], u0, gref, gtol)
    if not ok.all():
        gr[~ok], ur[~ok] = _solve_points(solver, x[rest][~ok], y[rest][~ok], scale, delta)
    g[rest], u[rest] = gr, ur
    return g, u

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


def _contour_moments(solver: DysonSolver, right: float, n: int = 64, k: int = 4) -> np.ndarray:
    c, R = 0.5 * right, 0.75 * right
    z, g = solver.g_on_circle(c, R, n)
    e = (z - c) / R
    j = np.arange(k + 1)[:, None]
    # (1/2 pi i) oint z^j g dz over the full circle = mean over 2n points of z^j g R e^{i theta};
    # the lower half is the conjugate of the upper half.
    return np.real(np.sum(z[None, :] ** j * g * R * e, axis=1)) / n
