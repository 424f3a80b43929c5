"""The tasks of a diagnosis, the same for every executor (:mod:`.executor`): each is a pure function of the
model, its batches, the merged results it needs, the options and the seed, so that its result does not
depend on where it runs, and a task rerun after a worker's death gives the same result.

A task's first argument is the model's adapter (the executor supplies it: the caller's model in this
process, the worker's own copy on a cluster). The first forward pass' records are kept per run and per
process (:func:`run_cache`): the fit tasks write them, the spectra tasks of the same process read them,
:func:`drop_run_cache` removes them.
"""
from __future__ import annotations

import sys
import threading

from ..options import DiagnoseOptions
from ..statistics.devices import statistics_device
from . import forward_cache
from .collect import compute_dtype
from .fit import null_sums
from .passes import exact_pass, first_order_pass, fit_pass, spectra_pass
from .shards import merge_parts

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)

_CACHES: dict = {}         # run id -> this process' ForwardCache of the batches it fitted
_CACHE_LOCK = threading.Lock()


class _LockedCache:
    """A :class:`.forward_cache.ForwardCache` safe for the threads of one process."""

    def __init__(self, cache: forward_cache.ForwardCache):
        self.cache, self.lock = cache, threading.Lock()

    def get(self, key):
        with self.lock:
            return self.cache.get(key)

    def put(self, key, records) -> bool:
        with self.lock:
            return self.cache.put(key, records)

    def writer(self, key):
        with self.lock:
            return self.cache.writer(key)

    def finish(self, key, writer, n: int) -> list:
        with self.lock:
            return self.cache.finish(key, writer, n)

    def has(self, key) -> bool:
        with self.lock:
            return key in self.cache.paths

    def close(self) -> None:
        with self.lock:
            self.cache.close()


def here() -> str:
    """The address of the Dask worker running this task, ``''`` outside a worker (a process that never imported
    ``distributed`` runs none: the check does not import it, which costs a local diagnosis 0.2 s)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return ""
    try:
        return distributed.get_worker().address
    except (AttributeError, ValueError):
        return ""


def run_cache(run_id: str, adapter, reuse_forward: bool | None, create: bool):
    """This process' forward cache of run ``run_id`` (created on demand by the fit tasks, in the worker's
    scratch directory on a cluster), or ``None`` when the run keeps none (:func:`.forward_cache.wanted`)."""
    if not forward_cache.wanted(adapter, reuse_forward):
        return None
    with _CACHE_LOCK:
        if run_id not in _CACHES and create:
            directory = None
            if here():
                from distributed import get_worker
                directory = get_worker().local_directory    # removed with the worker's scratch space
                forward_cache.remove_stale_beside(directory)   # what killed workers left beside it
            _CACHES[run_id] = _LockedCache(forward_cache.ForwardCache(directory=directory))
        return _CACHES.get(run_id)


def drop_run_cache(run_id: str) -> bool:
    """Remove this process' forward cache of run ``run_id``; whether there was one."""
    with _CACHE_LOCK:
        cache = _CACHES.pop(run_id, None)
    if cache is not None:
        cache.close()
    return cache is not None


def fit_task(adapter, run_id: str, batches: list, opts: DiagnoseOptions, progress: bool = False) -> tuple:
    """Step 2 on ``batches``: ``(fit sums, kept masks, corpus counts, worker address)``."""
    cache = run_cache(run_id, adapter, opts.reuse_forward, create=True)
    sums, masks, corpus = fit_pass(adapter, batches, opts.tile_bytes, progress, cache, opts.seed, opts.n_boot,
                                   statistics_device(opts.statistics_device, adapter.model), opts.reference_seed)
    return sums, masks, corpus, here()


def null_task(adapter, fit_part: tuple, fits: list, opts: DiagnoseOptions) -> list:
    """The null heads' fit sums at the heads' fitted score scales, from the masks a fit task kept (layers in
    parallel, :func:`.fit.null_sums`)."""
    return null_sums(adapter.sites, fit_part[1], fits, opts.seed, opts.tile_bytes, compute_dtype(adapter),
                     opts.n_boot, reference_seed=opts.reference_seed)


def merged_grams(parts: list) -> list:
    """The merged head-pair Gram sums per layer from the fit tasks' results."""
    return [s.gram for s in merge_parts([p[0] for p in parts])]


def spectra_task(adapter, run_id: str, batches: list, fits: list, null_fits: list, powers: list,
                 opts: DiagnoseOptions, grams: list | None = None, progress: bool = False,
                 texts: frozenset | None = None, dependence: bool = True) -> tuple:
    """Step 3 on ``batches``, spectra of the spectra texts ``texts`` (None: all; ``dependence=False``: a later
    stage, the spectra of ``texts`` only): ``(per-layer spectra, whether every batch was read from this
    process' cache)``."""
    cache = run_cache(run_id, adapter, opts.reuse_forward, create=False)
    hit = cache is not None and all(cache.has(tuple(b["order"])) for b in batches)
    out = spectra_pass(adapter, batches, fits, null_fits, powers, opts.seed, opts.tile_bytes, progress, cache,
                       grams, opts.n_boot, texts, dependence, statistics_device(opts.statistics_device, adapter.model),
                       opts.removal_spectra, opts.reference_seed)
    return out, hit


def first_order_task(adapter, batches: list, opts: DiagnoseOptions, progress: bool = False):
    """Step 4a on ``batches``: first-order removal effects and Michel importance."""
    return first_order_pass(adapter, batches, opts.seed, progress, opts.n_boot)


def exact_task(adapter, rm_batches: list, means: list, heads_of: dict | None, plan, opts: DiagnoseOptions,
               first_order: bool = False, progress: bool = False):
    """Step 4 on ``rm_batches``: exact removal of the heads ``heads_of`` (``None``: all) as ``plan`` says
    (:class:`.removal_plan.RemovalPlan`: positions, words, per-text effects), with first order from the
    same passes when ``first_order``."""
    return exact_pass(adapter, rm_batches, mean_ablation=opts.mean_ablation, means=means,
                      max_tokens=opts.max_tokens, seed=opts.seed, positions=plan.positions, heads_of=heads_of,
                      progress=progress, n_boot=opts.n_boot, vocab_top=plan.vocab_top,
                      per_text=plan.target is not None, first_order=first_order)
