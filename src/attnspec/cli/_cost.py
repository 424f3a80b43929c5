"""Cost of a simulation before it runs: memory and rough time, refused over the limits, and the number
formats of these messages (bytes, seconds, non-finite numbers).
"""
from __future__ import annotations

import math
import os
from typing import Sequence

from ._errors import CLIError

__all__ = ["available_memory", "estimate_simulation_cost", "check_simulation_cost", "size_flags", "fmt_bytes",
           "fmt_seconds", "fmt_number"]


def available_memory() -> int:
    """Bytes of memory available to a new computation (psutil, else ``os.sysconf``).

    Returns
    -------
    int
        Available (not total) physical memory in bytes; ``2**62`` when neither source answers.

    Examples
    --------
    >>> available_memory() > 0
    True
    """
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

    Parameters
    ----------
    config : MHSAConfig
        The configuration to simulate.
    draws : int
        Monte-Carlo draws.
    models : sequence of str
        The finite models simulated (``"softmax"``, ``"surrogate"``).

    Returns
    -------
    (int, float)
        Bytes and seconds.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> nbytes, secs = estimate_simulation_cost(MHSAConfig.uniform(32, 64, heads=2), draws=2)
    >>> fmt_bytes(nbytes), secs < 0.01
    ('388 KiB', True)
    """
    mem, t = _cost_terms(config, draws, models)
    return int(sum(mem.values())), float(sum(t.values()))


def fmt_bytes(n: float) -> str:
    """A byte count in binary units with three significant digits (``B`` as an integer).

    Examples
    --------
    >>> fmt_bytes(512), fmt_bytes(1536), fmt_bytes(3 * 2**30)
    ('512 B', '1.5 KiB', '3 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def fmt_seconds(s: float) -> str:
    """A duration in the unit a reader expects: s below 2 min, min below 2 h, h below 3 days, days below 3 years.

    Examples
    --------
    >>> fmt_seconds(90), fmt_seconds(7200), fmt_seconds(1e9)
    ('90 s', '2 h', '31.7 years')
    """
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
    """``format(x, spec)``, or ``'overflow'`` / ``'nan'`` for a non-finite number (never ``inf``).

    Examples
    --------
    >>> fmt_number(1 / 3), fmt_number(float("inf")), fmt_number(float("nan")), fmt_number(2.5, ".2f")
    ('0.333333', 'overflow', 'nan', '2.50')
    """
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
    """The size flags of a configuration, for messages: ``--seq-len L --d-model D --heads H ...``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> size_flags(MHSAConfig.uniform(32, 64, heads=2), draws=2)
    '--seq-len 32 --d-model 64 --heads 2 --d-qk 32 --d-v 32 --d-out 64 --draws 2'
    """
    parts = [f"--seq-len {config.seq_len}", f"--d-model {config.d_model}", f"--heads {config.n_heads}"]
    for flag, widths in (("--d-qk", config.d_qk), ("--d-v", config.d_v)):
        parts.append(f"{flag} {widths[0]}" if len(set(widths)) == 1 else f"{flag} {','.join(map(str, widths))}"
                     if len(widths) <= 8 else f"{flag} {widths[0]},...")
    parts += [f"--d-out {config.d_out}", f"--draws {draws}"]
    return " ".join(parts)


def check_simulation_cost(config, draws: int, time_limit: float | None, *, models=("softmax", "surrogate"),
                          memory_limit: int | None = None, where: str = "", workers: int = 1) -> tuple[int, float]:
    """Refuse (:class:`CLIError`) a simulation whose estimated memory exceeds the available memory
    (divided among ``workers``) or whose rough time exceeds ``time_limit`` seconds.

    Parameters
    ----------
    config, draws, models : as in :func:`estimate_simulation_cost`.
    time_limit : float or None
        Seconds allowed (None: no time limit).
    memory_limit : int, optional
        Bytes allowed (default: :func:`available_memory` divided by ``workers``).
    where : str
        Prefix of the flags named in the error (e.g. the sweep point).
    workers : int
        Processes sharing the memory.

    Returns
    -------
    (int, float)
        The estimate of :func:`estimate_simulation_cost` when it fits.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> check_simulation_cost(MHSAConfig.uniform(32, 64, heads=2), 2, 60.0)[0]
    397664
    >>> check_simulation_cost(MHSAConfig.uniform(20000, 20000, heads=4), 1, 60.0, memory_limit=2**30)
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --seq-len 20000 ... --draws 1: would need about 44.7 GiB of memory (...) ...
    """
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
