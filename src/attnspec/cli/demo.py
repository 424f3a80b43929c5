"""``attnspec demo``: the main job on built-in defaults (what ``make demo`` runs).

1. Diagnosis of the packaged MiniLM (6 x 12 heads) on the built-in corpus, with its HTML report.
2. The limiting law against softmax and surrogate Monte-Carlo for three reference configurations
   (docs/theory.md, 'Checked figures'): the attention matrix, four independent heads, and four heads
   with W_V = W_K.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import check_output_dir, int_range
from ._options import RawHelpFormatter, write_json

ORDER = 5

DEMO_CONFIGS = {
    "attention_matrix": dict(heads=1, d_qk=1.0, target="attention"),
    "four_heads": dict(heads=4, d_qk=0.25),
    "four_heads_tied": dict(heads=4, d_qk=0.25, values="tied-to-keys"),
}


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the main job on built-in defaults and write a report",
                       description=__doc__, formatter_class=RawHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory, created if missing (default out/demo)")
    p.add_argument("--d", type=int_range(8, 4000), default=1000,
                   help="model width for the law-vs-simulation figures, 8..4000 (default 1000)")
    p.add_argument("--skip-diagnosis", action="store_true", help="only the law-vs-simulation figures")
    p.set_defaults(func=run)


def law_vs_simulation(out: Path, d: int, seed: int = 0) -> dict:
    """Figures and numbers: law vs one softmax and one surrogate draw at width ``d``, beta = 1."""
    import matplotlib.pyplot as plt

    from ..config import MHSAConfig
    from ..plots import plot_spectra, save_figure
    from ..simulation import simulate
    from ..theory import law_distances, solve_law

    results = {}
    for name, spec in DEMO_CONFIGS.items():
        spec = dict(spec)
        heads, ratio = spec.pop("heads"), spec.pop("d_qk")
        cfg = MHSAConfig.uniform(d, d, heads=heads, d_qk=int(ratio * d), beta=1.0, **spec)
        t0 = time.perf_counter()
        law = solve_law(cfg)
        t_law = time.perf_counter() - t0
        sim = simulate(cfg, seed=seed)
        dist = {m: law_distances(law, getattr(sim, m)) for m in ("softmax", "surrogate")}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        plot_spectra(ax, {"softmax": sim.softmax, "surrogate": sim.surrogate}, law=law,
                     title=f"{cfg.describe()}\nW1(law, softmax) {dist['softmax']['w1']:.3g}, "
                           f"W1(law, surrogate) {dist['surrogate']['w1']:.3g}")
        png = save_figure(fig, out / "figures" / f"{name}.png")
        results[name] = {"config": cfg.to_dict(), "law_moments": law.moments, "law_right_edge": law.right_edge,
                         "law_seconds": t_law, "distances": dist, "figure": str(png.relative_to(out))}
        print(f"  {name:18s} law m1 {law.moments[0]:.5f}, edge {law.right_edge:.4f} ({t_law:.2f} s); "
              f"W1 to softmax {dist['softmax']['w1']:.4f}, to surrogate {dist['surrogate']['w1']:.4f}")
    return results


def run(args: argparse.Namespace) -> int:
    out: Path = check_output_dir("--out", args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    if not args.skip_diagnosis:
        from . import build_parser

        print("diagnosing the packaged MiniLM on the built-in corpus ...")
        diag_args = build_parser().parse_args(["diagnose", "--model", "minilm", "--out", str(out / "minilm")])
        if diag_args.func(diag_args) != 0:
            return 1
        summary["diagnosis"] = {"report": "minilm/report.html", "tables": ["minilm/heads.csv", "minilm/layers.csv"]}
    print(f"law vs Monte-Carlo at d = {args.d} ...")
    summary["law_vs_simulation"] = law_vs_simulation(out, args.d)
    path = write_json(out / "summary.json", summary)
    print(f"wrote {path}", file=sys.stderr)
    return 0
