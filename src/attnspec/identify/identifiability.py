"""Which parameters a spectrum pins down: local Fisher information of the bulk quantiles.

Summary statistic: the law's quantiles ``q(eta) = (Q_eta(u_1), ..., Q_eta(u_m))`` at the levels
``U_ID`` (inside the bulk), in the fit coordinates ``eta`` (``log`` of positive parameters, ``beta``
as is). Their sampling covariance ``Sigma`` at size ``l`` is estimated from the parametric-bootstrap
spectra and shrunk halfway to its diagonal (``m`` is comparable to ``B``); the Jacobian ``J`` is
taken by central differences of the family. The Fisher information of the summary is

    F = J^T Sigma^{-1} J,

and for an eigenpair ``F v = mu v`` the standard error along ``v`` is ``1/sqrt(mu)``. Directions with
``se > max_se`` move the parameters by more than ``max_se`` (10 % for log-coordinates at the
default) with no significant change of the spectrum: they are reported as non-identifiable, and any
parameter with a loading ``|v_j| > 0.3`` on one of them is listed in ``not_identified``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["U_ID", "fisher_report", "jacobian"]

U_ID = np.linspace(0.02, 0.97, 40)


def jacobian(family, theta, u=U_ID, h: float = 1e-3) -> np.ndarray:
    """``d Q(u) / d eta`` by central differences (``(len(u), p)``).

    Examples
    --------
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> J = jacobian(MarchenkoPasturFamily(100, 200), {"scale": 2.0})
    >>> J.shape, bool(np.allclose(J[:, 0], 2.0 * MarchenkoPasturFamily(100, 200).quantiles({"scale": 1.0}, U_ID)))
    ((40, 1), True)
    """
    eta = family.to_eta(theta)
    J = np.empty((len(u), eta.size))
    for j in range(eta.size):
        e1, e2 = eta.copy(), eta.copy()
        e1[j] += h
        e2[j] -= h
        J[:, j] = (family.quantiles(family.from_eta(e1), u) - family.quantiles(family.from_eta(e2), u)) / (2 * h)
    return J


def fisher_report(family, fit, boot_quantiles: np.ndarray, max_se: float = 0.1, shrink: float = 0.5) -> dict:
    """Fisher information, per-parameter standard errors and non-identifiable directions (module docstring).

    Examples
    --------
    >>> from attnspec.identify import MarchenkoPasturFamily, fit_family
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> draws = [np.sort(fam.sample({"scale": 1.0}, np.random.default_rng(s))) for s in range(8)]
    >>> rep = fisher_report(fam, fit_family(draws[0], fam), np.array([np.quantile(x, U_ID) for x in draws]))
    >>> rep["parameters"], rep["not_identified"], rep["se"]["scale"] < 0.1
    (['scale'], [], True)
    """
    J = jacobian(family, fit.theta)
    S = np.cov(np.asarray(boot_quantiles).T)
    S = (1 - shrink) * S + shrink * np.diag(np.diag(S))
    S += 1e-12 * np.trace(S) / S.shape[0] * np.eye(S.shape[0])
    F = J.T @ np.linalg.solve(S, J)
    mu, V = np.linalg.eigh(F)
    se_dir = 1.0 / np.sqrt(np.maximum(mu, 1e-300))
    cov = np.linalg.pinv(F)
    names = list(family.names)
    nonid = []
    bad: set[str] = set()
    for k in range(len(mu)):
        if se_dir[k] > max_se:
            v = V[:, k] * np.sign(V[np.argmax(np.abs(V[:, k])), k])
            nonid.append({"direction": {n: round(float(c), 4) for n, c in zip(names, v)}, "se": float(se_dir[k]),
                          "fisher_eigenvalue": float(mu[k])})
            bad |= {n for n, c in zip(names, v) if abs(c) > 0.3}
    return {"parameters": names, "coordinates": ["log" if n in family.log_scale else "linear" for n in names],
            "fisher": F.tolist(), "fisher_eigenvalues": mu.tolist(), "direction_se": se_dir.tolist(),
            "se": {n: float(math.sqrt(max(cov[i, i], 0.0))) for i, n in enumerate(names)},
            "condition_number": float(mu[-1] / max(mu[0], 1e-300)), "max_se": max_se,
            "non_identifiable": nonid, "not_identified": sorted(bad)}
