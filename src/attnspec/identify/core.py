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

Speed. With two or more shape parameters (``beta``, ``psi``, ``phi``; ``scale`` is profiled exactly)
the law is tabulated (:class:`~attnspec.identify.family.TabulatedFamily`): a wide box around the start,
re-centred until the fit is inside it, then a narrow box around the fit on which the final fit and all
bootstrap refits run. A refit that lands on the narrow box's edge is redone on a wide box.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from ..config import MHSAConfig
from .family import SAMPLE_MODELS, Family, MHSAFamily, TabulatedBetaFamily, TabulatedFamily
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


def _eta(fam: Family, theta: Mapping[str, float]) -> np.ndarray:
    return np.array([math.log(theta[k]) if k in fam.log_scale else theta[k] for k in fam.names])


def bootstrap(fit: Fit, family: Family, n_boot: int, seed: int = 0, refit_family: Family | None = None,
              progress: bool = False, model: str | None = None, wide: Any = None,
              at: Mapping[str, float] | None = None) -> dict[str, np.ndarray]:
    """Parametric bootstrap: ``n_boot`` spectra simulated at ``at`` (default ``fit.theta``), each refitted.

    Parameters
    ----------
    fit, family : the fit and the family it was made with (``family.sample`` simulates)
    n_boot : number of draws ``B``
    seed : seed of the draws (draw ``b`` uses the ``b``-th child of ``SeedSequence(seed)``)
    refit_family : a cheaper stand-in for the refits (a local law table); default ``family``
    model : ``'softmax'`` or ``'surrogate'`` for MHSA families (module docstring); ``None``: the family's default
    wide : a wider table for refits that land on the edge of ``refit_family``'s box (a :class:`TabulatedFamily`)
    at : the parameters the spectra are simulated at (refits start at ``fit.theta``)

    Returns ``eta`` (``(B, p)`` refitted parameters in fit coordinates), ``stat`` and ``ks`` (refit
    criteria), ``quantiles`` (``(B, len(U_ID))`` empirical quantiles, for the Fisher information),
    ``n_outliers`` and ``redone`` (how many refits needed the wide table).
    """
    from tqdm.auto import tqdm

    rf = refit_family or family
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_boot)]
    out = {"eta": [], "stat": [], "ks": [], "quantiles": [], "n_outliers": []}
    redone = 0
    for rng in tqdm(rngs, desc="bootstrap", disable=not progress, leave=False):
        x = np.sort(family.sample(at or fit.theta, rng, model=model))
        fb = fit_family(x, rf, start=fit.theta)
        if isinstance(rf, TabulatedFamily) and rf.on_border(fb.theta) and wide is not None:
            fb = fit_family(x, wide, start=fb.theta)
            redone += 1
        out["eta"].append(_eta(rf, fb.theta))
        out["stat"].append(fb.criterion)
        out["ks"].append(fb.ks)
        out["n_outliers"].append(fb.n_outliers)
        out["quantiles"].append(np.quantile(x, U_ID))
    res = {k: np.asarray(v, dtype=float) for k, v in out.items()}
    res["redone"] = redone
    return res


def _fast(family: Family, theta: Mapping[str, float]) -> Family:
    """A cheap stand-in for refits: a local beta table for MHSA families with free beta (and scale)."""
    if isinstance(family, (TabulatedBetaFamily, TabulatedFamily)):
        return family
    if isinstance(family, MHSAFamily) and "beta" in family.names and set(family.names) <= {"beta", "scale"}:
        b = theta["beta"]
        lo, hi = family.bounds["beta"]
        return TabulatedBetaFamily(family, max(lo, 0.85 * b), min(hi, 1.15 * b), nodes=31)
    return family


#: Half-widths (fit coordinates; beta's relative to beta) of the wide search table and the smallest
#: half-widths of the refit table, and the number of pilot draws that place the refit table.
_WIDE = {"beta": 0.25, "psi": 0.5, "phi": 0.5}
_NARROW = {"beta": 0.04, "psi": 0.1, "phi": 0.1}
_PILOT = 5


def _half_widths(widths: Mapping[str, float], theta: Mapping[str, float], names) -> dict[str, float]:
    # beta is a linear coordinate: its half-width is relative to beta
    return {k: widths[k] * (max(theta["beta"], 0.2) if k == "beta" else 1.0) for k in names}


def _fit_table(x: np.ndarray, family: MHSAFamily, nodes: int, max_moves: int = 6) -> tuple[TabulatedFamily, Fit]:
    """Fit on a wide law table, re-centred on the fit until the fit is inside it (module docstring)."""
    shape = [k for k in family.names if k != "scale"]
    center = family.start(x)
    for _ in range(max_moves):
        wide = TabulatedFamily(family, center, _half_widths(_WIDE, center, shape), nodes=nodes)
        fit = fit_family(x, wide, start=center)
        if not wide.on_border(fit.theta):
            break
        center = fit.theta
    return wide, fit


def _pilot(fit: Fit, family: Family, refit: Family, seed: int, model: str | None) -> np.ndarray:
    """``_PILOT`` spectra simulated at ``fit.theta`` and refitted on ``refit``: ``(_PILOT, p)`` fit coordinates.

    Their seeds (children of ``SeedSequence([seed, 1])``) are independent of the bootstrap's; the pilot
    draws are not part of the bootstrap.
    """
    out = []
    for ss in np.random.SeedSequence([seed, 1]).spawn(_PILOT):
        xb = np.sort(family.sample(fit.theta, np.random.default_rng(ss), model=model))
        out.append(_eta(refit, fit_family(xb, refit, start=fit.theta).theta))
    return np.asarray(out)


def _refit_table(x: np.ndarray, wide: TabulatedFamily, fit: Fit, pilot: np.ndarray | None,
                 nodes: int) -> tuple[TabulatedFamily, Fit]:
    """The table on which the final fit and all bootstrap refits run.

    It must hold ``eta_hat``, the point the bootstrap simulates at (``eta_hat - b1``, ``b1`` the pilot's
    offset) and the bootstrap cloud (centred near ``eta_hat``, within the pilot's reach): the box spans
    ``eta_hat``, ``eta_hat - b1`` and the pilot mean, plus ``max(6 sd_pilot, _NARROW)`` on each side. The
    final fit is redone on it, so that the fit and the refits share one interpolant (its error then
    largely cancels in the bias correction).
    """
    shape = list(wide.shape_names)
    inner = wide.inner
    idx = [wide.names.index(k) for k in shape]
    eta0 = _eta(wide, fit.theta)[idx]
    if pilot is not None and len(pilot) > 1:
        p = pilot[:, idx]
        mean, sd = p.mean(axis=0), p.std(axis=0, ddof=1)
    else:
        mean, sd = eta0, np.zeros_like(eta0)
    pts = np.stack([eta0, mean, 2 * eta0 - mean])
    floor = np.array(list(_half_widths(_NARROW, fit.theta, shape).values()))
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    half = 0.5 * (hi - lo) + np.maximum(6 * sd, floor)
    center = {k: (math.exp(c) if k in inner.log_scale else float(c)) for k, c in zip(shape, 0.5 * (lo + hi))}
    table = TabulatedFamily(inner, center, dict(zip(shape, half)), nodes=nodes)
    start = {**fit.theta, **{k: float(np.clip(fit.theta[k], *table.bounds[k])) for k in shape}}
    return table, fit_family(x, table, start=start)


def _simulation_point(family: Family, fit: Fit, pilot: np.ndarray, eta_ref: np.ndarray) -> dict[str, float]:
    """``theta`` at ``eta_hat - b1`` with ``b1 = mean(pilot) - eta_ref`` (clipped to the family's bounds)."""
    eta = _eta(family, fit.theta) - (pilot.mean(axis=0) - eta_ref)
    out = {}
    for k, v in zip(family.names, eta):
        lo, hi = family.bounds[k]
        out[k] = float(np.clip(math.exp(v) if k in family.log_scale else v, lo, hi))
    return out


def _nodes(family: Family) -> tuple[int, int]:
    """Nodes per shape parameter of the wide and the refit table (fewer with more parameters)."""
    p = len([k for k in family.names if k != "scale"])
    return (7, 9) if p <= 2 else (5, 6)


def _fit_fast(x: np.ndarray, family: Family) -> tuple[Family, Fit]:
    """Fit; with the (slow) operator-valued solver and free beta (and scale), fit on a beta table first.

    The table spans ``[0.8, 1.25]`` times the moment start (``m1 = e^{beta^2} - 1``) when the scale is
    known, the whole ``beta`` range otherwise; if the optimum lands on the table's border the exact
    family is fitted instead. With two or more shape parameters the fit runs on law tables
    (:func:`_fit_table`). Returns ``(family fitted, fit)``.
    """
    if isinstance(family, MHSAFamily) and len([k for k in family.names if k != "scale"]) >= 2:
        return _fit_table(x, family, nodes=_nodes(family)[0])
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
    """
    t0 = time.perf_counter()
    if model not in SAMPLE_MODELS:
        raise ValueError(f"model must be one of {', '.join(SAMPLE_MODELS)}, got {model!r}")
    if method not in ("normal", "basic"):
        raise ValueError(f"method must be 'normal' or 'basic', got {method!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if int(n_boot) != n_boot or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot}")
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
    is_mhsa = isinstance(getattr(next(iter(families.values())), "inner", next(iter(families.values()))), MHSAFamily)
    H_best = min(fits, key=lambda h: fits[h].criterion)
    fam, fit = families[H_best], fits[H_best]
    wide, pilot, at, rf = None, None, dict(fit.theta), None
    if is_mhsa and n_boot > 0:
        # two-stage bootstrap (module docstring): pilot draws at the fit give the offset b1
        rf = fam if isinstance(fam, TabulatedFamily) else _fast(fam, fit.theta)
        pilot = _pilot(fit, fam, rf, seed, model)
        eta_ref = _eta(fam, fit.theta)
    if isinstance(fam, TabulatedFamily):   # two or more shape parameters: final fit and refits on one table
        wide = fam
        fam, fit = _refit_table(x, wide, fit, pilot, nodes=_nodes(fam)[1])
        rf = fam
    if pilot is not None:
        at = _simulation_point(fam, fit, pilot, eta_ref)
    t_fit = time.perf_counter() - t0
    describe = fam.describe() if hasattr(fam, "describe") else type(fam).__name__
    est: dict[str, dict] = {}
    gof: dict[str, Any] = {"statistic_name": "W1 of the bulk at the fit", "statistic": fit.criterion,
                           "ks": fit.ks, "p_value": None, "ks_p_value": None}
    ident = None
    heads_info = None
    boot = {"eta": np.zeros((0, len(fam.names))), "stat": np.zeros(0), "redone": 0}
    if n_boot > 0:
        boot = bootstrap(fit, fam, n_boot, seed=seed, refit_family=rf or _fast(fam, fit.theta), progress=progress,
                         model=model if is_mhsa else None, wide=wide, at=at)
        gof.update(p_value=float((1 + np.sum(boot["stat"] >= fit.criterion)) / (n_boot + 1)),
                   ks_p_value=float((1 + np.sum(boot["ks"] >= fit.ks)) / (n_boot + 1)),
                   null_mean=float(boot["stat"].mean()), null_q99=float(np.quantile(boot["stat"], 0.99)),
                   null_outliers_mean=float(boot["n_outliers"].mean()),
                   null_model=model if is_mhsa else describe)
        eta_hat, eta_sim = _eta(fam, fit.theta), _eta(fam, at)
        tq = stats.t.ppf(0.5 + level / 2, max(n_boot - 1, 1))
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
                          model=model if is_mhsa else None,
                          timing={"fit_s": t_fit, "total_s": time.perf_counter() - t0,
                                  "law_solves": int(sum(getattr(f, "solves", 0) for f in families.values())
                                                    + (fam.solves if wide is not None else 0)),
                                  "refits_on_wide_table": int(boot["redone"])})
