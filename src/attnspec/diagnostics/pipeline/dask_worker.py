"""Worker side of :class:`.dask_executor.DaskExecutor`: the model a worker process loads once (:class:`ModelSpec`),
the wrapper every task runs in (:func:`in_task`: the process' model, threads, the task account) and the
preparation of the texts on a worker. The tasks themselves are those of every executor (:mod:`.tasks`).
Everything here runs in a worker process except :class:`ModelSpec` construction.

Public: :class:`ModelSpec` and :func:`model_loads_in_this_process` (re-exported by
:mod:`attnspec.diagnostics.distributed`); the rest is the executor's protocol.
"""
from __future__ import annotations

import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["ModelSpec", "model_loads_in_this_process"]


# --------------------------------------------------------------------------------------------- model

@dataclass(frozen=True)
class ModelSpec:
    """What a worker needs to load the model itself: ``load_model(name_or_path, **load_kwargs)``.

    Parameters
    ----------
    name_or_path : str
        A built-in name (``'minilm'``, ``'gemma3-270m'``, ...) or a path that exists on every worker.
    load_kwargs : tuple of (str, value) pairs
        Keyword arguments of :func:`attnspec.models.load_model` (``device``, ``dtype``, ``device_map``,
        ``attn_implementation``), sorted; build it with :meth:`of`.

    Examples
    --------
    >>> spec = ModelSpec.of("minilm", {"dtype": "float32"})
    >>> spec
    ModelSpec(name_or_path='minilm', load_kwargs=(('dtype', 'float32'),))
    >>> ModelSpec.of(spec, {"device": "cpu"}).load_kwargs          # merged, sorted
    (('device', 'cpu'), ('dtype', 'float32'))
    >>> ModelSpec.of("minilm", {"dtpye": "float32"})
    Traceback (most recent call last):
    ...
    TypeError: load_kwargs ['dtpye'] are not arguments of attnspec.models.load_model (expected some of [...])
    """

    name_or_path: str
    load_kwargs: tuple = field(default=())

    @classmethod
    def of(cls, model: Any, load_kwargs: dict | None = None) -> "ModelSpec":
        """A spec from a name, a path or a spec; any other object raises :class:`TypeError`."""
        if isinstance(model, ModelSpec):
            return model if not load_kwargs else cls(model.name_or_path, _sorted_items({**dict(model.load_kwargs),
                                                                                       **load_kwargs}))
        if isinstance(model, (str, os.PathLike)):
            return cls(os.fspath(model), _sorted_items(load_kwargs or {}))
        raise TypeError(f"a diagnosis on a cluster loads the model on every worker, so it needs the model's name or "
                        f"path, not a {type(model).__name__} object: pass a built-in name such as 'minilm' or a local "
                        "model directory/GGUF file that every worker can read, with load_kwargs={'dtype': ..., "
                        "'device': ...} for attnspec.models.load_model")

    def load(self) -> tuple[Any, Any]:
        """``(adapter, tokenizer)`` of this process, loaded on first use (see :func:`_loaded`)."""
        return _loaded(self)


def _sorted_items(kw: dict) -> tuple:
    from ...models.loading import load_model
    allowed = set(inspect.signature(load_model).parameters) - {"name_or_path", "verbose"}
    bad = sorted(set(kw) - allowed)
    if bad:
        raise TypeError(f"load_kwargs {bad} are not arguments of attnspec.models.load_model "
                        f"(expected some of {sorted(allowed)})")
    return tuple(sorted(kw.items()))


_MODEL_LOCK = threading.Lock()
_MODEL: dict = {}          # at most one model per process: {spec: (adapter, tokenizer)}
_LOADS: list = []          # specs loaded in this process, in order (see model_loads_in_this_process)


def _loaded(spec: ModelSpec) -> tuple[Any, Any]:
    """The process' model for ``spec``: loaded once, kept until another spec is asked for."""
    with _MODEL_LOCK:
        if spec not in _MODEL:
            from ...models import adapt, load_model
            _MODEL.clear()                      # one model per worker: a new spec replaces the old one
            model, tok = load_model(spec.name_or_path, **dict(spec.load_kwargs))
            model.eval()
            _MODEL[spec] = (adapt(model), tok)
            _LOADS.append(spec)
        return _MODEL[spec]


def model_loads_in_this_process() -> list[ModelSpec]:
    """The specs this process has loaded, in order (a worker loads a model once: run it with
    ``client.run(model_loads_in_this_process)`` to check).

    Returns
    -------
    list of ModelSpec

    Examples
    --------
    >>> spec = ModelSpec.of("minilm")
    >>> adapter, tokenizer = spec.load()
    >>> spec.load()[0] is adapter, model_loads_in_this_process()[-1] == spec   # loaded once, then kept
    (True, True)
    """
    return list(_LOADS)


# --------------------------------------------------------------------------------------- worker side

#: One task at a time uses the process' model: the diagnosis hooks into the model's modules (recording,
#: ablation, gates), so two threads running tasks on it at once would see each other's hooks.
_MODEL_USE = threading.Lock()


_TIMES: dict = {}          # (run id, step) -> [tasks, wall seconds, CPU seconds] of this process' tasks
_TIMES_LOCK = threading.Lock()


def in_task(spec: ModelSpec, torch_threads: int | None, tag: tuple, fn: Callable, *args, **kwargs):
    """Run ``fn(adapter, *args, **kwargs)`` with the process' model, single-threaded BLAS for numpy
    (as :func:`attnspec.diagnose`) and ``torch_threads`` torch threads when given (at most this
    machine's cores; the process' count is restored afterwards); the task's wall and CPU time are
    added to this process' account under ``tag`` (``(run id, step)``)."""
    import torch

    from .resources import _one_blas_thread
    t0, c0 = time.perf_counter(), time.process_time()
    old = torch.get_num_threads()
    if torch_threads:
        torch.set_num_threads(min(int(torch_threads), os.cpu_count() or 1))
    try:
        adapter, _ = spec.load()
        with _MODEL_USE, _one_blas_thread():
            out = fn(adapter, *args, **kwargs)
    finally:
        torch.set_num_threads(old)
    with _TIMES_LOCK:
        acc = _TIMES.setdefault(tag, [0, 0.0, 0.0])
        acc[0], acc[1], acc[2] = acc[0] + 1, acc[1] + time.perf_counter() - t0, acc[2] + time.process_time() - c0
    return out


def pop_times(run_id: str) -> dict:
    """This process' task account of run ``run_id`` (removed): ``step -> [tasks, wall s, CPU s]``."""
    with _TIMES_LOCK:
        return {tag[1]: _TIMES.pop(tag) for tag in [t for t in _TIMES if t[0] == run_id]}


@dataclass(frozen=True)
class Refusal:
    """What :func:`prepare_task` returns for inputs that step 1 refuses (its ``ValueError``'s message): the client
    raises it, before any other task, and the worker logs no failed task."""

    message: str


def prepare_task(spec: ModelSpec, texts, opts):
    """Step 1 on a worker (:func:`.run.prepare`, with the worker's model and tokenizer): the client needs
    neither. Inputs it refuses (texts longer than the model's positions, :func:`..checks.check_positions`; a text
    policy's refusal) come back as a :class:`Refusal`."""
    from .run import prepare
    adapter, tok = spec.load()
    try:
        return prepare(adapter, tok, texts, opts)
    except ValueError as e:
        return Refusal(str(e))


def load_only(adapter) -> None:
    """A task that only makes its worker load the model (see :meth:`.dask_executor.DaskExecutor.warm_up`)."""
