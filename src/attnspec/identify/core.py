"""Identification of Gaussian-equivalent parameters from an observed spectrum.

:func:`identify` fits a family (default :class:`~attnspec.identify.family.MHSAFamily`) to the
eigenvalues by minimum bulk W1 (:mod:`.fit`), then runs a *parametric bootstrap*: ``B`` surrogate
spectra are simulated at the fitted parameters and at the observed size, and each is refitted.

* Confidence intervals (default ``method='normal'``), per parameter in its fitting coordinate
  ``eta`` (``log`` for positive parameters): ``eta_hat - bias -+ t_{B-1, (1+level)/2} sd`` with
  ``bias = mean(eta*) - eta_hat`` and ``sd = std(eta*)``; the bias correction removes the finite-size
  offset between a size-``l`` spectrum and the limiting law, which the bootstrap reproduces.
  ``method='basic'`` gives ``(2 eta_hat - q_{(1+level)/2}, 2 eta_hat - q_{(1-level)/2})`` instead.
* Goodness of fit: the statistic is the fit criterion ``T = W1_bulk`` at the fit; its null
  distribution is that of ``T*_b`` (the criterion of the refit on bootstrap spectrum ``b``), so the
  p-value ``(1 + #{T*_b >= T}) / (B + 1)`` is calibrated, estimation included. The same is reported
  for the bulk KS distance. With ``B = 99`` the smallest p-value is 0.01.
* Head count at fixed total width (discrete): fitted by profiling over ``heads`` candidates; the
  confidence set holds every ``H`` whose criterion is not rejected by the goodness-of-fit test of the
  selected ``H`` (``T_H <= q_level(T*)``). More than one member means ``H`` is not identified.
* Identifiability (:mod:`.identifiability`): local Fisher information of the bulk quantiles with
  respect to ``eta``; directions whose standard error exceeds ``max_se`` are reported as
  non-identifiable, and parameters loading on them get no point estimate.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from ..config import MHSAConfig
from .family import Family, MHSAFamily, TabulatedBetaFamily
from .fit import Fit, fit_family
from .identifiability import U_ID, fisher_report
from .spectrum import check_spectrum

__all__ = ["Identification", "identify", "bootstrap"]


@dataclass
class Identification:
    """Result of :func:`identify` (``to_dict`` gives plain JSON)."""

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
    timing: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        f = self.fit
        return {"family": self.family, "criterion": "minimum bulk W1 (quantile matching); outliers above the "
                                                    "fitted edge reported apart",
                "n": f.n, "theta": f.theta, "w1_bulk": f.criterion, "w1_bulk_relative": f.relative_criterion,
                "ks_bulk": f.ks, "edge": f.edge, "n_outliers": f.n_outliers, "outliers": f.outliers.tolist(),
                "estimates": self.estimates, "gof": self.gof, "identifiability": self.identifiability,
                "heads": self.heads, "n_boot": self.n_boot, "level": self.level, "timing": self.timing}

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
                         f"(B = {self.n_boot}); KS p = {g['ks_p_value']:.4g}")
        if self.identifiability:
            for d in self.identifiability["non_identifiable"]:
                lines.append(f"  non-identifiable direction {d['direction']} (se {d['se']:.3g} in fit coordinates)")
        return "\n".join(lines)


def _eta(fam: Family, theta: Mapping[str, float]) -> np.ndarray:
    return np.array([math.log(theta[k]) if k in fam.log_scale else theta[k] for k in fam.names])


def bootstrap(fit: Fit, family: Family, n_boot: int, seed: int = 0, refit_family: Family | None = None,
              progress: bool = False) -> dict[str, np.ndarray]:
    """Parametric bootstrap: ``n_boot`` surrogate spectra at ``fit.theta``, each refitted.

    Returns ``eta`` (``(B, p)`` refitted parameters in fit coordinates), ``stat`` and ``ks`` (refit
    criteria), ``quantiles`` (``(B, len(U_ID))`` empirical quantiles, for the Fisher information) and
    ``n_outliers``.
    """
    from tqdm.auto import tqdm

    rf = refit_family or family
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_boot)]
    out = {"eta": [], "stat": [], "ks": [], "quantiles": [], "n_outliers": []}
    for rng in tqdm(rngs, desc="bootstrap", disable=not progress, leave=False):
        x = np.sort(family.sample(fit.theta, rng))
        fb = fit_family(x, rf, start=fit.theta)
        out["eta"].append(_eta(rf, fb.theta))
        out["stat"].append(fb.criterion)
        out["ks"].append(fb.ks)
        out["n_outliers"].append(fb.n_outliers)
        out["quantiles"].append(np.quantile(x, U_ID))
    return {k: np.asarray(v, dtype=float) for k, v in out.items()}


def _fast(family: Family, theta: Mapping[str, float]) -> Family:
    """A cheap stand-in for refits: a local beta table for MHSA families with free beta (and scale)."""
    if isinstance(family, TabulatedBetaFamily):
        return family
    if isinstance(family, MHSAFamily) and "beta" in family.names and set(family.names) <= {"beta", "scale"}:
        b = theta["beta"]
        lo, hi = family.bounds["beta"]
        return TabulatedBetaFamily(family, max(lo, 0.85 * b), min(hi, 1.15 * b), nodes=31)
    return family


def _fit_fast(x: np.ndarray, family: Family) -> tuple[Family, Fit]:
    """Fit; with the (slow) operator-valued solver and free beta (and scale), fit on a beta table first.

    The table spans ``[0.8, 1.25]`` times the moment start (``m1 = e^{beta^2} - 1``) when the scale is
    known, the whole ``beta`` range otherwise; if the optimum lands on the table's border the exact
    family is fitted instead.
    """
    if (isinstance(family, MHSAFamily) and family.backend == "solver" and "beta" in family.names
            and set(family.names) <= {"beta", "scale"}):
        lo, hi = family.bounds["beta"]
        if "scale" in family.names:
            table = TabulatedBetaFamily(family, lo, hi, nodes=41)
        else:
            b0 = family.start(x)["beta"]
            table = TabulatedBetaFamily(family, max(lo, 0.8 * b0), min(hi, 1.25 * b0), nodes=15)
        fit = fit_family(x, table)
        a, b = table.bounds["beta"]
        if a + 0.01 * (b - a) < fit.theta["beta"] < b - 0.01 * (b - a) or (a <= lo and fit.theta["beta"] < b) \
                or (b >= hi and fit.theta["beta"] > a):
            return table, fit
    return family, fit_family(x, family)


def identify(eigs: np.ndarray, base: MHSAConfig | None = None, free: Sequence[str] = ("beta",), *,
             family: Family | None = None, heads: Sequence[int] | None = None, fixed: Mapping[str, float] | None = None,
             n_boot: int = 99, level: float = 0.95, method: str = "normal", seed: int = 0, max_se: float = 0.1,
             progress: bool = False) -> Identification:
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
    """
    t0 = time.perf_counter()
    x = np.sort(check_spectrum(eigs))  # SpectrumError (a ValueError) for impossible spectra
    if family is None:
        if base is None:
            raise ValueError("give a base configuration or a family")
        cands = list(heads) if heads else [base.n_heads]
        from ..sweeps.spec import apply_axis

        draws = x.size // base.seq_len if x.size % base.seq_len == 0 else 1
        if x.size % base.seq_len:
            raise ValueError(f"{x.size} eigenvalues is not a whole number of spectra of length seq_len="
                             f"{base.seq_len}; set the base configuration's seq_len to the observed length")
        families = {H: MHSAFamily(apply_axis(base, "heads", H) if H != base.n_heads else base, free=free,
                                  fixed=fixed, draws=draws) for H in cands}
    else:
        families = {None: family}
    fitted = {H: _fit_fast(x, fam) for H, fam in families.items()}
    families = {H: f[0] for H, f in fitted.items()}
    fits = {H: f[1] for H, f in fitted.items()}
    H_best = min(fits, key=lambda h: fits[h].criterion)
    fam, fit = families[H_best], fits[H_best]
    t_fit = time.perf_counter() - t0
    describe = fam.describe() if hasattr(fam, "describe") else type(fam).__name__
    est: dict[str, dict] = {}
    gof: dict[str, Any] = {"statistic_name": "W1 of the bulk at the fit", "statistic": fit.criterion,
                           "ks": fit.ks, "p_value": None, "ks_p_value": None}
    ident = None
    heads_info = None
    boot = {"eta": np.zeros((0, len(fam.names))), "stat": np.zeros(0)}
    if n_boot > 0:
        boot = bootstrap(fit, fam, n_boot, seed=seed, refit_family=_fast(fam, fit.theta), progress=progress)
        gof.update(p_value=float((1 + np.sum(boot["stat"] >= fit.criterion)) / (n_boot + 1)),
                   ks_p_value=float((1 + np.sum(boot["ks"] >= fit.ks)) / (n_boot + 1)),
                   null_mean=float(boot["stat"].mean()), null_q99=float(np.quantile(boot["stat"], 0.99)),
                   null_outliers_mean=float(boot["n_outliers"].mean()))
        eta_hat = _eta(fam, fit.theta)
        tq = stats.t.ppf(0.5 + level / 2, max(n_boot - 1, 1))
        for j, name in enumerate(fam.names):
            e = boot["eta"][:, j]
            bias, sd = float(e.mean() - eta_hat[j]), float(e.std(ddof=1)) if n_boot > 1 else math.nan
            if method == "normal":
                lo_eta, hi_eta = eta_hat[j] - bias - tq * sd, eta_hat[j] - bias + tq * sd
            elif method == "basic":
                lo_eta = 2 * eta_hat[j] - np.quantile(e, 0.5 + level / 2)
                hi_eta = 2 * eta_hat[j] - np.quantile(e, 0.5 - level / 2)
            else:
                raise ValueError(f"method must be 'normal' or 'basic', got {method!r}")
            tr = math.exp if name in fam.log_scale else float
            est[name] = {"estimate": float(tr(eta_hat[j] - bias)), "best_fit": fit.theta[name],
                         "ci_low": float(tr(lo_eta)), "ci_high": float(tr(hi_eta)), "bias": bias, "sd": sd,
                         "coordinate": "log" if name in fam.log_scale else "linear", "identified": True}
        if n_boot >= 5:
            ident = fisher_report(fam, fit, boot["quantiles"], max_se=max_se)
            for name in ident["not_identified"]:
                est[name]["identified"] = False
        if len(fits) > 1:
            thr = float(np.quantile(boot["stat"], level))
            heads_info = {"candidates": {str(H): f.criterion for H, f in fits.items()}, "selected": H_best,
                          "threshold": thr, "confidence_set": sorted(H for H, f in fits.items()
                                                                      if f.criterion <= thr or H == H_best)}
    else:
        for name in fam.names:
            est[name] = {"estimate": fit.theta[name], "best_fit": fit.theta[name], "ci_low": None, "ci_high": None,
                         "bias": None, "sd": None, "identified": True}
        if len(fits) > 1:
            heads_info = {"candidates": {str(H): f.criterion for H, f in fits.items()}, "selected": H_best,
                          "threshold": None, "confidence_set": [H_best]}
    return Identification(family=describe, fit=fit, estimates=est, gof=gof, identifiability=ident, heads=heads_info,
                          n_boot=n_boot, level=level, boot_theta=boot["eta"], boot_stat=boot["stat"],
                          timing={"fit_s": t_fit, "total_s": time.perf_counter() - t0})
