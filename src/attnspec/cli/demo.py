"""``attnspec demo``: the main job on built-in defaults (what ``make demo`` runs).

1. Diagnosis of the packaged MiniLM (6 x 12 heads) on the built-in corpus, with its HTML report.
2. The limiting law against softmax and surrogate Monte-Carlo for three reference configurations
   (docs/theory.md, 'Checked figures'): the attention matrix, four independent heads, and four heads
   with W_V = W_K.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._checks import check_output_dir, int_range
from ._options import RawHelpFormatter, write_json

ORDER = 5


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the main job on built-in defaults and write a report",
                       description=__doc__, formatter_class=RawHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory, created if missing (default out/demo)")
    p.add_argument("--d", type=int_range(8, 4000), default=1000,
                   help="model width for the law-vs-simulation figures, 8..4000 (default 1000)")
    p.add_argument("--skip-diagnosis", action="store_true", help="only the law-vs-simulation figures")
    p.set_defaults(func=run)


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
    from ..figures.demo import law_vs_simulation

    summary["law_vs_simulation"] = law_vs_simulation(out, args.d, log=print)
    path = write_json(out / "summary.json", summary)
    print(f"wrote {path}", file=sys.stderr)
    return 0
