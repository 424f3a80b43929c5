"""Closed forms that cross-check the free-probability solver (docs/theory.md, sections "Computing the law: the
linear pencil" and "Closed forms").

Notation: ``sigma^2 = e^{beta^2} - 1``, ``alpha^2 = sigma^2 - beta^2``, ``c = psi/gamma`` (``d_qk / l``),
``w_h = phi_h / sum_h phi_h``. Every law is that of ``Y Y^T`` (``l x l``, weight ``1/l`` per eigenvalue).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import comb

from ..config import MHSAConfig, alpha2_of_beta, sigma2_of_beta

__all__ = ["marchenko_pastur_moments", "marchenko_pastur_edges", "marchenko_pastur_cdf", "marchenko_pastur_density",
           "marchenko_pastur_quantile", "fuss_catalan_moments", "mp_edge",
           "attention_moments", "attention_edge", "attention_quartic_roots", "attention_stieltjes", "first_moment", "second_moment",
           "atom_at_zero"]


def marchenko_pastur_moments(ratio: float, k: int = 4, scale: float = 1.0) -> np.ndarray:
    """Moments ``m_1..m_k`` of ``scale * (1/p) X X^T``, ``X`` an ``n x p`` standard Gaussian, ``ratio = n/p``:
    ``m_j = scale^j sum_{r=0}^{j-1} ratio^r / (r+1) C(j, r) C(j-1, r)`` (Narayana polynomials).

    Examples
    --------
    >>> marchenko_pastur_moments(0.5, k=3)
    array([1.  , 1.5 , 2.75])
    """
    return np.array([scale ** j * sum(ratio ** r / (r + 1) * comb(j, r, exact=True) * comb(j - 1, r, exact=True)
                                      for r in range(j)) for j in range(1, k + 1)], dtype=float)


def marchenko_pastur_edges(ratio: float, scale: float = 1.0) -> tuple[float, float]:
    """Support edges ``scale (1 -+ sqrt(ratio))^2`` of the same law (the atom ``1 - 1/ratio`` aside).

    Examples
    --------
    >>> marchenko_pastur_edges(0.25)
    (0.25, 2.25)
    """
    return scale * (1 - math.sqrt(ratio)) ** 2, scale * (1 + math.sqrt(ratio)) ** 2


def _check_scale(scale: float) -> float:
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    return float(scale)


def marchenko_pastur_cdf(x, scale: float = 1.0) -> np.ndarray:
    """CDF of the square (ratio 1) Marchenko–Pastur law of ``scale * (1/n) X X^T``, ``X`` ``n x n`` standard Gaussian.

    Support ``[0, 4 scale]``, density ``sqrt((4 s - x) x) / (2 pi s x)``. With ``x = 4 s sin^2 theta`` the density
    times ``dx`` is ``(4/pi) cos^2 theta d theta``, so ``F(x) = (2 theta + sin 2 theta) / pi``. For the attention
    variance ``scale = e^{beta^2} - 1`` this is the law an iid ``l x l`` model of ``sqrt(l) (A - 1 1^T / l)``
    would give (edge :func:`mp_edge`).

    Examples
    --------
    >>> import numpy as np
    >>> np.round(marchenko_pastur_cdf([-1.0, 0.0, 1.0, 4.0, 5.0]), 6)
    array([0.      , 0.      , 0.608998, 1.      , 1.      ])
    """
    s = _check_scale(scale)
    x = np.asarray(x, dtype=float)
    theta = np.arcsin(np.sqrt(np.clip(x / (4.0 * s), 0.0, 1.0)))
    return (2.0 * theta + np.sin(2.0 * theta)) / np.pi


def marchenko_pastur_density(x, scale: float = 1.0, ratio: float = 1.0) -> np.ndarray:
    """Density ``sqrt((b - x)(x - a)) / (2 pi s y x)`` on ``[a, b] = s (1 -+ sqrt(y))^2`` (0 outside) of the
    eigenvalues of ``s W W^T / n``, ``W`` ``p x n`` standard Gaussian, ``y = p/n = ratio`` in ``(0, 1]``; for
    ``ratio = 1`` the law of :func:`marchenko_pastur_cdf`, ``sqrt((4 s - x) x) / (2 pi s x)`` on ``(0, 4 s)``.

    Examples
    --------
    >>> float(marchenko_pastur_density(2.0))  # 1 / (pi * 2) * sqrt(2 * 2) / 2
    0.15915494309189535
    >>> float(marchenko_pastur_density(1.0, ratio=0.25))   # sqrt(1.25 * 0.75) / (2 pi 0.25)
    0.6164...
    """
    s = _check_scale(scale)
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio must lie in (0, 1], got {ratio}")
    a, b = marchenko_pastur_edges(ratio, s)
    x = np.asarray(x, dtype=float)
    inside = (x > a) & (x < b) & (x > 0)
    xi = np.where(inside, x, 1.0)
    return np.where(inside, np.sqrt(np.clip((b - xi) * (xi - a), 0.0, None)) / (2.0 * np.pi * s * ratio * xi), 0.0)


def marchenko_pastur_quantile(u, scale: float = 1.0) -> np.ndarray:
    """Inverse of :func:`marchenko_pastur_cdf`: ``x = 4 s sin^2 theta`` with ``(2 theta + sin 2 theta)/pi = u``
    (``theta`` by bisection to machine precision; ``u`` in ``[0, 1]``).

    Examples
    --------
    >>> round(float(marchenko_pastur_quantile(1.0, scale=2.0)), 6)
    8.0
    """
    s = _check_scale(scale)
    u = np.asarray(u, dtype=float)
    if np.any(~np.isfinite(u) | (u < 0) | (u > 1)):
        raise ValueError("quantile levels u must lie in [0, 1]")
    lo, hi = np.zeros(u.shape), np.full(u.shape, 0.5 * np.pi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = (2.0 * mid + np.sin(2.0 * mid)) / np.pi < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return 4.0 * s * np.sin(hi) ** 2

def fuss_catalan_moments(s: int, k: int = 4) -> np.ndarray:
    """Moments of ``P P^T`` with ``P = X_1 ... X_s`` (square, iid ``N(0, 1/n)``): ``C((s+1) j, j) / (s j + 1)``.

    Examples
    --------
    >>> fuss_catalan_moments(2, k=3)                      # 1, 3, 12 for a product of two squares
    array([ 1.,  3., 12.])
    """
    return np.array([comb((s + 1) * j, j, exact=True) / (s * j + 1) for j in range(1, k + 1)], dtype=float)


def mp_edge(beta: float) -> float:
    """Marchenko–Pastur edge ``4 sigma^2`` of an iid ``l x l`` matrix with the attention variance.

    Examples
    --------
    >>> round(mp_edge(1.0), 6)                            # 4 (e - 1)
    6.873127
    """
    return marchenko_pastur_edges(1.0, sigma2_of_beta(beta))[1]


def attention_moments(beta: float, gamma: float, psi: float) -> np.ndarray:
    """``m_1..m_4`` of the single-head attention matrix law, convention A (docs/theory.md, "Closed forms").

    Examples
    --------
    >>> np.round(attention_moments(1.0, gamma=1.0, psi=1.0), 4)
    array([  1.7183,   6.905 ,  36.6758, 223.457 ])
    """
    s2 = sigma2_of_beta(beta)
    c = psi / gamma
    b4, b6, b8 = beta ** 4, beta ** 6, beta ** 8
    return np.array([
        s2,
        2 * s2 ** 2 + b4 / c,
        5 * s2 ** 3 + 6 * s2 * b4 / c + b6 / c ** 2,
        14 * s2 ** 4 + 28 * s2 ** 2 * b4 / c + 4 * b8 / c ** 2 + 8 * s2 * b6 / c ** 2 + b8 / c ** 3,
    ])


def attention_edge(beta: float, gamma: float, psi: float) -> float:
    """Right edge ``(min_{0 < G < sqrt(c)/beta} 1/G + R(G))^2`` with
    ``R(G) = alpha^2 G + c beta^2 G / (c - beta^2 G^2)`` (convention A).

    Examples
    --------
    >>> round(attention_edge(1.0, gamma=1.0, psi=1.0), 6)
    9.009543
    """
    a2, c = alpha2_of_beta(beta), psi / gamma
    top = math.sqrt(c) / beta

    def f(G):
        return 1.0 / G + a2 * G + c * beta ** 2 * G / (c - beta ** 2 * G ** 2)

    r = minimize_scalar(f, bounds=(1e-9 * top, top * (1 - 1e-12)), method="bounded",
                        options={"xatol": 1e-14 * top, "maxiter": 500})
    return float(r.fun) ** 2


def attention_quartic_roots(w, beta: float, c: float) -> np.ndarray:
    """All roots ``G`` of the attention quartic at each ``w``, shape ``(len(w), 4)`` (complex).

    The quartic (convention A, single head, ``c = psi/gamma``, ``sigma^2`` and ``alpha^2`` of ``beta``)::

        beta^2 alpha^2 G^4 - beta^2 w G^3 + (beta^2 - c sigma^2) G^2 + c w G - c = 0,

    whose physical root gives the attention law's Stieltjes transform ``g(z) = G(w)/w`` at ``w = sqrt(z)``.
    Solved for all ``w`` at once as eigenvalues of stacked companion matrices; where the leading
    coefficient vanishes (``alpha^2`` underflows as ``beta -> 0``) the degree drops and fewer roots
    come back. The one place this polynomial is written down in the package.

    Examples
    --------
    >>> r = attention_quartic_roots([2.0], beta=1.0, c=1.0)
    >>> r.shape
    (1, 4)
    >>> bool(np.allclose(np.polyval([0.718282 * 1.0, -2.0, 1.0 - 1.718282, 2.0, -1.0], r[0]), 0, atol=1e-4))
    True
    """
    w = np.atleast_1d(np.asarray(w))
    b2, s2, a2 = beta * beta, sigma2_of_beta(beta), alpha2_of_beta(beta)
    one = np.ones(w.shape)
    coeffs = [b2 * a2 * one, -b2 * w, (b2 - c * s2) * one, c * w, -c * one]
    while len(coeffs) > 2 and not np.any(coeffs[0]):      # degree drops with a vanishing leading coefficient
        coeffs.pop(0)
    C = np.stack(coeffs, axis=-1)
    mon = C[:, 1:] / C[:, :1]
    deg = mon.shape[1]
    comp = np.zeros((w.size, deg, deg), dtype=mon.dtype)
    comp[:, 0, :] = -mon
    comp[:, np.arange(1, deg), np.arange(deg - 1)] = 1.0
    return np.linalg.eigvals(comp)


def attention_stieltjes(z: np.ndarray, beta: float, gamma: float, psi: float) -> np.ndarray:
    """``g(z)`` of the attention law from the quartic of :func:`attention_quartic_roots` (``w = sqrt z``,
    ``g = G/w``): among the roots with ``Im g <= 0`` (for ``Im z > 0``), the one closest to the expansion
    ``1/z + sigma^2/z^2``. No continuation: meant for cross-checks at points off the spectrum.

    Examples
    --------
    >>> g = attention_stieltjes([50.0 + 1.0j], beta=1.0, gamma=1.0, psi=1.0)
    >>> bool(abs(g[0] - (1 / 50 + 1.718 / 50 ** 2)) < 1e-3), bool(g[0].imag <= 0)
    (True, True)
    """
    z = np.atleast_1d(np.asarray(z, dtype=complex))
    w = np.sqrt(z)
    g = attention_quartic_roots(w, beta, psi / gamma) / w[:, None]
    ok = np.where((z.imag > 0)[:, None], g.imag <= 1e-12 * np.abs(g), True)
    ok |= ~ok.any(axis=1, keepdims=True)                   # no root qualifies: choose among all
    guess = 1.0 / z + sigma2_of_beta(beta) / z ** 2
    return g[np.arange(z.size), np.argmin(np.where(ok, np.abs(g - guess[:, None]), np.inf), axis=1)]


def _within_head_terms(config: MHSAConfig) -> np.ndarray:
    """``t_h`` with ``E ||S_h V_h||^2 / (l^2 d_v^h) = b_B + t_h``: ``gamma/psi_h`` when values depend on
    keys (``K^T K`` has mean square ``l d_qk (l + d_qk)``), else 0."""
    psi = np.array(config.psi)
    return config.gamma / psi if config.values != "independent" else np.zeros_like(psi)


def first_moment(config: MHSAConfig) -> float:
    """``m_1 = E tr(Y Y^T)/l``.

    Attention matrix: ``sigma^2`` (both conventions). Output:
    ``m_1 = s^2 [alpha^2 + beta^2 sum_h w_h (b + t_h)]`` with ``b = 1`` (convention A) or ``1 + gamma``
    (convention B: ``tr (X^T X)^2 = l (1 + gamma)``), ``t_h = gamma/psi_h`` for tied or key-dependent
    values and 0 otherwise, ``s`` the key-dependent scale (1 otherwise). Convention A without tying:
    ``e^{beta^2} - 1``; tied: ``alpha^2 + beta^2 sum_h w_h (gamma + psi_h)/psi_h``.

    Examples
    --------
    >>> round(first_moment(MHSAConfig.uniform(64, 64, heads=2)), 6)     # e - 1
    1.718282
    """
    if config.target == "attention":
        return config.sigma2
    phi = np.array(config.phi)
    w = phi / phi.sum()
    b = 1.0 + (config.gamma if config.inputs == "gaussian" else 0.0)
    s2 = config.value_key_scale ** 2 if config.values == "key-dependent" else 1.0
    return float(s2 * (config.alpha2 + config.beta ** 2 * np.sum(w * (b + _within_head_terms(config)))))


def second_moment(config: MHSAConfig) -> float | None:
    """``m_2`` where a closed form is known (convention A, no within-head tying), else ``None``.

    Attention matrix: ``2 sigma^4 + beta^4/c``. Output (any heads, widths, K/V sharing):
    ``(1 + gamma/omega) sigma^4 + sum_h w_h^2 [beta^4 gamma/psi_h + sigma^4 (1 + gamma/phi_h)]``.

    Examples
    --------
    >>> round(second_moment(MHSAConfig.uniform(64, 64, heads=2)), 4)
    11.3337
    >>> second_moment(MHSAConfig.uniform(64, 64, inputs="gaussian")) is None
    True
    """
    if config.inputs != "orthonormal":
        return None
    s2, b4, g = config.sigma2, config.beta ** 4, config.gamma
    if config.target == "attention":
        return float(attention_moments(config.beta, g, config.psi[0])[1])
    if config.values != "independent":
        return None
    phi, psi = np.array(config.phi), np.array(config.psi)
    w = phi / phi.sum()
    return float((1 + g / config.omega) * s2 ** 2 + np.sum(w ** 2 * (b4 * g / psi + s2 ** 2 * (1 + g / phi))))


def atom_at_zero(config: MHSAConfig) -> float:
    """Mass of the law at 0: ``1 - rank(Y)/l`` for generic blocks.

    Attention matrix: 0 (``alpha Z`` is square and of full rank; ``beta = 0`` aside). Output:
    ``Y = [T_1 V_1, ..., T_H V_H] W_O`` with ``T_h`` invertible, so ``rank = min(l, d_out, sum_h r_h)``,
    ``r_h = d_v^h`` (convention A), ``min(d, d_v^h)`` (B), times ``d_qk^h`` caps for key-dependent values.

    Examples
    --------
    >>> atom_at_zero(MHSAConfig.uniform(64, 64, d_v=16))  # rank d_v = 16 of l = 64
    0.75
    """
    g = config.gamma
    if config.beta == 0:
        return 1.0
    if config.target == "attention":
        return 0.0 if config.alpha2 > 0 else max(0.0, 1.0 - min(g, config.psi[0]) / g)
    r = np.array(config.phi)
    if config.values == "key-dependent":
        r = np.minimum(r, np.array(config.psi))
    if config.inputs == "gaussian":
        r = np.minimum(r, 1.0)
    rank = min(g, config.omega, float(r.sum()))
    return max(0.0, 1.0 - rank / g)
