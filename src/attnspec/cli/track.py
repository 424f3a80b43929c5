"""``attnspec track CHECKPOINT... --out DIR``: one diagnosis per checkpoint on the same texts, one long table.

Each CHECKPOINT is a model folder (``checkpoint-N`` is step N) or a training output folder holding ``checkpoint-N``
folders. Every checkpoint is diagnosed with the same texts, seed and options; ``DIR/diagnoses/step-N/`` keeps each
diagnosis, ``DIR/track.csv`` the long table (step, checkpoint, layer, head, diagnostics), ``DIR/trajectories.png``
and ``DIR/report.html`` the trajectories. A checkpoint already diagnosed in DIR from the same weights (bit for bit),
token ids and options is read back, so an interrupted run resumes where it stopped; retrained weights under the same
checkpoint names are diagnosed again (docs/compare.md). Notes name checkpoints with bit-identical weights, of
different architectures, or whose steps are their positions. DIR must be apart from the checkpoints; a second
command writing the same DIR at once is refused.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..seeding import MAX_SEED
from ._checks import CLIError, int_range, read_text_lines
from ._options import HelpFormatter

ORDER = 34

DESCRIPTION = __doc__


#: Most bootstrap replicates (attnspec.diagnostics.options.MAX_N_BOOT, not imported: --help without torch).
MAX_N_BOOT = 10_000
#: What the command writes inside --out.
WRITTEN = ("diagnoses", "track.csv", "trajectories.png", "report.html", "summary.json")


def register(sub) -> None:
    p = sub.add_parser("track", description=DESCRIPTION, formatter_class=HelpFormatter,
                       help="diagnose every checkpoint of a training run on the same texts: one long table")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                   help="model folders (checkpoint-N or step-N: step N), or a training output folder with checkpoint-N "
                        "folders")
    p.add_argument("--out", required=True, help="output folder (track.csv, trajectories.png, report.html, ...); apart "
                                                "from the checkpoints")
    p.add_argument("--texts", default="builtin", help="'builtin' or a UTF-8 file, one text per line")
    p.add_argument("--n-texts", type=int_range(8, None), default=16,
                   help="number of built-in texts, >= 8 (default 16)")
    p.add_argument("--max-length", type=int_range(2, None), default=128,
                   help="tokens per text at most (at most the checkpoints' positions)")
    p.add_argument("--seed", type=int_range(0, MAX_SEED), default=0, help="resampling seed of every diagnosis, 0..2**63 - 2")
    p.add_argument("--reference-seed", type=int_range(0, MAX_SEED), default=0,
                   help="seed of every diagnosis' reference draws (null heads, equivalents), 0..2**63 - 2")
    p.add_argument("--n-boot", type=int_range(10, MAX_N_BOOT), default=200,
                   help=f"bootstrap replicates, 10..{MAX_N_BOOT:,}")
    p.add_argument("--removal", choices=("auto", "exact", "first-order", "none"), default="none",
                   help="head removal of each diagnosis (default none, as the training callback)")
    p.add_argument("--gradient", action="store_true", help="also compute the gradient importance (Michel et al.)")
    p.add_argument("--tokenizer", default=None,
                   help="model folder or built-in name whose tokenizer every checkpoint is diagnosed with (the "
                        "checkpoints then need no tokenizer files); default: each checkpoint's own")
    p.add_argument("--threads", type=int_range(1, 1024), default=None, help="torch threads")
    p.add_argument("--no-report", action="store_true", help="do not draw trajectories.png nor write report.html")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run)


def _check_checkpoint(path: Path, with_tokenizer: bool, max_length: int) -> None:
    """A checkpoint's files checked without loading it (config, weights, tokenizer unless --tokenizer, positions)."""
    from ._registry import check_model
    if not (path / "config.json").is_file() and not path.suffix == ".gguf" and not list(path.glob("*.gguf")):
        raise CLIError("CHECKPOINT", path, "is not a model folder (no config.json)")
    if not with_tokenizer:
        from ..models.loading import TOKENIZER_FILES
        if not any((path / f).is_file() for f in TOKENIZER_FILES) and not any(path.glob("*.tiktoken")):
            raise CLIError("CHECKPOINT", path, "has no tokenizer files: pass --tokenizer (a model folder or built-in "
                                               "name whose tokenizer to use)")
        info = check_model("CHECKPOINT", str(path))
    else:
        info = {"max_positions": None}
        from ._registry import _max_positions
        if (path / "config.json").is_file():
            info = {"max_positions": _max_positions(path / "config.json"), "config": path / "config.json"}
    if (path / "config.json").is_file():      # weights cut short or garbled: refused before any checkpoint is diagnosed
        from ..models.loading import _check_safetensors_files
        _check_safetensors_files(path)
    mp = info.get("max_positions")
    if mp is not None and max_length > mp[0]:
        raise CLIError("--max-length", max_length, f"exceeds the {mp[0]} positions of {path} ({mp[1]} in "
                                                   f"{info.get('config')}); allowed 2..{mp[0]}")


def run(args: argparse.Namespace) -> int:
    from ..comparing.tracking import find_checkpoints
    from ._checks import check_apart, check_output_dir, output_lock
    for c in args.checkpoints:
        if not Path(c).exists():
            raise CLIError("CHECKPOINT", c, "no such folder (a model folder or a folder of checkpoint-N folders)")
    if not str(args.out).strip():
        raise CLIError("--out", args.out, "must name a folder")
    notes: list[str] = []
    found = find_checkpoints(args.checkpoints, notes)
    for _, p in found:
        _check_checkpoint(p, args.tokenizer is not None, args.max_length)
    if args.tokenizer is not None:
        from ._registry import check_model
        check_model("--tokenizer", args.tokenizer)
    if args.texts == "builtin":
        from ..data import builtin_texts
        texts = builtin_texts(args.n_texts)
    else:
        texts = read_text_lines("--texts", args.texts)
        if len(set(texts)) < 8:
            raise CLIError("--texts", args.texts, f"holds {len(set(texts))} distinct texts; intervals need at least 8")
    check_output_dir("--out", args.out)
    check_apart("--out", args.out, [("CHECKPOINT", p) for p in args.checkpoints] + [("CHECKPOINT", p) for _, p in found]
                + [("--texts", None if args.texts == "builtin" else args.texts), ("--tokenizer", args.tokenizer)],
                WRITTEN)
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    with output_lock("--out", args.out):
        return _run(args, found, texts, notes)


def _run(args: argparse.Namespace, found, texts, notes) -> int:
    from ..comparing import track
    tok = None
    if args.tokenizer:
        from ..models import load_model
        tok = load_model(args.tokenizer)[1]
        if tok is None:
            raise CLIError("--tokenizer", args.tokenizer, "has no tokenizer (an image model)")
    say = None if args.quiet else (lambda line: print(line, flush=True))
    t = track([p for _, p in found], texts=texts, out=args.out, tokenizer=tok, report=not args.no_report,
              log=say, seed=args.seed, reference_seed=args.reference_seed, n_boot=args.n_boot, removal=args.removal,
              gradient=args.gradient, max_length=args.max_length, progress=False)
    print(f"{len(found)} checkpoints (steps {', '.join(str(s) for s in t.summary['steps'])}), "
          f"{len(t.summary['resumed'])} read back; {len(t.table)} rows")
    for n in list(dict.fromkeys(notes + t.summary.get("notes", []))):
        print(f"note: {n}")
    print(f"wrote {args.out}/track.csv" + ("" if args.no_report else ", trajectories.png, report.html")
          + ", summary.json")
    return 0
