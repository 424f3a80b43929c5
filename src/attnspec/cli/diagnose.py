"""``attnspec diagnose``: per-head diagnosis of a trained model; writes tables, JSON and an HTML report."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ORDER = 30


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose", help="diagnose the attention heads of a trained model",
        description="Per layer and per head: Gaussian-equivalent identification, selection score and baselines, "
                    "inter-head dependence, head-removal sensitivity. Writes heads.csv, layers.csv, pairs.csv, "
                    "summary.json and report.html into --out.")
    p.add_argument("--model", required=True,
                   help="'minilm', 'gemma3-270m', a local safetensors/GGUF model path, or an attnspec.zoo checkpoint directory")
    p.add_argument("--texts", default="builtin", help="'builtin' (stdlib docstring sentences) or a UTF-8 file, one text per line")
    p.add_argument("--n-texts", type=int, default=None, help="number of texts (default: 64 for encoders, 16 for causal LMs)")
    p.add_argument("--max-length", type=int, default=128, help="truncate texts to this many tokens (default 128)")
    p.add_argument("--pack", action="store_true",
                   help="join built-in sentences into texts of --max-length tokens (default for causal LMs)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--bucket-size", type=int, default=16, help="texts per length bucket")
    p.add_argument("--no-removal", action="store_true", help="skip exact head removal")
    p.add_argument("--no-gradient", action="store_true", help="skip Michel et al. gradient importance")
    p.add_argument("--mean-ablation", action="store_true", help="also remove heads by mean ablation")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parquet", action="store_true", help="also write parquet tables")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from .. import zoo
    from ..data import builtin_texts, packed_texts
    from ..diagnostics import diagnose
    from ..models import ModelLoadError, adapt, load_model
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    if zoo.is_checkpoint(args.model):  # an attnspec.zoo EEG model: held-out simulated trials as inputs
        _, diag = zoo.diagnose_checkpoint(args.model, n_trials=args.n_texts or 32, removal=not args.no_removal,
                                          gradient=not args.no_gradient, mean_ablation=args.mean_ablation,
                                          seed=args.seed, progress=not args.quiet, model_name=args.model)
        return _write(diag, args, time.perf_counter() - t0, 0.0)
    try:
        print(f"loading {args.model} ...", file=sys.stderr)
        model, tok = load_model(args.model, verbose=True)
    except ModelLoadError as e:
        print(f"attnspec diagnose: error: {e}", file=sys.stderr)
        return 2
    t_load = time.perf_counter() - t0
    adapter = adapt(model)
    causal = adapter.kind == "causal-lm"
    n = args.n_texts or (16 if causal else 64)
    if args.texts == "builtin":
        texts = packed_texts(tok, n, args.max_length) if (args.pack or causal) else builtin_texts(n)
    else:
        path = Path(args.texts)
        if not path.is_file():
            print(f"attnspec diagnose: error: --texts {args.texts!r}: not 'builtin' and not a file", file=sys.stderr)
            return 2
        texts = [t for t in path.read_text(encoding="utf-8").splitlines() if t.strip()][:n]
    t1 = time.perf_counter()
    diag = diagnose(adapter, tok, texts, max_length=args.max_length, bucket_size=args.bucket_size,
                    removal=not args.no_removal, gradient=not args.no_gradient, mean_ablation=args.mean_ablation,
                    seed=args.seed, progress=not args.quiet, model_name=args.model)
    t_diag = time.perf_counter() - t1
    if args.texts == "builtin":
        from ..data import CORPUS_SOURCE
        diag.summary["corpus"] = CORPUS_SOURCE + (f"; packed into texts of {args.max_length} tokens"
                                                  if (args.pack or causal) else "")
    return _write(diag, args, t_diag, t_load)


def _write(diag, args: argparse.Namespace, t_diag: float, t_load: float) -> int:
    """Tables, JSON summary and report into ``--out``; one line of results on stdout."""
    import torch

    diag.summary["load_s"] = round(t_load, 2)
    diag.summary["diagnose_s"] = round(t_diag, 2)
    out = Path(args.out)
    diag.to_csv(out)
    if args.parquet:
        diag.to_parquet(out)
    diag.report(out / "report.html")
    s = diag.summary
    print(f"{s['model']}: {len(diag.heads)} heads in {s['n_layers']} layers, {s['n_texts']} texts / {s['n_tokens']} tokens; "
          f"{s['n_selective']} selective, {s['n_diffuse']} diffuse, {s['n_sparse']} sparse; load {t_load:.1f} s, diagnose {t_diag:.1f} s "
          f"({torch.get_num_threads()} threads)")
    print(f"wrote {out}/heads.csv, layers.csv, pairs.csv, summary.json, report.html")
    return 0
