"""Worker side of :mod:`.distributed`: the model a worker process loads once (:class:`ModelSpec`), the
worker's forward caches and task accounts, and the task functions of each step (each a pure function
of its batches, the merged fits and the seed, so that a task rerun after a worker's death gives the
same result). Everything here runs in a worker process except :class:`ModelSpec` construction.

Public: :class:`ModelSpec` and :func:`model_loads_in_this_process` (re-exported by :mod:`.distributed`).
The task functions and accounts (``in_task``, ``prepare``, ``fit_task``, ...) are the worker side of
:mod:`.distributed`'s protocol, called only by it, and are not part of the API.
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
    from ..models.loading import load_model
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
            from ..models import adapt, load_model
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

_CACHES: dict = {}         # run id -> this worker's ForwardCache of the groups it fitted
_CACHE_LOCK = threading.Lock()
#: One task at a time uses the process' model: the diagnosis hooks into the model's modules (recording,
#: ablation, gates), so two threads running tasks on it at once would see each other's hooks.
_MODEL_USE = threading.Lock()


class _LockedCache:
    """A :class:`~.steps.forward_cache.ForwardCache` safe for the threads of one worker."""

    def __init__(self, cache):
        self.cache, self.lock = cache, threading.Lock()

    def get(self, key):
        with self.lock:
            return self.cache.get(key)

    def put(self, key, records) -> bool:
        with self.lock:
            return self.cache.put(key, records)

    def has(self, key) -> bool:
        with self.lock:
            return key in self.cache.paths

    def close(self) -> None:
        with self.lock:
            self.cache.close()


def _here() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except ValueError:
        return ""


def _worker_cache(run_id: str, adapter, reuse_forward: bool | None, create: bool):
    """This worker's forward cache of run ``run_id`` (created on demand by the fit tasks), or ``None``."""
    from .steps import forward_cache
    if not forward_cache.wanted(adapter, reuse_forward):
        return None
    with _CACHE_LOCK:
        if run_id not in _CACHES and create:
            try:
                from distributed import get_worker
                directory = get_worker().local_directory    # removed with the worker's scratch space
            except ValueError:
                directory = None
            _CACHES[run_id] = _LockedCache(forward_cache.ForwardCache(directory=directory))
        return _CACHES.get(run_id)


def drop_cache(run_id: str) -> bool:
    """Remove this worker's forward cache of run ``run_id`` (run on every worker at the end)."""
    with _CACHE_LOCK:
        cache = _CACHES.pop(run_id, None)
    if cache is not None:
        cache.close()
    return cache is not None


_TIMES: dict = {}          # (run id, step) -> [tasks, wall seconds, CPU seconds] of this process' tasks
_TIMES_LOCK = threading.Lock()


def in_task(spec: ModelSpec, torch_threads: int | None, tag: tuple, fn: Callable, *args, **kwargs):
    """Run ``fn(adapter, *args, **kwargs)`` with the process' model, single-threaded BLAS for numpy
    (as :func:`attnspec.diagnose`) and ``torch_threads`` torch threads when given (at most this
    machine's cores; the process' count is restored afterwards); the task's wall and CPU time are
    added to this process' account under ``tag`` (``(run id, step)``)."""
    import torch

    from .api import _one_blas_thread
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


def prepare(spec: ModelSpec, texts, opts: dict) -> dict:
    """Resolve and length-bucket the texts as a one-process diagnosis does (on a worker: the tokenizer
    is the model's), and what the client needs to know of the model (heads per layer, removal mode)."""
    from .api import make_shards
    from .steps.removal import resolve_mode
    from .steps.removal_plan import check_removal_texts
    from .texts import resolve_texts
    adapter, tok = spec.load()
    check_removal_texts(opts["removal_texts"], resolve_mode(opts["removal"], adapter))   # before any work
    texts, source = resolve_texts(texts, tok, adapter.kind, opts["n_texts"], opts["max_length"], opts["pack"])
    shard = make_shards(tok, texts, 1, opts["max_length"], opts["bucket_size"], opts["removal_bucket_size"],
                        **accepted(make_shards, opts["extra"]))[0]
    return {"batches": shard.batches, "removal_batches": shard.removal_batches, "source": source,
            "model_name": opts["model_name"] or type(adapter.model).__name__,
            "n_heads": [s.n_heads for s in adapter.sites], "mode": resolve_mode(opts["removal"], adapter)}


def fit_task(adapter, run_id: str, batches: list, opts: dict) -> tuple:
    from .api import fit_pass
    cache = _worker_cache(run_id, adapter, opts["reuse_forward"], create=True)
    sums, masks, corpus = fit_pass(adapter, batches, opts["tile_bytes"], False, cache, opts["seed"], opts["n_boot"])
    return sums, masks, corpus, _here()


def null_task(adapter, fit_part: tuple, fits: list, opts: dict) -> list:
    from .steps.collect import compute_dtype
    from .steps.fit import null_sums           # layers in parallel, each the serial pass' sums bit for bit
    return null_sums(adapter.sites, fit_part[1], fits, opts["seed"], opts["tile_bytes"], compute_dtype(adapter),
                     opts["n_boot"])


def spectra_task(adapter, run_id: str, batches: list, fits: list, null_fits: list, powers: list, opts: dict,
                 grams: list | None = None) -> tuple:
    from .api import spectra_pass
    cache = _worker_cache(run_id, adapter, opts["reuse_forward"], create=False)
    hit = cache is not None and all(cache.has(tuple(b["order"])) for b in batches)
    out = spectra_pass(adapter, batches, fits, null_fits, powers, opts["seed"], opts["tile_bytes"], False, cache,
                       grams, opts["n_boot"])
    return out, hit


def first_order_task(adapter, grad_batches: list, opts: dict):
    from .api import first_order_pass
    return first_order_pass(adapter, grad_batches, opts["seed"], n_boot=opts["n_boot"],
                            **accepted(first_order_pass, opts["extra"]))


def exact_task(adapter, rm_batches: list, means: list, heads_of: dict | None, positions: int | None, opts: dict,
               first_order: bool = False):
    from .api import exact_pass
    return exact_pass(adapter, rm_batches, mean_ablation=opts["mean_ablation"], means=means,
                      max_tokens=opts["max_tokens"], seed=opts["seed"], positions=positions,
                      heads_of=heads_of, n_boot=opts["n_boot"], first_order=first_order,
                      **accepted(exact_pass, opts["extra"]))


def tables_task(adapter, res, opts: dict, source: str, model_name: str, timings: dict) -> tuple:
    from .api import tables_and_summary
    kw = dict(mean_ablation=opts["mean_ablation"], gradient=opts["gradient"], threshold=opts["threshold"],
              min_tokens=opts["min_tokens"], timings=timings, source=source, max_length=opts["max_length"],
              bucket_size=opts["bucket_size"], seed=opts["seed"], model_name=model_name)
    kw.update(accepted(tables_and_summary, opts["extra"]))
    heads, layers, pairs, summary = tables_and_summary(adapter, res, **kw)
    store = {i: {"actual": sp.of_layer("act"), "gaussian_equivalent": sp.of_layer("ge"), "free_sum": sp.of_layer("free")}
             for i, sp in enumerate(res.spectra)}
    return heads, layers, pairs, summary, store


def accepted(fn: Callable, extra: dict) -> dict:
    """The entries of ``extra`` that are keyword arguments of ``fn``."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in extra.items() if k in params}


def merged_grams(parts: list) -> list:
    """The merged head-pair Gram sums per layer from the fit tasks' results (:func:`fit_task`)."""
    from .api import merge_parts
    return [s.gram for s in merge_parts([p[0] for p in parts])]


def load_only(adapter) -> None:
    """A task that only makes its worker load the model (see :func:`.distributed._warm_up`)."""
