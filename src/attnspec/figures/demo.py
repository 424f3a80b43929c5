"""The demo's law-vs-simulation figures (``attnspec demo``, what ``make demo`` runs).

Three reference configurations at width ``d`` (``l = d_model = d_out = d``, convention A, ``beta = 1``;
docs/theory.md, "Checked figures"): the attention matrix (one head, ``d_qk = d``), four independent heads
(``d_qk = d_v = d/4``) and the same four heads with ``W_V = W_K``. Each figure overlays the histograms of one
softmax and one surrogate draw (seed 0) on the limiting law, with the W1 distances in the title.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..config import MHSAConfig
from .base import save_figure
from .law import plot_law

__all__ = ["DEMO_CONFIGS", "demo_config", "law_vs_simulation"]

#: name -> heads, ``d_qk / d`` and further ``MHSAConfig`` keywords
DEMO_CONFIGS = {
    "attention_matrix": dict(heads=1, d_qk=1.0, target="attention"),
    "four_heads": dict(heads=4, d_qk=0.25),
    "four_heads_tied": dict(heads=4, d_qk=0.25, values="tied-to-keys"),
}


def demo_config(name: str, d: int) -> MHSAConfig:
    """The configuration ``name`` of :data:`DEMO_CONFIGS` at width ``d``.

    Examples
    --------
    >>> demo_config("four_heads", 100).describe() == MHSAConfig.uniform(100, 100, heads=4, d_qk=25).describe()
    True
    """
    if name not in DEMO_CONFIGS:
        raise ValueError(f"name must be one of {', '.join(DEMO_CONFIGS)}, got {name!r}")
    spec = dict(DEMO_CONFIGS[name])
    heads, ratio = spec.pop("heads"), spec.pop("d_qk")
    return MHSAConfig.uniform(d, d, heads=heads, d_qk=int(ratio * d), beta=1.0, **spec)


def law_vs_simulation(out: Path, d: int, seed: int = 0, log: Callable[[str], None] | None = None) -> dict:
    """Figures ``out/figures/<name>.png`` and numbers: the law vs one softmax and one surrogate draw at width ``d``.

    Parameters
    ----------
    out : Path
        Output folder (figures go to ``out/figures``; the returned paths are relative to ``out``).
    d : int
        Width (``l = d_model = d``).
    seed : int
        Monte-Carlo seed.
    log : callable, optional
        Called with one line per configuration (moments, edge, solve time, W1 distances).

    Returns
    -------
    dict
        Per configuration: ``config``, ``law_moments``, ``law_right_edge``, ``law_seconds``, ``distances``
        (:func:`attnspec.theory.law_distances` to each sample) and ``figure``.

    Examples
    --------
    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> r = law_vs_simulation(out, 32)
    >>> r["four_heads"]["figure"], (out / r["four_heads"]["figure"]).is_file()
    ('figures/four_heads.png', True)
    """
    from ..simulation import simulate
    from ..theory import law_distances, solve_law
    from .base import pyplot

    results = {}
    for name in DEMO_CONFIGS:
        cfg = demo_config(name, d)
        t0 = time.perf_counter()
        law = solve_law(cfg)
        t_law = time.perf_counter() - t0
        sim = simulate(cfg, seed=seed)
        dist = {m: law_distances(law, getattr(sim, m)) for m in ("softmax", "surrogate")}
        fig, ax = pyplot().subplots(figsize=(7, 4.2))
        plot_law(law, ax, {"softmax": sim.softmax, "surrogate": sim.surrogate},
                 title=f"{cfg.describe()}\nW1(law, softmax) {dist['softmax']['w1']:.3g}, "
                       f"W1(law, surrogate) {dist['surrogate']['w1']:.3g}")
        png = save_figure(fig, Path(out) / "figures" / f"{name}.png")
        results[name] = {"config": cfg.to_dict(), "law_moments": law.moments, "law_right_edge": law.right_edge,
                         "law_seconds": t_law, "distances": dist, "figure": str(png.relative_to(out))}
        if log is not None:
            log(f"  {name:18s} law m1 {law.moments[0]:.5f}, edge {law.right_edge:.4f} ({t_law:.2f} s); "
                f"W1 to softmax {dist['softmax']['w1']:.4f}, to surrogate {dist['surrogate']['w1']:.4f}")
    return results
