"""Closed-form spectral laws used as model families (and as test beds for the fitter).

* :func:`attention_law` — the Gaussian-equivalent law of the single-head attention matrix
  ``Y_att = sqrt(l) (A - 1 1^T / l)`` in convention A (docs/theory.md, "Closed forms"): with
  ``G(w)`` is the root (``~ 1/w`` at infinity, ``Im G < 0`` on the support) of the quartic of
  :func:`attnspec.theory.closed_forms.attention_quartic_roots`, and the density of the eigenvalues
  ``lambda = w^2`` of ``Y_att Y_att^T`` is ``rho(lambda) = -Im G(sqrt(lambda)) / (pi sqrt(lambda))``.
* :func:`marchenko_pastur_law` — eigenvalues of ``sigma^2 W W^T / n`` for ``W`` ``p x n`` iid
  ``N(0,1)``, ratio ``y = p/n <= 1`` (density :func:`attnspec.theory.closed_forms.marchenko_pastur_density`).

Both return a :class:`TabulatedLaw` (grid, density, CDF by quadrature, quantile by inversion), with the
same reading interface as :class:`attnspec.theory.Law`: ``grid``, ``density``, ``atom_at_zero``,
``right_edge``, ``left_edge``, ``mass``, the array ``moments`` (``m_1..m_4``), ``pdf(x)``, ``cdf(x)`` and
``quantile(u)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..theory.closed_forms import (attention_edge, attention_quartic_roots, marchenko_pastur_density,
                                   marchenko_pastur_edges)

__all__ = ["TabulatedLaw", "attention_law", "marchenko_pastur_law"]


@dataclass(frozen=True)
class TabulatedLaw:
    """A law on ``[0, right_edge]`` given on a grid: density, CDF, an atom at zero and the quantile function.

    ``cdf_values`` includes the atom; ``mass`` is the integral of the tabulated density before
    normalization (a check on the quadrature: it should be ``1 - atom_at_zero``); ``moments`` are
    ``m_k = int x^k rho(x) dx`` for ``k = 1..4`` (trapezoid rule on ``grid``; the atom adds nothing),
    as :attr:`attnspec.theory.Law.moments`.

    Examples
    --------
    >>> law = marchenko_pastur_law(1.0)
    >>> [round(float(m), 2) for m in law.moments[:2]]     # 1 and 2 for the square law
    [1.0, 2.0]
    >>> round(float(law.quantile(0.5)), 2), round(float(law.cdf(law.right_edge)), 6)
    (0.65, 1.0)
    """

    grid: np.ndarray
    density: np.ndarray
    cdf_values: np.ndarray
    atom_at_zero: float
    right_edge: float
    mass: float
    moments: np.ndarray
    left_edge: float | None = None      # lower end of the continuous part when above 0 (as Law.left_edge)

    def pdf(self, x) -> np.ndarray:
        """Continuous density at ``x`` (linear interpolation of the grid values, 0 outside)."""
        return np.interp(np.asarray(x, dtype=float), self.grid, self.density, left=0.0, right=0.0)

    def cdf(self, x) -> np.ndarray:
        """``F(x)`` (atom included) by linear interpolation of :attr:`cdf_values`."""
        x = np.asarray(x, dtype=float)
        return np.where(x < 0, 0.0, np.interp(x, self.grid, self.cdf_values, left=self.atom_at_zero, right=1.0))

    def quantile(self, u) -> np.ndarray:
        """``Q(u) = inf {x: F(x) >= u}``: 0 up to the atom, linear inversion of the CDF table above it."""
        u = np.asarray(u, dtype=float)
        # strictly increasing CDF values for inversion (flat parts carry no mass)
        F, idx = np.unique(self.cdf_values, return_index=True)
        q = np.interp(u, F, self.grid[idx])
        return np.where(u <= self.atom_at_zero, 0.0, q)


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
    density = rho * (1.0 - a) / mass
    moments = np.trapezoid(x[None, :] ** np.arange(1, 5)[:, None] * density, x, axis=1)
    return TabulatedLaw(grid=x, density=density, cdf_values=F, atom_at_zero=a, right_edge=float(edge), mass=mass,
                        moments=moments, left_edge=float(lower) if lower > 0 else None)


def _physical_root(w: np.ndarray, beta: float, c: float) -> np.ndarray:
    """The root of the attention quartic with the most negative imaginary part at each real ``w``."""
    roots = attention_quartic_roots(w, beta, c)
    return roots[np.arange(roots.shape[0]), np.argmin(roots.imag, axis=1)]


def attention_law(beta: float, gamma: float = 1.0, psi: float = 1.0, n: int = 4000) -> TabulatedLaw:
    """Gaussian-equivalent law of the single-head attention matrix (convention A; module docstring).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``> 0`` (``beta = 0`` is a point mass at 0).
    gamma, psi : float
        ``l/d`` and ``d_qk/d``; the law depends on ``c = psi/gamma`` only, plus an atom
        ``1 - psi/gamma`` at zero when ``gamma > psi``.
    n : int
        Grid points of the table.

    Examples
    --------
    >>> law = attention_law(1.0)
    >>> round(float(law.moments[0]), 2)                 # m1 = e^{beta^2} - 1
    1.72
    >>> round(law.right_edge, 4)
    9.0095
    """
    if beta <= 0:
        raise ValueError("beta must be > 0 for the attention law (beta = 0 is a point mass at 0)")
    c = psi / gamma
    edge = attention_edge(beta, 1.0, c)

    def rho(x):
        out = np.zeros_like(x)
        pos = x > 0
        wv = np.sqrt(x[pos])
        G = _physical_root(wv, beta, c)
        out[pos] = np.maximum(-G.imag, 0.0) / (np.pi * wv)
        return out

    return _tabulate(edge, rho, n=n, atom=0.0 if gamma <= psi else None)


def marchenko_pastur_law(ratio: float = 1.0, sigma2: float = 1.0, n: int = 4000) -> TabulatedLaw:
    """Marchenko–Pastur law of ``sigma2 W W^T / n`` (``W`` ``p x n`` standard Gaussian), ratio ``y = p/n`` in (0, 1].

    Examples
    --------
    >>> law = marchenko_pastur_law(0.25, sigma2=2.0)
    >>> law.left_edge, law.right_edge                  # sigma2 (1 -+ sqrt(y))^2
    (0.5, 4.5)
    >>> round(float(law.moments[1]), 3)                # sigma2^2 (1 + y)
    5.0
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must lie in (0, 1], got {ratio}")
    a, b = marchenko_pastur_edges(ratio, sigma2)
    return _tabulate(b, lambda x: marchenko_pastur_density(x, sigma2, ratio), lower=a, n=n, atom=0.0)
