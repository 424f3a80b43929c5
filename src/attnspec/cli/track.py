"""``attnspec track CHECKPOINT... --out DIR``: one diagnosis per checkpoint on the same texts, one long table.

Each CHECKPOINT is a model folder (``checkpoint-N`` is step N) or a training output folder holding ``checkpoint-N``
folders. Every checkpoint is diagnosed with the same texts, seed and options; ``DIR/diagnoses/step-N/`` keeps each
diagnosis, ``DIR/track.csv`` the long table (step, checkpoint, layer, head, diagnostics), ``DIR/trajectories.png``
and ``DIR/report.html`` the trajectories. A checkpoint already diagnosed in DIR with the same settings is read back,
so an interrupted run resumes where it stopped (docs/compare.md).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..seeding import MAX_SEED
from ._checks import CLIError, int_range, read_text_lines
from ._options import HelpFormatter

ORDER = 34

DESCRIPTION = __doc__


def register(sub) -> None:
    p = sub.add_parser("track", description=DESCRIPTION, formatter_class=HelpFormatter,
                       help="diagnose every checkpoint of a training run on the same texts: one long table")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                   help="model folders (checkpoint-N: step N), or a training output folder with checkpoint-N folders")
    p.add_argument("--out", required=True, help="output folder (track.csv, trajectories.png, report.html, ...)")
    p.add_argument("--texts", default="builtin", help="'builtin' or a UTF-8 file, one text per line")
    p.add_argument("--n-texts", type=int_range(8, None), default=16,
                   help="number of built-in texts, >= 8 (default 16)")
    p.add_argument("--seed", type=int_range(0, MAX_SEED), default=0, help="resampling seed of every diagnosis, 0..2**63 - 2")
    p.add_argument("--reference-seed", type=int_range(0, MAX_SEED), default=0,
                   help="seed of every diagnosis' reference draws (null heads, equivalents), 0..2**63 - 2")
    p.add_argument("--n-boot", type=int_range(10, 100000), default=200, help="bootstrap replicates, 10..100000")
    p.add_argument("--removal", choices=("auto", "exact", "first-order", "none"), default="none",
                   help="head removal of each diagnosis (default none, as the training callback)")
    p.add_argument("--gradient", action="store_true", help="also compute the gradient importance (Michel et al.)")
    p.add_argument("--tokenizer", default=None,
                   help="model folder or built-in name whose tokenizer to use when the checkpoints carry none")
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch threads")
    p.add_argument("--no-report", action="store_true", help="do not draw trajectories.png nor write report.html")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..compare import track
    from ..compare.tracking import find_checkpoints
    for c in args.checkpoints:
        if not Path(c).exists():
            raise CLIError("CHECKPOINT", c, "no such folder (a model folder or a folder of checkpoint-N folders)")
    found = find_checkpoints(args.checkpoints)
    if not str(args.out):
        raise CLIError("--out", args.out, "must name a folder")
    if args.texts == "builtin":
        from ..data import builtin_texts
        texts = builtin_texts(args.n_texts)
    else:
        texts = read_text_lines("--texts", args.texts)
        if len(texts) < 8:
            raise CLIError("--texts", args.texts, f"holds {len(texts)} texts; intervals need at least 8")
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    tok = None
    if args.tokenizer:
        from ..models import load_model
        tok = load_model(args.tokenizer)[1]
    say = None if args.quiet else (lambda line: print(line, flush=True))
    t = track([p for _, p in found], texts=texts, out=args.out, tokenizer=tok, report=not args.no_report,
              log=say, seed=args.seed, reference_seed=args.reference_seed, n_boot=args.n_boot, removal=args.removal, gradient=args.gradient,
              progress=False)
    print(f"{len(found)} checkpoints (steps {', '.join(str(s) for s in t.summary['steps'])}), "
          f"{len(t.summary['resumed'])} read back; {len(t.table)} rows")
    print(f"wrote {args.out}/track.csv" + ("" if args.no_report else ", trajectories.png, report.html")
          + ", summary.json")
    return 0
