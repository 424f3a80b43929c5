"""The parametric bootstrap of :func:`attnspec.identify.identify`: pilot draws, simulation point, refits.

Two stages (for MHSA families). ``P`` pilot spectra simulated at the fit and refitted give the offset
``b1 = mean(eta_pilot) - eta_hat`` of the refits; the ``B`` bootstrap spectra are then simulated at
``eta_hat - b1`` (:func:`simulation_point`), so that the mean of their refits lands near ``eta_hat``
and the bias correction is evaluated where it applies. Pilot seeds are children of
``SeedSequence([seed, 1])``, the bootstrap's of ``SeedSequence(seed)``: the stages are independent and
the pilot draws are not part of the bootstrap.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .family import Family
from .tables import TabulatedFamily
from .fit import Fit, fit_family
from .identifiability import U_ID

__all__ = ["bootstrap", "pilot_draws", "simulation_point", "PILOT_DRAWS"]

#: Pilot draws that place the refit table and the simulation point.
PILOT_DRAWS = 5


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
    model : ``'softmax'`` or ``'surrogate'`` for MHSA families; ``None``: the family's default
    wide : a wider table for refits that land on the edge of ``refit_family``'s box (a :class:`TabulatedFamily`)
    at : the parameters the spectra are simulated at (refits start at ``fit.theta``)

    Returns
    -------
    dict
        ``eta`` (``(B, p)`` refitted parameters in fit coordinates), ``stat`` and ``ks`` (refit
        criteria), ``quantiles`` (``(B, len(U_ID))`` empirical quantiles, for the Fisher information),
        ``n_outliers`` and ``redone`` (how many refits needed the wide table).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.identify import MarchenkoPasturFamily, fit_family
    >>> fam = MarchenkoPasturFamily(60, 120)
    >>> x = fam.sample({"scale": 2.0}, np.random.default_rng(0))
    >>> boot = bootstrap(fit_family(x, fam), fam, n_boot=4, seed=1)
    >>> boot["eta"].shape, boot["quantiles"].shape
    ((4, 1), (4, 40))
    """
    from tqdm.auto import tqdm

    rf = refit_family or family
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n_boot)]
    out: dict[str, list] = {"eta": [], "stat": [], "ks": [], "quantiles": [], "n_outliers": []}
    redone = 0
    for rng in tqdm(rngs, desc="bootstrap", disable=not progress, leave=False):
        x = np.sort(family.sample(at or fit.theta, rng, model=model))
        fb = fit_family(x, rf, start=fit.theta)
        if isinstance(rf, TabulatedFamily) and rf.on_border(fb.theta) and wide is not None:
            fb = fit_family(x, wide, start=fb.theta)
            redone += 1
        out["eta"].append(rf.to_eta(fb.theta))
        out["stat"].append(fb.criterion)
        out["ks"].append(fb.ks)
        out["n_outliers"].append(fb.n_outliers)
        out["quantiles"].append(np.quantile(x, U_ID))
    res: dict[str, Any] = {k: np.asarray(v, dtype=float) for k, v in out.items()}
    res["redone"] = redone
    return res


def pilot_draws(fit: Fit, family: Family, refit: Family, seed: int, model: str | None) -> np.ndarray:
    """``PILOT_DRAWS`` spectra simulated at ``fit.theta`` and refitted on ``refit``: ``(PILOT_DRAWS, p)``
    fit coordinates (seeds: children of ``SeedSequence([seed, 1])``).

    Examples
    --------
    >>> from attnspec.identify import MarchenkoPasturFamily, fit_family
    >>> fam = MarchenkoPasturFamily(60, 120)
    >>> fit = fit_family(fam.sample({"scale": 2.0}, np.random.default_rng(0)), fam)
    >>> pilot_draws(fit, fam, fam, seed=0, model=None).shape      # log-scale coordinates of 5 refits
    (5, 1)
    """
    out = []
    for ss in np.random.SeedSequence([seed, 1]).spawn(PILOT_DRAWS):
        xb = np.sort(family.sample(fit.theta, np.random.default_rng(ss), model=model))
        out.append(refit.to_eta(fit_family(xb, refit, start=fit.theta).theta))
    return np.asarray(out)


def simulation_point(family: Family, fit: Fit, pilot: np.ndarray, eta_ref: np.ndarray) -> dict[str, float]:
    """``theta`` at ``eta_hat - b1`` with ``b1 = mean(pilot) - eta_ref`` (clipped to the family's bounds).

    Examples
    --------
    >>> from attnspec.identify import MarchenkoPasturFamily, Fit
    >>> fam = MarchenkoPasturFamily(10, 20)
    >>> fit = Fit(theta={"scale": 2.0}, criterion=0.0, ks=0.0, edge=1.0, n=10, n_outliers=0, outliers=np.zeros(0))
    >>> pilot = np.log([[2.2], [2.2]])                  # the refits come out 10 % high
    >>> round(simulation_point(fam, fit, pilot, np.log([2.0]))["scale"], 4)
    1.8182
    """
    eta = family.to_eta(fit.theta) - (pilot.mean(axis=0) - eta_ref)
    return {k: float(np.clip(v, *family.bounds[k])) for k, v in family.from_eta(eta).items()}
