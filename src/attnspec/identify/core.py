"""Identification of Gaussian-equivalent parameters from an observed spectrum.

:func:`identify` fits a family (default :class:`~attnspec.identify.family.MHSAFamily`) to the
eigenvalues by minimum bulk W1 (:mod:`.fit`), then runs a *parametric bootstrap*: ``B`` spectra are
simulated at the fitted parameters and at the observed size, and each is refitted.

Which model the bootstrap simulates (``model``). The family's law is the limit of the Gaussian
equivalent (the *surrogate*); a real attention layer is a finite *softmax* layer, whose spectrum
differs from that law at finite size (row-normalization fluctuations: a few outliers, heavier bulk
tails; the gap grows with beta). Write the fitted coordinate as a functional of the data,
``eta_hat = g(x)``, with ``x`` drawn from the softmax layer ``P_theta``. Then

    eta_hat - eta = b(theta) + e,    b(theta) = E_theta[g(x)] - eta,    e = g(x) - E_theta[g(x)],

where the offset ``b`` collects the finite-size bias *and* the softmax-vs-law model error (it does not
vanish when ``B`` grows; at ``l = 800``, ``beta = 1`` it is comparable to the sampling error ``e``).
With ``model='softmax'`` (the default) the bootstrap draws ``x*_b ~ P_{theta_hat}`` from the softmax
layer, so ``mean(eta*) - eta_hat`` estimates ``b(theta_hat) = b(theta) + O(|theta_hat - theta| b')`` and
``std(eta*)`` estimates ``sd(e)``, both including the model error; the corrected interval below then
has its nominal level up to ``O(sd * b')``. With ``model='surrogate'`` the bootstrap simulates the
Gaussian equivalent: right for surrogate spectra, too narrow and off-centre for softmax ones.

* Confidence intervals (default ``method='normal'``), per parameter in its fitting coordinate
  ``eta`` (``log`` for positive parameters): ``eta_hat - bias -+ t_{B-1, (1+level)/2} sd`` with
  ``bias = mean(eta*) - eta_hat`` and ``sd = std(eta*)``.
  ``method='basic'`` gives ``(2 eta_hat - q_{(1+level)/2}, 2 eta_hat - q_{(1-level)/2})`` instead.
* Goodness of fit: the statistic is the fit criterion ``T = W1_bulk`` at the fit; its null
  distribution is that of ``T*_b`` (the criterion of the refit on bootstrap spectrum ``b``), so the
  p-value ``(1 + #{T*_b >= T}) / (B + 1)`` is calibrated, estimation included, *for the simulated
  model*: with ``model='softmax'`` a softmax spectrum of the fitted family is not rejected more often
  than the level says, while a spectrum from another family (e.g. Marchenko–Pastur) still is. The same
  is reported for the bulk KS distance. With ``B = 99`` the smallest p-value is 0.01.
* Head count at fixed total width (discrete): fitted by profiling over ``heads`` candidates; the
  confidence set holds every ``H`` whose criterion is not rejected by the goodness-of-fit test of the
  selected ``H`` (``T_H <= q_level(T*)``). More than one member means ``H`` is not identified.
* Identifiability (:mod:`.identifiability`): local Fisher information of the bulk quantiles with
  respect to ``eta``; directions whose standard error exceeds ``max_se`` are reported as
  non-identifiable, and parameters loading on them get no point estimate.

Speed (:mod:`.staging`, :mod:`.tables`). With two or more shape parameters (``beta``, ``psi``, ``phi``; ``scale`` is
profiled exactly) the law is tabulated: a wide box around the start, re-centred until the fit is inside
it, then a narrow box around the fit on which the final fit and all bootstrap refits run. A refit that
lands on the narrow box's edge is redone on a wide box. The bootstrap's two stages (pilot draws, then
``B`` draws at the offset-corrected point) are in :mod:`.resample`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from ..config import MHSAConfig
from .family import SAMPLE_MODELS, Family, MHSAFamily
from .tables import TabulatedFamily
from .fit import Fit
from .identifiability import fisher_report
from .resample import bootstrap, pilot_draws, simulation_point
from .spectrum import check_spectrum
from .staging import fit_fast, refit_stand_in, refit_table

__all__ = ["Identification", "identify"]


@dataclass
class Identification:
    """Result of :func:`identify` (``to_dict`` gives plain JSON).

    Examples
    --------
    >>> from attnspec.identify import MarchenkoPasturFamily
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> x = fam.sample({"scale": 2.0}, np.random.default_rng(0))
    >>> res = identify(x, family=fam, n_boot=19, seed=0)
    >>> lo, hi = res.estimates["scale"]["ci_low"], res.estimates["scale"]["ci_high"]
    >>> bool(lo < 2.0 < hi), res.gof["p_value"] > 0.05, sorted(res.to_dict())[:3]
    (True, True, ['bootstrap_model', 'criterion', 'edge'])
    """

    family: str
    fit: Fit
    estimates: dict[str, dict]
    gof: dict
    identifiability: dict | None
    heads: dict | None
    n_boot: int
    level: float
    boot_theta: np.ndarray = field(repr=False)
    boot_stat: np.ndarray = field(repr=False)
    model: str | None = None
    timing: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        f = self.fit
        return {"family": self.family, "criterion": "minimum bulk W1 (quantile matching); outliers above the "
                                                    "fitted edge reported apart",
                "n": f.n, "theta": f.theta, "w1_bulk": f.criterion, "w1_bulk_relative": f.relative_criterion,
                "ks_bulk": f.ks, "edge": f.edge, "n_outliers": f.n_outliers, "outliers": f.outliers.tolist(),
                "estimates": self.estimates, "gof": self.gof, "identifiability": self.identifiability,
                "heads": self.heads, "n_boot": self.n_boot, "bootstrap_model": self.model, "level": self.level,
                "timing": self.timing}

    def summary(self) -> str:
        lines = [f"family: {self.family}",
                 f"fit: W1(bulk) = {self.fit.criterion:.4g} (relative {self.fit.relative_criterion:.3g}), "
                 f"KS(bulk) = {self.fit.ks:.4g}, edge {self.fit.edge:.5g}, outliers above it: {self.fit.n_outliers}"]
        for name, e in self.estimates.items():
            if e["identified"]:
                lines.append(f"  {name:6s} = {e['estimate']:.6g}   {100 * self.level:.0f}% CI [{e['ci_low']:.6g}, "
                             f"{e['ci_high']:.6g}]   (bootstrap bias {e['bias']:+.3g}, sd {e['sd']:.3g})")
            else:
                lines.append(f"  {name:6s} not identified (best fit {e['best_fit']:.4g}; see non-identifiable "
                             f"directions)")
        if self.heads:
            h = self.heads
            lines.append(f"  heads  = {h['selected']}   confidence set {h['confidence_set']}"
                         + ("" if len(h["confidence_set"]) == 1 else "  -> head count NOT identified"))
        g = self.gof
        if g.get("p_value") is not None:
            lines.append(f"goodness of fit: T = W1(bulk) = {g['statistic']:.4g}, p = {g['p_value']:.4g} "
                         f"(B = {self.n_boot}{', ' + self.model + ' spectra' if self.model else ''}); "
                         f"KS p = {g['ks_p_value']:.4g}")
        if self.identifiability:
            for d in self.identifiability["non_identifiable"]:
                lines.append(f"  non-identifiable direction {d['direction']} (se {d['se']:.3g} in fit coordinates)")
            if self.identifiability["non_identifiable"]:
                lines.append(f"  note: the other intervals hold only if the spectrum pins the flagged parameters "
                             f"({', '.join(self.identifiability['not_identified'])}) near their best fit; fix one of "
                             "them (leave it out of the free parameters) for intervals that do not depend on it")
        return "\n".join(lines)


def _check_options(model: str, method: str, level: float, n_boot: int) -> None:
    if model not in SAMPLE_MODELS:
        raise ValueError(f"model must be one of {', '.join(SAMPLE_MODELS)}, got {model!r}")
    if method not in ("normal", "basic"):
        raise ValueError(f"method must be 'normal' or 'basic', got {method!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if int(n_boot) != n_boot or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot}")


def _candidates(x: np.ndarray, base: MHSAConfig | None, free, family: Family | None, heads,
                fixed) -> dict[int | None, Family]:
    """One family per candidate head count (at fixed total width), or ``{None: family}``."""
    if family is not None:
        return {None: family}
    if base is None:
        raise ValueError("give a base configuration or a family")
    if x.size % base.seq_len:
        raise ValueError(f"{x.size} eigenvalues is not a whole number of spectra of length seq_len="
                         f"{base.seq_len}; set the base configuration's seq_len to the observed length")
    draws = x.size // base.seq_len
    return {H: MHSAFamily(base.with_heads(H) if H != base.n_heads else base, free=free, fixed=fixed, draws=draws)
            for H in (list(heads) if heads else [base.n_heads])}


def _stage(x: np.ndarray, fam: Family, fit: Fit, n_boot: int, seed: int, model: str | None):
    """Pilot draws and the refit table (module docstring). Returns ``(family, fit, refit family, wide
    table or None, simulation point)``; ``model`` is ``None`` for families without a softmax/surrogate choice."""
    wide, pilot, rf = None, None, None
    if model is not None and n_boot > 0:
        rf = refit_stand_in(fam, fit.theta)
        pilot = pilot_draws(fit, fam, rf, seed, model)
        eta_ref = fam.to_eta(fit.theta)
    if isinstance(fam, TabulatedFamily):   # two or more shape parameters: final fit and refits on one table
        wide = fam
        fam, fit = refit_table(x, wide, fit, pilot)
        rf = fam
    at = simulation_point(fam, fit, pilot, eta_ref) if pilot is not None else dict(fit.theta)
    return fam, fit, rf or refit_stand_in(fam, fit.theta), wide, at


def _intervals(fam: Family, fit: Fit, boot: dict, at: Mapping[str, float], level: float,
               method: str) -> dict[str, dict]:
    """Bias-corrected (``'normal'``) or basic intervals per parameter, in fit coordinates (module docstring)."""
    n_boot = len(boot["stat"])
    eta_hat, eta_sim = fam.to_eta(fit.theta), fam.to_eta(at)
    tq = stats.t.ppf(0.5 + level / 2, max(n_boot - 1, 1))
    est = {}
    for j, name in enumerate(fam.names):
        e = boot["eta"][:, j]
        # offset of the refits from the point they were simulated at
        bias, sd = float(e.mean() - eta_sim[j]), float(e.std(ddof=1)) if n_boot > 1 else math.nan
        if method == "normal":
            lo_eta, hi_eta = eta_hat[j] - bias - tq * sd, eta_hat[j] - bias + tq * sd
        else:
            lo_eta = eta_hat[j] - (np.quantile(e, 0.5 + level / 2) - eta_sim[j])
            hi_eta = eta_hat[j] - (np.quantile(e, 0.5 - level / 2) - eta_sim[j])
        tr = math.exp if name in fam.log_scale else float
        est[name] = {"estimate": float(tr(eta_hat[j] - bias)), "best_fit": fit.theta[name],
                     "ci_low": float(tr(lo_eta)), "ci_high": float(tr(hi_eta)), "bias": bias, "sd": sd,
                     "simulated_at": at[name], "coordinate": "log" if name in fam.log_scale else "linear",
                     "identified": True}
    return est


def _gof(fit: Fit, boot: dict, null_model: str) -> dict[str, Any]:
    """Bootstrap p-values ``(1 + #{T* >= T}) / (B + 1)`` of the bulk W1 and KS at the fit."""
    n_boot = len(boot["stat"])
    return {"p_value": float((1 + np.sum(boot["stat"] >= fit.criterion)) / (n_boot + 1)),
            "ks_p_value": float((1 + np.sum(boot["ks"] >= fit.ks)) / (n_boot + 1)),
            "null_mean": float(boot["stat"].mean()), "null_q99": float(np.quantile(boot["stat"], 0.99)),
            "null_outliers_mean": float(boot["n_outliers"].mean()), "null_model": null_model}


def _head_set(fits: Mapping, best, null_stat: np.ndarray | None, level: float) -> dict | None:
    """Profiled head count: every candidate whose criterion the GOF test of the best does not reject."""
    if len(fits) < 2:
        return None
    thr = None if null_stat is None else float(np.quantile(null_stat, level))
    members = [best] if thr is None else sorted(H for H, f in fits.items() if f.criterion <= thr or H == best)
    return {"candidates": {str(H): f.criterion for H, f in fits.items()}, "selected": best, "threshold": thr,
            "confidence_set": members}


def identify(eigs: np.ndarray, base: MHSAConfig | None = None, free: Sequence[str] = ("beta",), *,
             family: Family | None = None, heads: Sequence[int] | None = None, fixed: Mapping[str, float] | None = None,
             n_boot: int = 99, level: float = 0.95, method: str = "normal", seed: int = 0, max_se: float = 0.1,
             model: str = "softmax", progress: bool = False) -> Identification:
    """Estimate the Gaussian-equivalent parameters that best explain ``eigs`` (module docstring).

    Parameters
    ----------
    eigs : observed eigenvalues (any shape; pooled); finite, >= 0 up to round-off, not all zero, at least 10
        (:func:`~attnspec.identify.spectrum.check_spectrum`, else ``SpectrumError``)
    base : the configuration fixing everything not estimated (sizes, sharing, tying, target); its
        ``seq_len`` should be the observed spectrum's length (the bootstrap simulates at that size)
    free : continuous parameters to estimate among ``beta``, ``psi``, ``phi``, ``scale``
    family : a ready :class:`Family` instead of ``base``/``free`` (e.g. Marchenko–Pastur)
    heads : candidate head counts at fixed total width (profiled); ``None`` keeps ``base``'s
    n_boot : bootstrap size ``B`` (0: no intervals, no p-value)
    level : confidence level of the intervals
    method : ``'normal'`` (bias-corrected, t quantile) or ``'basic'``
    max_se : directions with a larger standard error (fit coordinates) are non-identifiable
    model : what the bootstrap simulates at the fit for MHSA families: ``'softmax'`` (default; the finite
        softmax layer, for real or softmax spectra: intervals and goodness of fit include the
        softmax-vs-Gaussian-equivalent model error) or ``'surrogate'`` (the Gaussian equivalent, for
        surrogate spectra). Ignored for other families (``family=``), which have one generative model.

    Returns
    -------
    Identification

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.simulation import simulate
    >>> cfg = MHSAConfig.uniform(100, 100, target="attention", beta=0.8)
    >>> eigs = simulate(cfg, seed=0, models=("surrogate",)).surrogate
    >>> res = identify(eigs, cfg.replace(beta=1.0), n_boot=0)
    >>> round(res.estimates["beta"]["estimate"], 1)
    0.8
    """
    t0 = time.perf_counter()
    _check_options(model, method, level, n_boot)
    x = np.sort(check_spectrum(eigs))  # SpectrumError (a ValueError) for impossible spectra
    fitted = {H: fit_fast(x, fam) for H, fam in _candidates(x, base, free, family, heads, fixed).items()}
    fits = {H: f[1] for H, f in fitted.items()}
    best = min(fits, key=lambda h: fits[h].criterion)
    fam, fit = fitted[best]
    sim_model = model if isinstance(getattr(fam, "inner", fam), MHSAFamily) else None
    fam, fit, rf, wide, at = _stage(x, fam, fit, n_boot, seed, sim_model)
    t_fit = time.perf_counter() - t0
    describe = fam.describe() if hasattr(fam, "describe") else type(fam).__name__
    gof: dict[str, Any] = {"statistic_name": "W1 of the bulk at the fit", "statistic": fit.criterion,
                           "ks": fit.ks, "p_value": None, "ks_p_value": None}
    ident, null_stat = None, None
    boot = {"eta": np.zeros((0, len(fam.names))), "stat": np.zeros(0), "redone": 0}
    if n_boot > 0:
        boot = bootstrap(fit, fam, n_boot, seed=seed, refit_family=rf, progress=progress, model=sim_model,
                         wide=wide, at=at)
        gof.update(_gof(fit, boot, sim_model or describe))
        est = _intervals(fam, fit, boot, at, level, method)
        null_stat = boot["stat"]
        if n_boot >= 5:
            ident = fisher_report(fam, fit, boot["quantiles"], max_se=max_se)
            for name in ident["not_identified"]:
                est[name]["identified"] = False
    else:
        est = {name: {"estimate": fit.theta[name], "best_fit": fit.theta[name], "ci_low": None, "ci_high": None,
                      "bias": None, "sd": None, "identified": True} for name in fam.names}
    solves = sum(getattr(f[0], "solves", 0) for f in fitted.values()) + (fam.solves if wide is not None else 0)
    return Identification(family=describe, fit=fit, estimates=est, gof=gof, identifiability=ident,
                          heads=_head_set(fits, best, null_stat, level), n_boot=n_boot, level=level,
                          boot_theta=boot["eta"], boot_stat=boot["stat"], model=sim_model,
                          timing={"fit_s": t_fit, "total_s": time.perf_counter() - t0, "law_solves": int(solves),
                                  "refits_on_wide_table": int(boot["redone"])})
