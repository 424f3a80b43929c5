"""Evaluation of one sweep point (runs on a Dask worker; pure function of the point).

For a point with evaluations ``E`` the result holds

* ``softmax`` / ``surrogate`` (if in ``E``): :func:`attnspec.spectra.summarize` of the pooled
  Monte-Carlo spectrum (moments m1..m4, atom at zero, quantiles, max) plus ``quantiles_100``, the
  empirical quantiles at levels ``(i + 1/2)/100``, ``i = 0..99`` (enough to redraw CDFs);
* ``law`` (if in ``E``): the limiting law from :func:`attnspec.theory.solve_law` (moments, right edge,
  atom at zero, ``quantiles_100``), ``source='solver'``; when the solver fails, the closed forms of
  :mod:`.closed_form` with ``source='closed-form'`` (entries without a closed form are ``null``; the
  failure is recorded in ``solver_error``);
* ``distances``: ``softmax~surrogate`` (W1, KS, bulk versions, outliers above the surrogate edge) and
  ``law~softmax``, ``law~surrogate`` (from :func:`attnspec.theory.law_distances`: W1, KS, bulk W1,
  outliers above the law's edge) when both sides exist;
* ``timing``: seconds spent in the simulator and in the law solver.

Everything is plain JSON (non-finite floats become ``null``).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..jsonio import jsonable
from ..spectra import summarize
from .closed_form import closed_form_moments
from .spec import SweepPoint

__all__ = ["evaluate_point", "run_point", "U_LEVELS"]

#: Quantile levels stored for every spectrum and law.
U_LEVELS = (np.arange(100) + 0.5) / 100


def _law(config):
    """(law object or None, law summary dict, seconds). A solver failure keeps the point: the closed forms
    of :mod:`.closed_form` stand in (``source='closed-form'``, the error in ``solver_error``)."""
    from ..theory import solve_law

    t0 = time.perf_counter()
    try:
        law = solve_law(config)
    except Exception as exc:  # noqa: BLE001 (a solver failure must not lose the Monte-Carlo results)
        cf = closed_form_moments(config)
        out = {"source": "closed-form", "moments": [cf["m1"], cf["m2"], cf["m3"], cf["m4"]],
               "right_edge": cf["right_edge"], "atom_at_zero": None, "quantiles_100": None,
               "solver_error": f"{type(exc).__name__}: {exc}"}
        return None, out, time.perf_counter() - t0
    out = {"source": "solver", "moments": [float(x) for x in np.ravel(law.moments)[:4]],
           "right_edge": float(law.right_edge), "atom_at_zero": float(law.atom_at_zero),
           "quantiles_100": np.asarray(law.quantile(U_LEVELS), dtype=float)}
    return law, out, time.perf_counter() - t0


def evaluate_point(point: SweepPoint) -> dict[str, Any]:
    """The result dictionary of one point (see the module docstring).

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.sweeps.spec import SweepPoint
    >>> res = evaluate_point(SweepPoint(MHSAConfig.uniform(16, 16), evaluations=("surrogate",)))
    >>> len(res["surrogate"]["moments"]), len(res["surrogate"]["quantiles_100"])
    (4, 100)
    """
    cfg = point.config
    res: dict[str, Any] = {"config": {"heads": cfg.n_heads, "gamma": cfg.gamma, "psi": list(cfg.psi),
                                      "phi": list(cfg.phi), "omega": cfg.omega, "sigma2": cfg.sigma2,
                                      "alpha2": cfg.alpha2, "describe": cfg.describe()},
                           "distances": {}, "timing": {}}
    models = tuple(m for m in ("softmax", "surrogate") if m in point.evaluations)
    sim = None
    if models:
        from ..simulation import simulate

        t0 = time.perf_counter()
        sim = simulate(cfg, seed=point.seed, draws=point.draws, models=models)
        res["timing"]["simulate_s"] = time.perf_counter() - t0
        for m in models:
            eigs = getattr(sim, m)
            res[m] = dict(summarize(eigs), quantiles_100=np.quantile(eigs.ravel(), U_LEVELS))
        if len(models) == 2:
            res["distances"]["softmax~surrogate"] = sim.distances()
    if "law" in point.evaluations:
        law, res["law"], res["timing"]["law_s"] = _law(cfg)
        if law is not None and sim is not None:
            from ..theory import law_distances

            for m in models:
                res["distances"][f"law~{m}"] = dict(law_distances(law, getattr(sim, m)))
    return jsonable(res)


def run_point(point_data: dict[str, Any], evaluator=None) -> dict[str, Any]:
    """Worker entry point: decode, evaluate, and wrap with timing and the worker's address.

    ``evaluator`` (a callable ``SweepPoint -> dict``) defaults to :func:`evaluate_point`.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.sweeps.spec import SweepPoint
    >>> p = SweepPoint(MHSAConfig.uniform(16, 16), evaluations=("surrogate",))
    >>> out = run_point(p.to_dict())
    >>> out["key"] == p.key, out["worker"]
    (True, 'local')
    """
    point = SweepPoint.from_dict(point_data)
    from distributed import get_worker

    try:
        worker = get_worker().address
    except ValueError:   # not on a Dask worker (n_workers=0)
        worker = "local"
    started = time.time()
    results = (evaluator or evaluate_point)(point)
    return {"key": point.key, "results": jsonable(results), "started_at": started, "finished_at": time.time(),
            "worker": worker}
