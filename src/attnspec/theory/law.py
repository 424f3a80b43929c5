"""The limiting spectral law of ``Y Y^T`` (or ``Y_att Y_att^T``) as a :class:`Law`.

``solve_law(config)`` builds the pencil (:func:`build_pencil`, identical heads merged; steps 1, 2, 5 and 6 live in
:mod:`.edges`, steps 3 and 4 in :mod:`.cells`), then with
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

from dataclasses import dataclass, field

import numpy as np

from ..config import MHSAConfig
from ..spectra import ks_to_cdf, split_outliers, wasserstein1_to_cdf
from . import closed_forms
from .cells import _grid, _head, _refine
from .dyson import DysonSolver
from .edges import (_Y_REL, _contour_moments, _contour_nodes, _edges, _left_edge, _reaches_zero, _rho, _solve_grid,
                    _solve_points)
from .pencil import Pencil, build_pencil

__all__ = ["Law", "solve_law", "law_distances", "pencil_moments"]


@dataclass(frozen=True, eq=False)
class Law:
    """Limiting spectral law ``mu`` of ``Y Y^T`` (normalized trace ``(1/l) tr``, so ``mu`` has mass 1): a
    continuous density on ``grid``, an atom at 0, the support edges and the moments. Built by :func:`solve_law`.

    Attributes
    ----------
    config : MHSAConfig
        The configuration whose law this is.
    grid, density : ndarray
        Points of the continuous part and ``rho(x) = -Im g(x + i0)/pi`` there (atom excluded).
    atom_at_zero : float
        Mass of the atom at 0 (``1 - rank/l`` of the generic rank).
    right_edge, left_edge : float, float or None
        Support edges; ``left_edge`` is None when the support reaches 0.
    moments : ndarray, shape (4,)
        ``m_k = int x^k dmu(x)``, ``k = 1..4`` (the atom adds nothing for ``k >= 1``).
    mass : float
        Atom plus integrated density (1 to about 1e-7; nothing is renormalized).
    checks : dict
        Cross-checks: ``m1_closed_form``, ``m2_closed_form``, ``mass``, ``m0_contour`` and, for a single
        attention matrix with orthonormal inputs, ``edge_closed_form`` and ``m4_closed_form``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> law = solve_law(MHSAConfig.uniform(64, 64, heads=2), n_grid=40)
    >>> round(float(law.moments[0]), 6), round(law.checks["m1_closed_form"], 6)   # e - 1 at beta = 1
    (1.718282, 1.718282)
    >>> round(law.right_edge, 3), law.left_edge, law.atom_at_zero
    (15.989, None, 0.0)
    >>> round(float(law.cdf(law.quantile(0.25))), 9), float(law.cdf(law.right_edge))
    (0.25, 1.0)
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


def pencil_moments(pencil: Pencil, k: int = 4, n_contour: int = 64, tol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Moments and right edge of the law of ``Y Y^T`` for any pencil (e.g. Marchenko–Pastur or products of
    Gaussian blocks built with :func:`attnspec.theory.pencil.pencil_from_monomials`).

    Parameters
    ----------
    pencil : Pencil
        The linear pencil whose output block is ``Y``.
    k : int >= 1
        Number of moments.
    n_contour : int
        Contour points on the upper half circle around the support.
    tol : float
        Tolerance of the fixed-point (Dyson) solver.

    Returns
    -------
    (ndarray, float)
        ``m_j = (1/2 pi i) oint z^j g(z) dz`` for ``j = 1..k`` (normalized trace), and the right edge.

    Examples
    --------
    ``X`` a ``d x d/2`` block of iid ``N(0, 1/d)`` entries: ``X X^T`` has rank ``d/2``, so its moments are half
    those of Marchenko–Pastur with ratio 1/2, and its edge is ``(1 + sqrt(1/2))^2``:

    >>> from attnspec.theory.pencil import pencil_from_monomials, Monomial, Factor, GaussianBlock
    >>> from attnspec.theory.closed_forms import marchenko_pastur_moments
    >>> p = pencil_from_monomials([Monomial(1.0, (Factor("X"),))], {"X": GaussianBlock("X", 1.0, 0.5)})
    >>> m, edge = pencil_moments(p, k=3)
    >>> np.round(m / 0.5, 6), marchenko_pastur_moments(0.5, k=3), round(edge, 6)
    (array([1.   , 1.5  , 2.75]), array([1.  , 1.5 , 2.75]), 2.914214)
    """
    solver = DysonSolver(pencil, tol=tol)
    right, _ = _edges(solver, pencil.norm_bound() ** 2)
    return _contour_moments(solver, right, n_contour, k)[1:], right


def _continuous_part(solver: DysonSolver, right: float, left: float | None, atom: float, n_grid: int,
                     n_head: int) -> tuple:
    """Steps 3 to 5 of the module: ``(grid, density, cell masses, (head exponent, head mass), checks)``.

    The density on the grid (refined), the mass of each cell and, when the support reaches 0 (``left`` None),
    the mass on ``[0, grid[0]]`` from the contour integral of ``g`` with its power-law shape
    (``checks['head_contour_error']``: the change from ``n_head/2`` nodes).
    """
    grid = _grid(right, left, n_grid, atom)
    inner = (grid > 0) & (grid < right) & ((grid > left) if left is not None else True)
    rho = np.zeros_like(grid)
    U = np.full((grid.size, solver.nu), np.nan, dtype=complex)
    Gs = np.full(grid.size, np.nan, dtype=complex)
    x = grid[inner]
    y = np.minimum(1e-9 * right, _Y_REL * x)
    n = x.size
    g, u = _solve_grid(solver, x, y, right, 1e-9 * right)
    if left is None:    # the nodes of the contour integral for F(grid[0]) (n_head, n_head/2 nodes)
        (z1, w1), (z2, w2) = _contour_nodes(grid[0], n_head), _contour_nodes(grid[0], n_head // 2)
        gh, _ = _solve_points(solver, np.concatenate([z1.real, z2.real]), np.concatenate([z1.imag, z2.imag]),
                              right, 1e-9 * right)
        g = np.concatenate([g, gh])
    rho[inner], U[inner], Gs[inner] = _rho(g[:n], x[:n], y[:n], atom), u[:n], g[:n]
    lo = 0.0 if left is None else left
    grid, rho, masses = _refine(solver, grid, rho, U, Gs, right, lo, left is not None, atom)
    if left is None:    # the mass on [0, grid[0]] from the contour integral of g, its shape a power law
        F0 = float(np.real(g[n:n + n_head] * z1) @ w1)
        checks = {"head_contour_error": abs(F0 - float(np.real(g[n + n_head:] * z2) @ w2))}
        return grid, rho, masses, (_head(grid, rho), max(F0 - atom, 0.0)), checks
    return grid, rho, masses, (1.0, 0.0), {}


def solve_law(config: MHSAConfig, n_grid: int = 200, n_contour: int = 64, reduce: bool = True,
              tol: float = 1e-12, pencil: Pencil | None = None, n_head: int = 12, symmetric: bool = True) -> Law:
    """The limiting spectral law of ``Y Y^T`` (normalized trace ``(1/l) tr``) for ``config`` (docs/theory.md,
    "Computing the law: the linear pencil").

    Only the ratios, ``beta``, sharing/tying and ``inputs`` matter; ``centering`` does not change the law.

    Parameters
    ----------
    config : MHSAConfig
        The model; ``beta > 0``.
    n_grid : int
        Density grid points (plus a geometric head near 0).
    n_contour : int
        Contour points on the upper half circle (for the moments).
    reduce : bool
        Merge identical uncoupled heads.
    tol : float
        Tolerance of the fixed-point (Dyson) solver.
    pencil : Pencil, optional
        Use this pencil instead of the configuration's (e.g. a hand-built one; ``config`` still supplies the
        atom and the closed-form checks).
    n_head : int
        Gauss–Legendre nodes of the contour integral for the mass below the grid when the support reaches 0
        (``checks['head_contour_error']``: its change from ``n_head/2`` nodes).
    symmetric : bool
        Collapse identical coupled heads by their exchange symmetry (:mod:`.symmetry`; the same law,
        ``False`` solves the full equation).

    Returns
    -------
    Law

    Raises
    ------
    LawSolverError
        On non-convergence (with the failing points and residuals).
    ValueError
        For ``beta = 0`` (the centered output is exactly 0).
    TypeError
        If ``config`` is not an :class:`MHSAConfig`.

    Examples
    --------
    A single attention matrix (orthonormal inputs), whose edge and fourth moment have closed forms:

    >>> from attnspec.config import MHSAConfig
    >>> law = solve_law(MHSAConfig.uniform(64, 64, target="attention"), n_grid=40)
    >>> np.round(law.moments, 4)
    array([  1.7183,   6.905 ,  36.6758, 223.457 ])
    >>> round(law.checks["m4_closed_form"], 3), round(law.mass, 6)
    (223.457, 1.0)
    >>> solve_law(MHSAConfig.uniform(64, 64, beta=0.0))
    Traceback (most recent call last):
    ...
    ValueError: beta = 0: the centered output is exactly 0 (law = point mass at 0); nothing to solve
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
    grid, rho, masses, (head_p, head_mass), checks = _continuous_part(solver, right, left, atom, n_grid, n_head)
    moments_all = _contour_moments(solver, right, n_contour)
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

    ``W1 = int |F_n(x) - F(x)| dx`` and ``KS = sup_x |F_n(x) - F(x)|`` with ``F_n`` the sample's empirical CDF
    and ``F = law.cdf``. Eigenvalues ``<= zero_tol * max`` are exact zeros (rank deficiency; round-off makes
    them ~1e-15).

    Parameters
    ----------
    law : Law
    eigenvalues : array_like
        Any shape; pooled.
    rel_tol : float
        Eigenvalues above ``right_edge * (1 + rel_tol)`` are outliers (:func:`attnspec.spectra.split_outliers`).
    zero_tol : float
        Relative threshold below which an eigenvalue is an exact zero.

    Returns
    -------
    dict
        ``w1`` (:func:`attnspec.spectra.wasserstein1_to_cdf`), ``ks`` (:func:`attnspec.spectra.ks_to_cdf`,
        exact at the law's atom at zero), ``w1_bulk`` (outliers dropped; NaN when nothing is left) and
        ``n_outliers``.

    Examples
    --------
    A sample at the law's own quantiles is at KS distance ``1/(2 n)``; one value far beyond the edge is an
    outlier, which moves ``w1`` but not ``w1_bulk``:

    >>> from attnspec.config import MHSAConfig
    >>> law = solve_law(MHSAConfig.uniform(64, 64, heads=2), n_grid=40)
    >>> x = law.quantile((np.arange(200) + 0.5) / 200)
    >>> d = law_distances(law, x)
    >>> round(d["ks"], 6), round(d["w1"], 3), d["n_outliers"]
    (0.0025, 0.02, 0)
    >>> d2 = law_distances(law, np.append(x, 2 * law.right_edge))
    >>> d2["n_outliers"], round(d2["w1_bulk"], 3), d2["w1"] > d["w1"]
    (1, 0.02, True)
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
