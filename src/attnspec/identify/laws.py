"""Closed-form spectral laws used as model families (and as test beds for the fitter).

* :func:`attention_law` — the Gaussian-equivalent law of the single-head attention matrix
  ``Y_att = sqrt(l) (A - 1 1^T / l)`` in convention A (docs/theory.md, "Closed forms"): with
  ``sigma^2 = e^{beta^2} - 1``, ``alpha^2 = sigma^2 - beta^2`` and ``c = psi/gamma``, ``G(w)`` is the root
  (``~ 1/w`` at infinity, ``Im G < 0`` on the support) of the quartic

      beta^2 alpha^2 G^4 - beta^2 w G^3 + (beta^2 - c sigma^2) G^2 + c w G - c = 0,

  and the density of the eigenvalues ``lambda = w^2`` of ``Y_att Y_att^T`` is
  ``rho(lambda) = -Im G(sqrt(lambda)) / (pi sqrt(lambda))``. The quartic is solved for all grid points
  at once (eigenvalues of stacked companion matrices).
* :func:`marchenko_pastur_law` — eigenvalues of ``sigma^2 W W^T / n`` for ``W`` ``p x n`` iid
  ``N(0,1)``, ratio ``y = p/n <= 1``: ``rho = sqrt((b - x)(x - a)) / (2 pi sigma^2 y x)`` on
  ``[a, b] = sigma^2 (1 -+ sqrt(y))^2``.

Both return a :class:`TabulatedLaw` (grid, density, CDF by quadrature, quantile by inversion).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..theory.closed_forms import attention_edge

__all__ = ["TabulatedLaw", "attention_law", "marchenko_pastur_law"]


@dataclass(frozen=True)
class TabulatedLaw:
    """A law on ``[0, right_edge]`` given on a grid: density, CDF, an atom at zero and the quantile function.

    ``cdf`` includes the atom; ``mass`` is the integral of the tabulated density before normalization
    (a check on the quadrature: it should be ``1 - atom_at_zero``).
    """

    grid: np.ndarray
    density: np.ndarray
    cdf_values: np.ndarray
    atom_at_zero: float
    right_edge: float
    mass: float

    def cdf(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return np.where(x < 0, 0.0, np.interp(x, self.grid, self.cdf_values, left=self.atom_at_zero, right=1.0))

    def quantile(self, u) -> np.ndarray:
        u = np.asarray(u, dtype=float)
        # strictly increasing CDF values for inversion (flat parts carry no mass)
        F, idx = np.unique(self.cdf_values, return_index=True)
        q = np.interp(u, F, self.grid[idx])
        return np.where(u <= self.atom_at_zero, 0.0, q)

    def moments(self, k: int = 4) -> np.ndarray:
        x, r = self.grid, self.density
        return np.array([np.trapezoid(x ** j * r, x) for j in range(1, k + 1)])


def _tabulate(edge: float, density_fn, lower: float = 0.0, n: int = 4000, atom: float | None = None) -> TabulatedLaw:
    # grid dense at both ends: x = lower + (edge - lower) * (1 - cos(pi t))/2 (Chebyshev-like)
    t = np.linspace(0.0, 1.0, n)
    x = lower + (edge - lower) * 0.5 * (1.0 - np.cos(np.pi * t))
    rho = np.nan_to_num(np.maximum(density_fn(x), 0.0), nan=0.0, posinf=0.0)
    steps = 0.5 * (rho[1:] + rho[:-1]) * np.diff(x)
    F = np.concatenate([[0.0], np.cumsum(steps)])
    mass = float(F[-1])
    a = max(0.0, 1.0 - mass) if atom is None else atom
    F = a + (1.0 - a) * F / mass
    return TabulatedLaw(grid=x, density=rho * (1.0 - a) / mass, cdf_values=F, atom_at_zero=a, right_edge=float(edge),
                        mass=mass)


def _quartic_G(w: np.ndarray, beta: float, c: float) -> np.ndarray:
    """The root of the quartic with the most negative imaginary part at each real ``w`` (0 if all real)."""
    s2 = math.expm1(beta ** 2)
    a2 = s2 - beta ** 2
    b2 = beta ** 2
    w = np.asarray(w, dtype=float)
    coeffs = np.stack([np.full_like(w, b2 * a2), -b2 * w, np.full_like(w, b2 - c * s2), c * w, np.full_like(w, -c)],
                      axis=-1)
    # companion matrices of the monic polynomials, eigenvalues = roots
    lead = coeffs[:, 0:1]
    mon = coeffs[:, 1:] / lead
    m = w.size
    C = np.zeros((m, 4, 4))
    C[:, 0, :] = -mon
    C[:, 1, 0] = C[:, 2, 1] = C[:, 3, 2] = 1.0
    roots = np.linalg.eigvals(C)
    return roots[np.arange(m), np.argmin(roots.imag, axis=1)]


def attention_law(beta: float, gamma: float = 1.0, psi: float = 1.0, n: int = 4000) -> TabulatedLaw:
    """Gaussian-equivalent law of the single-head attention matrix (convention A; module docstring)."""
    if beta <= 0:
        raise ValueError("beta must be > 0 for the attention law (beta = 0 is a point mass at 0)")
    c = psi / gamma
    edge = attention_edge(beta, 1.0, c)

    def rho(x):
        out = np.zeros_like(x)
        pos = x > 0
        wv = np.sqrt(x[pos])
        G = _quartic_G(wv, beta, c)
        out[pos] = np.maximum(-G.imag, 0.0) / (np.pi * wv)
        return out

    return _tabulate(edge, rho, n=n, atom=0.0 if gamma <= psi else None)


def marchenko_pastur_law(ratio: float = 1.0, sigma2: float = 1.0, n: int = 4000) -> TabulatedLaw:
    """Marchenko–Pastur law with ratio ``y = p/n`` in (0, 1] and variance ``sigma2``."""
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must lie in (0, 1], got {ratio}")
    a, b = sigma2 * (1 - math.sqrt(ratio)) ** 2, sigma2 * (1 + math.sqrt(ratio)) ** 2

    def rho(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sqrt(np.clip((b - x) * (x - a), 0, None)) / (2 * np.pi * sigma2 * ratio * x)

    return _tabulate(b, rho, lower=a, n=n, atom=0.0)
