"""``attnspec compare A B --out DIR``: per-head differences between two diagnoses with paired intervals.

A and B are diagnosis output folders (``attnspec diagnose --out``) made on the same texts with the same seed, or
models (built-in names or local paths), diagnosed here with the same settings (each saved to ``DIR/a`` and
``DIR/b``). Writes ``DIR/heads.csv``, ``DIR/report.html`` and ``DIR/summary.json`` (docs/compare.md).

DIR must be apart from A and B (neither one of them nor inside one); both are checked before any work (a damaged
diagnosis folder or an unloadable model B is refused before A is diagnosed), and nothing is written until the
comparison stands. Two commands writing one DIR at once: the second is refused (the folder's lock).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..seeding import MAX_SEED
from ._checks import CLIError, int_range, read_text_lines
from ._options import HelpFormatter

ORDER = 32

DESCRIPTION = __doc__


#: Most bootstrap replicates (attnspec.diagnostics.options.MAX_N_BOOT, not imported: --help without torch).
MAX_N_BOOT = 10_000


def register(sub) -> None:
    p = sub.add_parser("compare", description=DESCRIPTION, formatter_class=HelpFormatter,
                       help="per-head differences between two diagnoses (B minus A) with paired bootstrap intervals")
    p.add_argument("a", metavar="A", help="diagnosis output folder, or a model (built-in name or local path)")
    p.add_argument("b", metavar="B", help="the same for B (differences are B minus A)")
    p.add_argument("--out", required=True, help="output folder (heads.csv, report.html, summary.json); apart from A and B")
    p.add_argument("--texts", default="builtin",
                   help="models only: 'builtin' or a UTF-8 file, one text per line (blank lines skipped)")
    p.add_argument("--n-texts", type=int_range(8, None), default=None,
                   help="models only: number of texts, >= 8 (default: as attnspec diagnose)")
    p.add_argument("--seed", type=int_range(0, MAX_SEED), default=0,
                   help="models only: resampling seed of the diagnoses, 0..2**63 - 2")
    p.add_argument("--reference-seed", type=int_range(0, MAX_SEED), default=0,
                   help="models only: seed of the diagnoses' reference draws (null heads, equivalents), 0..2**63 - 2")
    p.add_argument("--n-boot", type=int_range(10, MAX_N_BOOT), default=200,
                   help=f"models only: bootstrap replicates, 10..{MAX_N_BOOT:,}")
    p.add_argument("--removal", choices=("auto", "exact", "first-order", "none"), default="auto",
                   help="models only: head removal of the diagnoses")
    p.add_argument("--max-length", type=int_range(2, None), default=None, help="models only: tokens per text")
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch threads")
    p.add_argument("--no-report", action="store_true", help="do not write report.html")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def _is_diagnosis(x: str) -> bool:
    """A folder of diagnosis files (heads.csv or summary.json, and no config.json of a model)."""
    p = Path(x)
    return p.is_dir() and not (p / "config.json").is_file() and any(
        (p / f).exists() for f in ("heads.csv", "summary.json"))


def _texts(args) -> list[str] | None:
    if args.texts == "builtin":
        return None
    texts = read_text_lines("--texts", args.texts)
    if len(set(texts)) < 8:
        raise CLIError("--texts", args.texts, f"holds {len(set(texts))} distinct texts; a paired comparison needs at "
                                              "least 8")
    return texts


def _check_model(which: str, x: str, args) -> None:
    """A model argument checked without loading it (files, position limit), so that a bad B is refused before A
    is diagnosed."""
    from ._registry import check_model
    info = check_model(which, x)
    if info["kind"] == "zoo" or info.get("vision"):
        raise CLIError(which, x, "compare diagnoses text models; diagnose this one with attnspec diagnose --out and "
                                 "compare the folders")
    if info["kind"] == "dir":          # weights cut short or garbled: refused by their headers, before any work
        from ..models.loading import _check_safetensors_files
        _check_safetensors_files(Path(x))
    mp = info["max_positions"]
    if args.max_length and mp is not None and args.max_length > mp[0]:
        raise CLIError("--max-length", args.max_length, f"exceeds the {mp[0]} positions of {which} ({mp[1]} in "
                                                        f"{info['config']}); allowed 2..{mp[0]}")


def _load(which: str, x: str):
    from ..comparing.comparison import ComparisonError
    from ..comparing.folders import read_diagnosis
    try:
        return read_diagnosis(x, which)
    except FileNotFoundError as err:
        raise ComparisonError(str(err)) from None


def _diagnose(x: str, args, texts):
    from ..diagnostics import diagnose
    from ..models import load_model
    model, tok = load_model(x)
    if texts is None:
        from ..data import builtin_texts
        texts = builtin_texts(args.n_texts) if args.n_texts else None
    kw = dict(seed=args.seed, reference_seed=args.reference_seed, n_boot=args.n_boot, removal=args.removal,
              progress=not args.quiet, model_name=x)
    if args.max_length:
        kw["max_length"] = args.max_length
    return diagnose(model, tok, texts, **kw)


def run(args: argparse.Namespace) -> int:
    from ._checks import check_apart, check_output_dir, output_lock
    if not str(args.out).strip():
        raise CLIError("--out", args.out, "must name a folder")
    texts = _texts(args)
    out = Path(args.out)
    models = []
    for which, x in (("A", args.a), ("B", args.b)):
        if _is_diagnosis(x):
            continue
        if not Path(x).exists() and "/" in x:
            raise CLIError(which, x, "is neither a diagnosis folder nor a model (no such file or folder)")
        _check_model(which, x, args)
        models.append(which)
    check_output_dir("--out", out)
    check_apart("--out", out, [("A", args.a), ("B", args.b), ("--texts", None if texts is None else args.texts)],
                ["heads.csv", "report.html", "summary.json"] + [w.lower() for w in models])
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    with output_lock("--out", out):
        return _run(args, texts, out)


def _run(args: argparse.Namespace, texts, out: Path) -> int:
    from ..comparing import compare
    from ..comparing.comparison import _check
    done = {}
    why = {}
    for which, x in (("A", args.a), ("B", args.b)):       # folders first: a damaged one is refused before any work
        if _is_diagnosis(x):
            done[which], why[which] = _load(which.lower(), x)
    for which, x in (("A", args.a), ("B", args.b)):
        if which not in done:
            done[which], why[which] = _diagnose(x, args, texts), ""
    _check(done["A"], done["B"], (why["A"], why["B"]))
    c = compare(done["A"], done["B"])
    for which, x in (("A", args.a), ("B", args.b)):       # the diagnoses made here, once the comparison stands
        if not _is_diagnosis(x):
            done[which].to_csv(out / which.lower())
    c.save(out, report=not args.no_report)
    s = c.summary
    by = ", ".join(f"{k} {v}" for k, v in s["n_changed_by"].items() if v)
    print(f"{s['a']['model']} vs {s['b']['model']}: {s['n_changed']} of {s['n_heads']} heads changed"
          + (f" ({by})" if by else "") + f"; {s['n_texts']} texts, {s['n_boot']} paired replicates")
    for n in s["notes"]:
        print(f"note: {n}")
    print(f"wrote {out}/heads.csv, " + ("" if args.no_report else "report.html, ") + "summary.json"
          + "".join(f", {w.lower()}/" for w in ("A", "B") if not _is_diagnosis(getattr(args, w.lower()))))
    return 0
