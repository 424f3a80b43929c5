"""``attnspec compare A B --out DIR``: per-head differences between two diagnoses with paired intervals.

A and B are diagnosis output folders (``attnspec diagnose --out``) made on the same texts with the same seed, or
models (built-in names or local paths), diagnosed here with the same settings (each saved to ``DIR/a`` and
``DIR/b``). Writes ``DIR/heads.csv``, ``DIR/report.html`` and ``DIR/summary.json`` (docs/compare.md).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..seeding import MAX_SEED
from ._checks import CLIError, int_range, read_text_lines
from ._options import HelpFormatter

ORDER = 32

DESCRIPTION = __doc__


def register(sub) -> None:
    p = sub.add_parser("compare", description=DESCRIPTION, formatter_class=HelpFormatter,
                       help="per-head differences between two diagnoses (B minus A) with paired bootstrap intervals")
    p.add_argument("a", metavar="A", help="diagnosis output folder, or a model (built-in name or local path)")
    p.add_argument("b", metavar="B", help="the same for B (differences are B minus A)")
    p.add_argument("--out", required=True, help="output folder (heads.csv, report.html, summary.json)")
    p.add_argument("--texts", default="builtin",
                   help="models only: 'builtin' or a UTF-8 file, one text per line (blank lines skipped)")
    p.add_argument("--n-texts", type=int_range(8, None), default=None,
                   help="models only: number of texts, >= 8 (default: as attnspec diagnose)")
    p.add_argument("--seed", type=int_range(0, MAX_SEED), default=0,
                   help="models only: resampling seed of the diagnoses, 0..2**63 - 2")
    p.add_argument("--reference-seed", type=int_range(0, MAX_SEED), default=0,
                   help="models only: seed of the diagnoses' reference draws (null heads, equivalents), 0..2**63 - 2")
    p.add_argument("--n-boot", type=int_range(10, 100000), default=200,
                   help="models only: bootstrap replicates, 10..100000")
    p.add_argument("--removal", choices=("auto", "exact", "first-order", "none"), default="auto",
                   help="models only: head removal of the diagnoses")
    p.add_argument("--max-length", type=int_range(2, None), default=None, help="models only: tokens per text")
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch threads")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def _is_diagnosis(x: str) -> bool:
    p = Path(x)
    return p.is_dir() and (p / "summary.json").is_file() and (p / "heads.csv").is_file()


def _texts(args) -> list[str] | None:
    if args.texts == "builtin":
        return None
    texts = read_text_lines("--texts", args.texts)
    if len(texts) < 8:
        raise CLIError("--texts", args.texts, f"holds {len(texts)} texts; a paired comparison needs at least 8")
    return texts


def _diagnosis(x: str, which: str, args, texts, out: Path):
    from ..diagnostics import Diagnosis, diagnose
    if _is_diagnosis(x):
        return Diagnosis.load(x)
    p = Path(x)
    if p.is_dir() and (p / "heads.csv").is_file():
        raise CLIError(which, x, "is an incomplete diagnosis folder (no summary.json)")
    from ..models import load_model
    model, tok = load_model(x)
    if texts is None:
        from ..data import builtin_texts
        texts = builtin_texts(args.n_texts) if args.n_texts else None
    kw = dict(seed=args.seed, reference_seed=args.reference_seed, n_boot=args.n_boot, removal=args.removal,
              progress=not args.quiet, model_name=x)
    if args.max_length:
        kw["max_length"] = args.max_length
    d = diagnose(model, tok, texts, **kw)
    d.to_csv(out / which.lower())
    return d


def run(args: argparse.Namespace) -> int:
    from ..compare import compare
    texts = _texts(args)
    out = Path(args.out)
    if not str(args.out):
        raise CLIError("--out", args.out, "must name a folder")
    for which, x in (("A", args.a), ("B", args.b)):
        if not _is_diagnosis(x) and not Path(x).exists() and "/" in x:
            raise CLIError(which, x, "is neither a diagnosis folder nor a model (no such file or folder)")
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    a = _diagnosis(args.a, "A", args, texts, out)
    b = _diagnosis(args.b, "B", args, texts, out)
    c = compare(a, b)
    c.save(out, report=not args.no_report)
    s = c.summary
    by = ", ".join(f"{k} {v}" for k, v in s["n_changed_by"].items() if v)
    print(f"{s['a']['model']} vs {s['b']['model']}: {s['n_changed']} of {s['n_heads']} heads changed"
          + (f" ({by})" if by else "") + f"; {s['n_texts']} texts, {s['n_boot']} paired replicates")
    for n in s["notes"]:
        print(f"note: {n}")
    print(f"wrote {out}/heads.csv, " + ("" if args.no_report else "report.html, ") + "summary.json")
    return 0
