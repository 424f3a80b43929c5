"""Closed-form moments of the limiting law (THEORY.md section 4b, convention A).

Write ``sigma^2 = e^{beta^2} - 1``, ``alpha^2 = sigma^2 - beta^2``, ``gamma = l/d``,
``psi_h = d_qk^h/d``, ``phi_h = d_v^h/d``, ``omega = d_out/d`` and ``w_h = phi_h / sum_h phi_h``.

* Attention matrix (one head), ``c = psi/gamma``::

      m1 = sigma^2,  m2 = 2 sigma^4 + beta^4/c,  m3 = 5 sigma^6 + 6 sigma^2 beta^4/c + beta^6/c^2,
      m4 = 14 sigma^8 + 28 sigma^4 beta^4/c + 4 beta^8/c^2 + 8 sigma^2 beta^6/c^2 + beta^8/c^3,

  and the right edge ``E = (min_{0<G<sqrt(c)/beta} 1/G + R(G))^2`` with
  ``R(G) = alpha^2 G + c beta^2 G / (c - beta^2 G^2)``.
* Output, any number of heads and widths, keys/values shared or not (values independent of keys)::

      m1 = sigma^2,
      m2 = (1 + gamma/omega) sigma^4 + sum_h w_h^2 [beta^4 gamma/psi_h + sigma^4 (1 + gamma/phi_h)].

  At fixed total widths ``Psi = sum psi_h``, ``Phi = sum phi_h`` and equal heads this is
  ``(1 + gamma/omega) sigma^4 + beta^4 gamma/Psi + sigma^4 gamma/Phi + sigma^4/H``: the head count
  enters only through ``sigma^4/H``.
* Output with ``W_V^h = W_K^h`` (tied): ``m1 = alpha^2 + beta^2 sum_h w_h (gamma + psi_h)/psi_h``.

These are cross-checks and a fallback when the operator-valued solver is unavailable; configurations
without a closed form return ``None`` entries.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize_scalar

from ..config import MHSAConfig

__all__ = ["closed_form_moments", "attention_edge"]


def attention_edge(beta: float, c: float) -> float:
    """Right edge of the single-head attention law, ``(min_G 1/G + R(G))^2`` (THEORY 4b)."""
    if beta == 0:
        return 0.0
    s2 = math.expm1(beta ** 2)
    a2 = s2 - beta ** 2
    gmax = math.sqrt(c) / beta

    def f(G: float) -> float:
        return 1.0 / G + a2 * G + c * beta ** 2 * G / (c - beta ** 2 * G ** 2)

    res = minimize_scalar(f, bounds=(1e-9 * gmax, gmax * (1 - 1e-12)), method="bounded",
                          options={"xatol": 1e-13 * gmax, "maxiter": 500})
    return float(res.fun ** 2)


def closed_form_moments(config: MHSAConfig) -> dict:
    """``{'m1','m2','m3','m4','right_edge'}`` where a closed form exists (else ``None``), convention A only."""
    out: dict = {"m1": None, "m2": None, "m3": None, "m4": None, "right_edge": None}
    if config.inputs != "orthonormal":
        return out
    b, g = config.beta, config.gamma
    s2, a2 = config.sigma2, config.alpha2
    if config.target == "attention":
        c = config.psi[0] / g
        out.update(m1=s2, m2=2 * s2 ** 2 + b ** 4 / c,
                   m3=5 * s2 ** 3 + 6 * s2 * b ** 4 / c + b ** 6 / c ** 2,
                   m4=14 * s2 ** 4 + 28 * s2 ** 2 * b ** 4 / c + 4 * b ** 8 / c ** 2 + 8 * s2 * b ** 6 / c ** 2
                   + b ** 8 / c ** 3,
                   right_edge=attention_edge(b, c))
        return out
    psi, phi = np.array(config.psi), np.array(config.phi)
    w = phi / phi.sum()
    if config.values == "independent":
        out["m1"] = s2
        out["m2"] = float((1 + g / config.omega) * s2 ** 2
                          + np.sum(w ** 2 * (b ** 4 * g / psi + s2 ** 2 * (1 + g / phi))))
    elif config.values == "tied-to-keys":
        out["m1"] = float(a2 + b ** 2 * np.sum(w * (g + psi) / psi))
    return out
