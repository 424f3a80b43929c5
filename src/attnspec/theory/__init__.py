"""The limiting spectral law of the centered MHSA output by operator-valued free probability.

* :mod:`.pencil` — configuration -> Hermitian linear pencil (blocks, aspect ratios, coefficients);
* :mod:`.dyson` — vectorized Newton/continuation solver of the operator-valued Dyson equation;
* :mod:`.symmetry` — exchanges of identical heads: one unknown per orbit, inversion by symmetry;
* :mod:`.law` — :class:`Law` (density, CDF, quantiles, edges, atom, contour moments), :func:`solve_law`,
  :func:`law_distances`;
* :mod:`.edges`, :mod:`.cells` — the law's edges, support test and contour integrals; its cell masses on the grid;
* :mod:`.closed_forms` — Marchenko–Pastur, Fuss–Catalan, attention-matrix quartic, first/second moments.

Normalizations are those of docs/theory.md ("Model and normalization"): the law of ``Y Y^T`` (``l`` eigenvalues,
weight ``1/l``), ``m_1 = e^{beta^2} - 1`` in convention A without within-head tying. This package imports only
:mod:`attnspec.config` and :mod:`attnspec.spectra`; figures of laws are drawn by :mod:`attnspec.figures`.
"""
from .dyson import DysonSolver, LawSolverError
from .law import Law, law_distances, solve_law
from .pencil import Pencil, build_pencil

__all__ = ["solve_law", "Law", "law_distances", "LawSolverError", "build_pencil", "Pencil", "DysonSolver"]
