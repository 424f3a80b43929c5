"""``attnspec diagnose``: per-head diagnosis of a trained model; writes tables, JSON and an HTML report."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import CLIError, check_output_dir, positive_int, read_text_lines
from ._options import HelpFormatter
from ._registry import EEG_SUFFIXES, check_eeg_file, check_model, image_files, zoo_model_and_inputs

ORDER = 30

#: Default number of trials for attnspec.zoo checkpoints (texts: attnspec.diagnostics.pipeline.texts.DEFAULT_N_TEXTS).
DEFAULT_ZOO_TRIALS = 32


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose", help="diagnose the attention heads of a trained model",
        description="Per layer and per head: Gaussian-equivalent identification, selection score and baselines, "
                    "inter-head dependence, head-removal sensitivity. Writes heads.csv, layers.csv, pairs.csv, "
                    "summary.json and report.html into --out. Every flag, the texts file, the output directory and "
                    "the model's files are checked before the model is loaded.",
        formatter_class=HelpFormatter)
    p.add_argument("--list-architectures", action=_ListArchitectures,
                   help="print the table of supported and refused architecture families, then exit")
    p.add_argument("--model", required=True,
                   help="'minilm', 'mpnet', 'gemma3-270m', 'qwen2.5-0.5b', a local safetensors/GGUF model path, or an "
                        "attnspec.zoo checkpoint directory")
    p.add_argument("--texts", default="builtin",
                   help="'builtin' (stdlib docstring sentences) or a UTF-8 file, one text per line (blank lines skipped)")
    p.add_argument("--n-texts", type=_option("n_texts"), default=None,
                   help="number of texts, >= 1 and at most the texts available (default: 64 for encoders, 16 for causal "
                        "LMs, 32 trials for zoo checkpoints)")
    p.add_argument("--max-length", type=_option("max_length"), default=128,
                   help="truncate texts to this many tokens, from 2 up to the model's position limit (default 128)")
    p.add_argument("--images", default=None,
                   help="vision transformers (ViT, DeiT, DINOv2): 'builtin' (seeded synthetic images, used when the flag "
                        "is absent) or a directory of PNG/JPEG images, resized to the model's image size; --n-texts counts "
                        "images (default 32)")
    p.add_argument("--inputs", default=None,
                   help=f"attnspec.zoo checkpoints: an EEG file ({', '.join(EEG_SUFFIXES)}) whose motor-imagery epochs "
                        "are diagnosed, cut with the checkpoint's window, classes and sampling rate; --n-texts counts "
                        "trials (default: the checkpoint's held-out simulated trials)")
    p.add_argument("--pack", action="store_true",
                   help="join built-in sentences into texts of --max-length tokens (default for causal LMs)")
    p.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads, >= 1 (default: torch's choice)")
    p.add_argument("--bucket-size", type=_option("bucket_size"), default=16, help="texts per length bucket, >= 1")
    _add_removal_options(p)
    p.add_argument("--no-removal", action="store_true", help="same as --removal none")
    p.add_argument("--n-boot", type=_option("n_boot"), default=200,
                   help="Poisson bootstrap replicates over texts for the 95%% intervals and the verdict tests, >= 0 "
                        "(default 200; 0: no intervals, every label undetermined)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=positive_int, default=None,
                       help="run on a local Dask cluster of this many worker processes (1 thread each), >= 1; "
                            "docs/cluster.md")
    where.add_argument("--scheduler", default=None,
                       help="run on an existing Dask cluster at this scheduler address (e.g. tcp://10.0.0.5:8786); "
                            "every worker must be able to load --model")
    p.add_argument("--no-gradient", action="store_true", help="skip Michel et al. gradient importance")
    p.add_argument("--mean-ablation", action="store_true", help="also remove heads by mean ablation")
    p.add_argument("--seed", type=_option("seed"), default=0, help="seed of every random draw of the diagnosis, >= 0")
    p.add_argument("--parquet", action="store_true", help="also write parquet tables")
    p.add_argument("--quiet", action="store_true", help="no progress bars (they show texts/s and the ETA of each pass)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="cpu",
                   help="where the model runs ('auto': CUDA, else MPS, else CPU); statistics stay in float64 on the CPU")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="dtype of the model's weights and forward pass")
    p.add_argument("--device-map", choices=("auto",), default=None,
                   help="'auto' spreads a model that does not fit one device over the available ones (accelerate)")
    p.set_defaults(func=run)


def _add_removal_options(p) -> None:
    """The head-removal flags of ``attnspec diagnose``."""
    p.add_argument("--removal", choices=("auto", "exact", "sampled", "screened", "first-order", "none"), default="auto",
                   help="head removal: 'exact' removes every head; 'sampled' removes every head on a seeded sample of "
                        "--removal-texts texts, the LM loss on --removal-vocab words per position plus an estimated "
                        "tail; 'first-order' estimates every head's effect from one backward "
                        "pass; 'screened' does both and removes exactly the heads of largest first-order effect plus a "
                        "random sample of the others (measured rank agreement in summary.json); 'auto': sampled above "
                        "150 M parameters, else exact")
    p.add_argument("--removal-texts", type=_option("removal_texts"), default=None,
                   help="measure every removal column on a seeded sample of this many texts, >= 1, or 'auto' (exact "
                        "and sampled removal): 6 texts, then more of the same seeded order until the heads' ranking "
                        "is predicted to agree with the whole corpus' at Spearman 0.92 (prediction, texts used and "
                        "stages in summary.json 'removal'). Default: all; 'auto' with --removal sampled")
    p.add_argument("--removal-target", type=_option("removal_target"), default=None,
                   help="--removal-texts auto: the predicted rank agreement (Spearman) with the whole corpus to "
                        "reach, in (0, 1] (default 0.92)")
    for flag, name, what in (
            ("--removal-vocab", "removal_vocab", "causal LMs: score a removal's loss exactly on each position's this many most likely "
                                "words and estimate the rest (first order plus 64 drawn words), >= 1 (default the "
                                "whole vocabulary; 1024 with --removal sampled)"),
            ("--removal-positions", "removal_positions", "exact removal scores a seeded sample of this many predicted positions per text "
                                    "(causal LMs, >= 1; default all); standard errors include the sampling spread")):
        p.add_argument(flag, type=_option(name), default=None, help=what)
    p.add_argument("--screen-top", type=_option("screen_top"), default=None,
                   help="--removal screened: heads of largest first-order effect removed exactly, >= 0 (default "
                        "max(8, 5%% of the heads))")
    p.add_argument("--screen-sample", type=_option("screen_sample"), default=None,
                   help="--removal screened: randomly sampled other heads removed exactly, >= 0 (default as --screen-top)")


class _ListArchitectures(argparse.Action):
    """``--list-architectures``: print the architecture table and exit (no other flag needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from ..models.architecture_table import format_architectures
        print(format_architectures())
        parser.exit()


def _builtin_count() -> int:
    from importlib.resources import files

    from ..data import CORPUS_FILE
    return sum(1 for t in files("attnspec.data").joinpath(CORPUS_FILE).read_text(encoding="utf-8").splitlines()
               if t.strip())


def check_args(args: argparse.Namespace) -> tuple[dict, list[str] | None]:
    """Every check that needs no model: model files, position limit, texts, output directory."""
    info = check_model("--model", args.model)
    if info["kind"] != "zoo":
        mp = info["max_positions"]
        if mp is not None and args.max_length > mp[0]:
            raise CLIError("--max-length", args.max_length, f"exceeds the model's {mp[0]} positions ({mp[1]} in "
                                                            f"{info['config']}); allowed 2..{mp[0]}")
    texts = None
    if args.inputs is not None:
        if info["kind"] != "zoo":
            raise CLIError("--inputs", args.inputs, "applies to attnspec.zoo checkpoints only (EEG epochs); use --texts "
                                                    "or --images for other models")
        check_eeg_file("--inputs", args.inputs)
    if info.get("vision"):
        if args.texts != "builtin":
            raise CLIError("--texts", args.texts, "does not apply to a vision transformer; use --images")
        if args.images not in (None, "builtin"):
            image_files("--images", args.images)
    elif args.images is not None:
        raise CLIError("--images", args.images, "applies to vision transformers only (ViT, DeiT, DINOv2)")
    if args.texts != "builtin":
        if info["kind"] == "zoo":
            raise CLIError("--texts", args.texts, "does not apply to attnspec.zoo checkpoints (their inputs are "
                                                  "simulated EEG trials); leave it at 'builtin'")
        texts = read_text_lines("--texts", args.texts)
        if args.n_texts is not None and args.n_texts > len(texts):
            raise CLIError("--n-texts", args.n_texts, f"exceeds the {len(texts)} non-blank lines of {args.texts}; "
                                                      f"allowed 1..{len(texts)}")
    elif info["kind"] != "zoo" and args.n_texts is not None and not args.pack:
        available = _builtin_count()
        if args.n_texts > available:
            raise CLIError("--n-texts", args.n_texts, f"exceeds the {available} texts of the built-in corpus; "
                                                      f"allowed 1..{available}")
    check_output_dir("--out", args.out)
    return info, texts


def run(args: argparse.Namespace) -> int:
    info, user_texts = check_args(args)
    options_of(args)                      # every option checked against its declaration before the model loads

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    if (args.workers or args.scheduler) and info["kind"] == "zoo":
        raise CLIError("--workers/--scheduler", args.workers or args.scheduler,
                       "does not apply to attnspec.zoo checkpoints; run them in one process")
    if args.workers or args.scheduler:
        return _run_on_cluster(args, user_texts)
    from ..diagnostics import diagnose

    if info["kind"] == "zoo":  # an attnspec.CustomAttention model: EEG epochs (held-out simulated trials by default)
        model, X = zoo_model_and_inputs(args.model, args.n_texts or DEFAULT_ZOO_TRIALS, args.inputs)
        t_load = time.perf_counter() - t0
        t1 = time.perf_counter()
        diag = diagnose(model, X, options=options_of(args, n_texts=None, max_length=128, bucket_size=16, pack=None))
        diag.summary["inputs"] = str(args.inputs) if args.inputs else "held-out simulated trials"
        return _write(diag, args, time.perf_counter() - t1, t_load)

    from ..models import adapt, load_model

    print(f"loading {args.model} ...", file=sys.stderr)
    model, tok = load_model(args.model, verbose=True, device=args.device, dtype=args.dtype,
                            device_map=args.device_map)  # ModelLoadError: one line, exit 2 (cli.main)
    t_load = time.perf_counter() - t0
    adapter = adapt(model)
    if tok is None:   # a vision transformer: images as inputs
        t1 = time.perf_counter()
        diag = diagnose(adapter, _images(args, model), options=options_of(args, n_texts=None, max_length=128,
                                                                           pack=None))
        diag.summary["images"] = args.images or "builtin"
        return _write(diag, args, time.perf_counter() - t1, t_load)
    causal = adapter.kind == "causal-lm"
    # the one text policy of the library: built-in corpus (packed for causal LMs or --pack) or the file's lines
    texts = "builtin" if user_texts is None else user_texts
    t1 = time.perf_counter()
    diag = diagnose(adapter, tok, texts, options=options_of(args))
    t_diag = time.perf_counter() - t1
    if user_texts is None:
        from ..data import CORPUS_SOURCE
        diag.summary["corpus"] = CORPUS_SOURCE + (f"; packed into texts of {args.max_length} tokens"
                                                  if (args.pack or causal) else "")
    return _write(diag, args, t_diag, t_load)


#: Images diagnosed by default (--n-texts counts images).
DEFAULT_N_IMAGES = 32


def _images(args: argparse.Namespace, model) -> dict:
    """Inputs of a vision transformer: the built-in synthetic images or the directory's files, resized to the
    model's image size and normalized with its preprocessor's mean/std (0.5 when it has none)."""
    import json

    import numpy as np
    import torch

    from ..models import generated_images, image_inputs
    cfg = model.config
    size = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
    n = args.n_texts or DEFAULT_N_IMAGES
    if args.images in (None, "builtin"):
        return image_inputs(model, generated_images(n, size, getattr(cfg, "num_channels", 3), seed=args.seed))
    from PIL import Image
    files = image_files("--images", args.images)[:n]
    pre = Path(args.model) / "preprocessor_config.json"
    meta = json.loads(pre.read_text()) if pre.is_file() else {}
    mean = torch.tensor(meta.get("image_mean", [0.5] * 3))[:, None, None]
    std = torch.tensor(meta.get("image_std", [0.5] * 3))[:, None, None]
    px = [torch.from_numpy(np.asarray(Image.open(f).convert("RGB").resize((size, size), Image.BILINEAR),
                                      dtype=np.float32) / 255.0).permute(2, 0, 1) for f in files]
    return image_inputs(model, (torch.stack(px) - mean) / std)


def _run_on_cluster(args: argparse.Namespace, user_texts: list[str] | None) -> int:
    """The diagnosis on Dask: workers load the model; the client merges and writes the report."""
    from ..diagnostics.distributed import diagnose_on_cluster
    t1 = time.perf_counter()
    diag = diagnose_on_cluster(
        args.model, "builtin" if user_texts is None else user_texts, args.scheduler,
        n_workers=None if args.scheduler else args.workers,
        load_kwargs=dict(device=args.device, dtype=args.dtype, device_map=args.device_map),
        torch_threads=args.threads, options=options_of(args))
    return _write(diag, args, time.perf_counter() - t1, 0.0)


def _removal(args: argparse.Namespace) -> str:
    return "none" if args.no_removal else args.removal


#: The flag of each option of :class:`attnspec.DiagnoseOptions` that the command line sets (the others are
#: fixed here: ``threshold``, ``min_tokens``, ``max_tokens``, ``removal_bucket_size``, ``tile_bytes`` and
#: ``reuse_forward`` keep their defaults; ``progress`` is ``--quiet``, ``model_name`` is ``--model``).
FLAG_OF = {"n_texts": "--n-texts", "max_length": "--max-length", "bucket_size": "--bucket-size", "pack": "--pack",
           "n_boot": "--n-boot", "seed": "--seed", "removal": "--removal/--no-removal", "mean_ablation": "--mean-ablation",
           "gradient": "--no-gradient", "removal_positions": "--removal-positions", "removal_texts": "--removal-texts",
           "removal_vocab": "--removal-vocab", "removal_target": "--removal-target", "screen_top": "--screen-top",
           "screen_sample": "--screen-sample", "progress": "--quiet", "model_name": "--model"}


def _option(name: str):
    """argparse ``type=`` of the flag of option ``name``: read and checked by the option's declared allowed values
    (:func:`attnspec.diagnostics.options.parse_flag`), so the command line and the API refuse the same values."""
    def convert(text: str):
        from ..diagnostics.options import parse_flag
        try:
            return parse_flag(name, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{text}: {err}") from None
    convert.__name__ = name
    return convert


def options_of(args: argparse.Namespace, **fixed):
    """The :class:`attnspec.DiagnoseOptions` of the command line (``fixed``: what the caller sets itself); an
    option the declarations refuse is a :class:`CLIError` naming its flag."""
    from ..diagnostics.options import DiagnoseOptions, OptionError
    values = dict(n_texts=args.n_texts, max_length=args.max_length, bucket_size=args.bucket_size,
                  pack=True if args.pack else None, n_boot=args.n_boot, seed=args.seed, removal=_removal(args),
                  mean_ablation=args.mean_ablation, gradient=not args.no_gradient,
                  removal_positions=args.removal_positions, removal_texts=args.removal_texts,
                  removal_vocab=args.removal_vocab, removal_target=args.removal_target, screen_top=args.screen_top,
                  screen_sample=args.screen_sample, progress=not args.quiet, model_name=args.model)
    values.update(fixed)
    try:
        return DiagnoseOptions(**values)
    except OptionError as err:
        raise CLIError(FLAG_OF.get(err.option, err.option), err.value, f"must be {err.allowed}") from None


def _write(diag, args: argparse.Namespace, t_diag: float, t_load: float) -> int:
    """Tables, JSON summary and report into ``--out``; one line of results on stdout."""
    import torch

    diag.summary["load_s"] = round(t_load, 2)
    diag.summary["diagnose_s"] = round(t_diag, 2)
    out = Path(args.out)
    diag.to_csv(out)
    if args.parquet:
        diag.to_parquet(out)
    from ..report import write_report
    write_report(diag, out / "report.html")
    s = diag.summary
    print(f"{s['model']}: {len(diag.heads)} heads in {s['n_layers']} layers, {s['n_texts']} texts / {s['n_tokens']} tokens; "
          f"shared-target selection: {s['n_selective']} selective, {s['n_diffuse']} diffuse, {s['n_sparse']} sparse, "
          f"{s.get('n_undetermined', 0)} undetermined; per-query selection: {s.get('n_query_selective', 0)} selective; "
          f"{s.get('n_dependent_heads', 0)} dependent heads; "
          f"load {t_load:.1f} s, diagnose {t_diag:.1f} s "
          f"({torch.get_num_threads()} threads)")
    print(f"wrote {out}/heads.csv, layers.csv, pairs.csv, summary.json, report.html")
    return 0
