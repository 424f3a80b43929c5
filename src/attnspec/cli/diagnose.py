"""``attnspec diagnose``: per-head diagnosis of a trained model; writes tables, JSON and an HTML report."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import (CLIError, check_apart, check_cores, check_output_dir, output_dir, output_lock, positive_int,
                      read_text_lines)
from ._options import HelpFormatter
from ._registry import EEG_SUFFIXES, check_eeg_file, check_model, image_files, zoo_model_and_inputs

ORDER = 30

#: Default number of trials for attnspec.zoo checkpoints (texts: attnspec.diagnostics.pipeline.texts.DEFAULT_N_TEXTS).
DEFAULT_ZOO_TRIALS = 32
#: Memory of one bootstrap replicate per head (measured on a tiny model: 4 kB per replicate for 4 heads); the
#: largest --n-boot is declared with the option (attnspec.diagnostics.options.MAX_N_BOOT).
N_BOOT_BYTES_PER_HEAD = 1_000
#: Seconds to wait for a --scheduler to answer the Dask handshake, then for its first worker.
SCHEDULER_TIMEOUT_S = 10
WORKER_TIMEOUT_S = 60
#: Every file `attnspec diagnose` writes into --out (files of an earlier run not written again are removed).
OUTPUT_FILES = ("heads.csv", "layers.csv", "pairs.csv", "roles.csv", "heads.parquet", "layers.parquet",
                "pairs.parquet", "roles.parquet", "replicates.npz", "report.html", "summary.json")
#: Families whose activations overflow float16 (the diagnosis would see inf/NaN attention inputs).
FLOAT16_OVERFLOW = ("gemma3", "gemma3_text", "gemma2")


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
                   help="'minilm', 'mpnet', 'gemma3-270m', 'qwen2.5-0.5b', 'smollm2-135m', a local safetensors/GGUF "
                        "model path, or an attnspec.zoo checkpoint directory")
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
    p.add_argument("--out", required=True, type=output_dir,
                   help="output directory (created if missing; files of an earlier run there are replaced)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads, 1 up to the cores of this machine (default: torch's choice)")
    p.add_argument("--bucket-size", type=_option("bucket_size"), default=16, help="texts per length bucket, >= 1")
    p.add_argument("--spectra-texts", type=_option("spectra_texts"), default="auto",
                   help="texts whose output spectra are taken (spectral and selection columns; the fits and the "
                        "dependence statistics use every text): a seeded sample of N >= 8, 'all', or 'auto' (default): "
                        "32 texts and at least 2048 eigenvalues a head spectrum, doubled until the selection verdicts "
                        "are predicted to agree with all texts' on 95%% of heads")
    p.add_argument("--removal-spectra", type=_option("removal_spectra"), default="ritz",
                   help="the layer's spectrum without each head (removal_spec_shift): 'ritz' (default: Rayleigh-Ritz "
                        "values on blocks of 32 of the layer's eigenvectors, one eigendecomposition a text) or 'exact' "
                        "(one a head and text)")
    _add_removal_options(p)
    p.add_argument("--no-removal", action="store_true", help="same as --removal none")
    p.add_argument("--n-boot", type=_option("n_boot"), default=200,
                   help="Poisson bootstrap replicates over texts for the 95%% intervals and the verdict tests, "
                        "0..10000 (default 200; 0 to 9, or fewer than 8 texts: no intervals, every verdict "
                        "undetermined; each replicate keeps about 1 kB per head)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=positive_int, default=None,
                       help="run on a local Dask cluster of this many worker processes (1 thread each), 1 up to "
                            "the cores of this machine (more: start a cluster and use --scheduler); docs/cluster.md")
    where.add_argument("--scheduler", default=None,
                       help="run on an existing Dask cluster at this scheduler address (e.g. tcp://10.0.0.5:8786); "
                            "every worker must be able to load --model. Refused when no Dask scheduler answers "
                            f"within {SCHEDULER_TIMEOUT_S} s or it has no worker within {WORKER_TIMEOUT_S} s")
    p.add_argument("--no-gradient", action="store_true", help="skip Michel et al. gradient importance")
    p.add_argument("--mean-ablation", action="store_true", help="also remove heads by mean ablation")
    p.add_argument("--seed", type=_option("seed"), default=0,
                   help="seed of the resampling (bootstrap weights, seeded samples of texts), 0..2**63 - 2")
    p.add_argument("--reference-seed", type=_option("reference_seed"), default=0,
                   help="seed of the reference draws that define the spectral scores (Gaussian equivalents' noise, null "
                        "heads, free rotation), 0..2**63 - 2; fixed apart from --seed so that reruns agree, their "
                        "variance inside every interval")
    p.add_argument("--parquet", action="store_true", help="also write parquet tables")
    p.add_argument("--quiet", action="store_true", help="no progress bars (they show texts/s and the ETA of each pass)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="cpu",
                   help="where the model runs ('auto': CUDA, else MPS, else CPU)")
    p.add_argument("--statistics-device", type=_option("statistics_device"), default="cpu",
                   help="where the statistics run: 'cpu' (default), or 'model' (the model's device, float64 sums "
                        "there; MPS has no float64: the CPU there); equal up to floating-point rounding")
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
    n = args.n_texts if args.n_texts is not None else (len(texts) if texts is not None else None)
    if isinstance(args.removal_texts, int) and n is not None and args.removal_texts > n:
        raise CLIError("--removal-texts", args.removal_texts, f"exceeds the {n} texts diagnosed; allowed 1..{n} "
                                                               "or 'auto'")
    check_output_dir("--out", args.out)
    check_apart("--out", args.out, [("--model", args.model), ("--texts", None if args.texts == "builtin" else args.texts),
                                    ("--images", None if args.images in (None, "builtin") else args.images),
                                    ("--inputs", args.inputs)], OUTPUT_FILES)
    _check_before_loading(args, info)
    return info, texts


def _config_json(info: dict) -> dict:
    import json
    cfg = info.get("config")
    if cfg is None:
        return {}
    try:
        data = json.loads(Path(cfg).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _n_heads(config: dict) -> int | None:
    """Attention heads of the whole model by its config.json (layers x heads), None when it does not say."""
    for table in (config, config.get("text_config") or {}):
        if not isinstance(table, dict):
            continue
        layers = next((table[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(table.get(k), int)),
                      None)
        heads = next((table[k] for k in ("num_attention_heads", "n_head", "num_heads") if isinstance(table.get(k), int)),
                     None)
        if layers and heads:
            return layers * heads
    return None


def _check_before_loading(args: argparse.Namespace, info: dict) -> None:
    """Resources, device, dtype and model family: every check the flags and config.json allow before loading."""
    from ._cost import available_memory, fmt_bytes
    config = _config_json(info)
    check_cores("--threads", args.threads, "torch threads")
    if args.workers is not None:
        check_cores("--workers", args.workers, "worker processes",
                    "; for more workers start a Dask cluster and pass its address to --scheduler")
    heads = _n_heads(config)
    n_boot = args.n_boot or 0
    need = n_boot * (heads or 0) * N_BOOT_BYTES_PER_HEAD
    what = (f"; {n_boot} replicates of this model's {heads} heads would hold about {fmt_bytes(need)}" if heads else "")
    if need > available_memory() // 2:
        raise CLIError("--n-boot", n_boot, f"needs more than half the available memory ({fmt_bytes(available_memory())})"
                                           f"{what}; use fewer replicates")
    if info["kind"] == "zoo":
        _check_zoo_inputs(args)
        return
    if args.device in ("cuda", "mps"):
        import torch
        if args.device == "cuda" and not torch.cuda.is_available():
            raise CLIError("--device", "cuda", "no CUDA device is available here; use --device cpu or auto")
        mps = getattr(torch.backends, "mps", None)
        if args.device == "mps" and not (mps is not None and mps.is_available()):
            raise CLIError("--device", "mps", "no MPS device is available here; use --device cpu or auto")
    family = config.get("model_type") or (config.get("text_config") or {}).get("model_type")
    if args.model in ("gemma3-270m", "gemma3"):
        family = "gemma3_text"
    if args.dtype == "float16" and family in FLOAT16_OVERFLOW:
        raise CLIError("--dtype", "float16", f"the activations of {family} models exceed float16's range (65504) and "
                                             "the attention inputs overflow to inf; use --dtype bfloat16 (float32's "
                                             "range) or float32")


def _check_zoo_inputs(args: argparse.Namespace) -> None:
    """A zoo checkpoint diagnosed on its simulated trials needs the simulation's metadata (else --inputs)."""
    import json
    if args.inputs is not None:
        return
    path = Path(args.model).expanduser()
    doc_file = path if path.is_file() else path / "attnspec_zoo.json"
    try:
        doc = json.loads(doc_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CLIError("--model", args.model, f"{doc_file.name} is not a readable JSON file ({e})") from None
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict) or "sim" not in meta:
        raise CLIError("--inputs", None, f"{args.model} has no simulation metadata (meta['sim']) to regenerate its "
                                         "held-out trials: give the EEG recording to diagnose with --inputs FILE "
                                         "(.fif, .fif.gz, .edf or .gdf)")


def run(args: argparse.Namespace) -> int:
    info, user_texts = check_args(args)
    options_of(args)                      # every option checked against its declaration before the model loads
    with output_lock("--out", args.out):  # a second run into the same --out is refused, never interleaved
        return _run(args, info, user_texts)


def _run(args: argparse.Namespace, info: dict, user_texts: list[str] | None) -> int:
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
        model, X = zoo_model_and_inputs(args.model, args.n_texts or DEFAULT_ZOO_TRIALS, args.inputs,
                                        asked=args.n_texts is not None)
        t_load = time.perf_counter() - t0
        t1 = time.perf_counter()
        with _numerics(args):
            diag = diagnose(model, X, options=options_of(args, n_texts=None, max_length=128, bucket_size=16,
                                                         pack=None))
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
        images = _images(args, model)
        with _numerics(args):
            diag = diagnose(adapter, images, options=options_of(args, n_texts=None, max_length=128, pack=None))
        diag.summary["images"] = args.images or "builtin"
        return _write(diag, args, time.perf_counter() - t1, t_load)
    causal = adapter.kind == "causal-lm"
    # the one text policy of the library: built-in corpus (packed for causal LMs or --pack) or the file's lines
    texts = "builtin" if user_texts is None else user_texts
    t1 = time.perf_counter()
    with _numerics(args):
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

    import torch

    from ..models import generated_images, image_inputs
    cfg = model.config
    size = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
    n = args.n_texts or DEFAULT_N_IMAGES
    if args.images in (None, "builtin"):
        return image_inputs(model, generated_images(n, size, getattr(cfg, "num_channels", 3), seed=args.seed))
    files = image_files("--images", args.images)
    if args.n_texts is not None and args.n_texts > len(files):
        raise CLIError("--n-texts", args.n_texts, f"exceeds the {len(files)} images of {args.images}; "
                                                  f"allowed 1..{len(files)}")
    files = files[:n]
    pre = Path(args.model) / "preprocessor_config.json"
    meta = json.loads(pre.read_text()) if pre.is_file() else {}
    mean = torch.tensor(meta.get("image_mean", [0.5] * 3))[:, None, None]
    std = torch.tensor(meta.get("image_std", [0.5] * 3))[:, None, None]
    px = [torch.from_numpy(_read_image(f, size)).permute(2, 0, 1) for f in files]
    return image_inputs(model, (torch.stack(px) - mean) / std)


def _read_image(file: Path, size: int):
    """One image as float32 RGB in [0, 1], resized to ``size`` x ``size``; a file PIL cannot read (truncated,
    not an image, a decompression bomb) is a :class:`CLIError` naming it."""
    import numpy as np
    from PIL import Image
    try:
        with Image.open(file) as im:
            rgb = im.convert("RGB").resize((size, size), Image.BILINEAR)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise CLIError("--images", file, f"cannot be read as an image ({str(e) or type(e).__name__})") from None
    return np.asarray(rgb, dtype=np.float32) / 255.0


class _numerics:
    """Context of a diagnosis: an eigendecomposition that fails on non-finite attention inputs (an overflow in a
    reduced dtype) is a user error naming --dtype, not a traceback."""

    def __init__(self, args: argparse.Namespace):
        self.args = args

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        import numpy as np
        import torch
        if exc is None or not isinstance(exc, (torch.linalg.LinAlgError, np.linalg.LinAlgError)):
            return False
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        if self.args.dtype != "float32":
            raise CLIError("--dtype", self.args.dtype, f"the model's attention inputs are not finite in "
                                                       f"{self.args.dtype} ({first}): its activations overflow; use "
                                                       "--dtype float32 (or bfloat16)") from None
        raise CLIError("--model", self.args.model, f"the model's attention inputs are not finite ({first}); check "
                                                   "its weights") from None


def _run_on_cluster(args: argparse.Namespace, user_texts: list[str] | None) -> int:
    """The diagnosis on Dask: workers load the model; the client merges and writes the report."""
    from ..diagnostics.distributed import diagnose_on_cluster
    t1 = time.perf_counter()
    client = _connect(args.scheduler) if args.scheduler else None
    try:
        with _numerics(args):
            diag = diagnose_on_cluster(
                args.model, "builtin" if user_texts is None else user_texts, client,
                n_workers=None if args.scheduler else args.workers,
                load_kwargs=dict(device=args.device, dtype=args.dtype, device_map=args.device_map),
                torch_threads=args.threads, options=options_of(args))
    finally:
        if client is not None:
            client.close()
    return _write(diag, args, time.perf_counter() - t1, 0.0)


def _probe(address: str) -> None:
    """A ``tcp://`` scheduler (or ``host:port``) must accept a connection and greet first, as a Dask server does (its
    handshake is sent on accept): a server that says nothing for :data:`SCHEDULER_TIMEOUT_S` (an HTTP server waits
    for a request; the Dask client would wait forever) or closes the connection is refused."""
    import socket
    from urllib.parse import urlsplit
    if "://" in address and not address.startswith("tcp://"):
        return                      # tls://, ucx://, inproc://: left to the Dask client's own timeout
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise CLIError("--scheduler", address, "must be a Dask scheduler address such as tcp://10.0.0.5:8786")
    try:
        with socket.create_connection((host, port), timeout=SCHEDULER_TIMEOUT_S) as sock:
            sock.settimeout(SCHEDULER_TIMEOUT_S)
            first = sock.recv(8)
    except socket.timeout:
        first = None
    except OSError as e:
        raise CLIError("--scheduler", address, f"cannot connect ({e.strerror or e}); give the address of a running "
                                               "Dask scheduler, e.g. tcp://10.0.0.5:8786") from None
    if not first or first[:4] in (b"HTTP", b"SSH-"):
        raise CLIError("--scheduler", address, f"no Dask scheduler answered there within {SCHEDULER_TIMEOUT_S} s (the "
                                               "server there does not speak the Dask protocol); give the address of "
                                               "a running Dask scheduler, e.g. tcp://10.0.0.5:8786")


def _connect(address: str):
    """A client of the Dask scheduler at ``address`` with one worker at least, or a :class:`CLIError` after
    :data:`SCHEDULER_TIMEOUT_S` (no answer, or not a Dask scheduler) or :data:`WORKER_TIMEOUT_S` (no worker)."""
    import logging

    _probe(address)
    from distributed import Client
    for name in ("distributed", "distributed.client", "distributed.comm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        client = Client(address, timeout=SCHEDULER_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError, TypeError) as e:
        why = (str(e).splitlines() or [""])[0][:200] or type(e).__name__
        raise CLIError("--scheduler", address, f"no Dask scheduler answered there within {SCHEDULER_TIMEOUT_S} s "
                                               f"({why}); give the address of a running Dask scheduler, e.g. "
                                               "tcp://10.0.0.5:8786") from None
    try:
        client.wait_for_workers(1, timeout=WORKER_TIMEOUT_S)
    except (OSError, TimeoutError) as e:
        client.close()
        raise CLIError("--scheduler", address, f"the scheduler has no worker after {WORKER_TIMEOUT_S} s "
                                               f"({type(e).__name__}); start workers with dask worker {address}") from None
    return client


def _removal(args: argparse.Namespace) -> str:
    return "none" if args.no_removal else args.removal


#: The flag of each option of :class:`attnspec.DiagnoseOptions` that the command line sets (the others are
#: fixed here: ``threshold``, ``min_tokens``, ``max_tokens``, ``removal_bucket_size``, ``tile_bytes`` and
#: ``reuse_forward`` keep their defaults; ``progress`` is ``--quiet``, ``model_name`` is ``--model``).
FLAG_OF = {"n_texts": "--n-texts", "max_length": "--max-length", "bucket_size": "--bucket-size", "pack": "--pack",
           "spectra_texts": "--spectra-texts", "statistics_device": "--statistics-device",
           "removal_spectra": "--removal-spectra",
           "n_boot": "--n-boot", "seed": "--seed", "reference_seed": "--reference-seed", "removal": "--removal/--no-removal",
           "mean_ablation": "--mean-ablation",
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
                  pack=True if args.pack else None, spectra_texts=args.spectra_texts, n_boot=args.n_boot,
                  seed=args.seed, reference_seed=args.reference_seed, removal=_removal(args),
                  mean_ablation=args.mean_ablation, gradient=not args.no_gradient,
                  removal_positions=args.removal_positions, removal_texts=args.removal_texts,
                  removal_vocab=args.removal_vocab, removal_target=args.removal_target, screen_top=args.screen_top,
                  screen_sample=args.screen_sample, progress=not args.quiet, model_name=args.model,
                  statistics_device=args.statistics_device, removal_spectra=args.removal_spectra)
    values.update(fixed)
    try:
        return DiagnoseOptions(**values)
    except OptionError as err:
        raise CLIError(FLAG_OF.get(err.option, err.option), err.value, f"must be {err.allowed}") from None


def _write(diag, args: argparse.Namespace, t_diag: float, t_load: float) -> int:
    """Tables, JSON summary and report into ``--out``; one line of results on stdout."""
    import torch

    from ..atomicio import StagedFiles
    from ..report import render_report

    diag.summary["load_s"] = round(t_load, 2)
    diag.summary["diagnose_s"] = round(t_diag, 2)
    out = Path(args.out)
    # every file to a temporary name in --out, renamed into place once all are written, summary.json last; files
    # of an earlier run not written now (heads.parquet without --parquet) are removed
    with StagedFiles(out, last="summary.json", stale=OUTPUT_FILES) as st:
        diag.write_tables(st, "csv")
        if args.parquet:
            diag.write_tables(st, "parquet")
        st.path("report.html").write_text(render_report(diag), encoding="utf-8")
        st.path("summary.json").write_text(diag.summary_json(), encoding="utf-8")
    s = diag.summary
    print(f"{s['model']}: {len(diag.heads)} heads in {s['n_layers']} layers, {s['n_texts']} texts / {s['n_tokens']} tokens; "
          f"shared-target selection: {s['n_selective']} selective, {s['n_diffuse']} diffuse, {s['n_sparse']} sparse, "
          f"{s.get('n_undetermined', 0)} undetermined; per-query selection: {s.get('n_query_selective', 0)} selective; "
          f"{s.get('n_dependent_heads', 0)} dependent heads; "
          f"{s.get('roles', {}).get('n_heads_with_roles', 0)} heads with a role; "
          f"load {t_load:.1f} s, diagnose {t_diag:.1f} s "
          f"({torch.get_num_threads()} threads)")
    if s.get("n_duplicate_texts"):
        print(f"note: {s['n_duplicate_texts']} texts of {args.texts} repeat an earlier line and were dropped (a repeated "
              "text is not independent evidence)")
    print(f"wrote {out}/heads.csv, layers.csv, pairs.csv, " + ("roles.csv, " if len(diag.roles) else "")
          + "summary.json, report.html")
    return 0
