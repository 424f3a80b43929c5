"""The passes of the diagnosis over one group of batches: each runs a step on its batches, layer by layer
in a thread pool, and returns the step's mergeable accumulators (:mod:`.run` merges them across groups).

* :func:`fit_pass` (step 2): the Gaussian-equivalent fit sums, the kept masks and the corpus counts;
* :func:`spectra_pass` (step 3): centered output spectra of heads, their Gaussian equivalents, null heads
  and layers (the first pass' records read back from disk, :mod:`.forward_cache`, else a second forward pass);
* :func:`first_order_pass` and :func:`exact_pass` (step 4): first-order and exact head removal.

Every batch is collected by :mod:`.collect` (one forward pass, the attention inputs of every layer,
rows recomputed in tiles) onto the statistics' ``device`` (:mod:`..statistics.devices`): the tile statistics,
Grams and float64 sums run there, and only per-layer results (sums, eigenvalues) come back to the host.
"""
from __future__ import annotations

import collections
from typing import Any, Callable

import torch

from ..statistics.bootstrap import N_BOOT, weights
from ..statistics.spectral import REMOVAL_SPECTRA
from . import forward_cache
from ..options import DEFAULT_TILE_BYTES
from .collect import LayerBatch, compute_dtype, layer_batches, record, select_texts
from .fit import CorpusStats, LayerFitSums, MaskStore
from .head_removal import RemovalSums
from .resources import _layer_pool, _trim_heap
from .spectra import LayerSpectra, layer_batch_spectra

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)

def _per_layer(adapter, batches, fn: Callable[[LayerBatch], Any], on_result: Callable[[int, Any], None],
               tile_bytes: int, desc: str, progress: bool, on_batch: Callable | None = None,
               cache: forward_cache.ForwardCache | None = None, texts: frozenset | None = None,
               device: "torch.device | str" = "cpu") -> None:
    """Collect each batch (from ``cache`` when it kept the batch, else by a forward pass, whose records are
    written to ``cache`` layer by layer as the model makes them and read back memory-mapped), cut to its texts
    in ``texts`` when given (corpus positions, :func:`.collect.select_texts`), run
    ``fn`` on its layers (their tensors on ``device``) in a thread pool and hand results over in order."""
    from tqdm.auto import tqdm
    threads = torch.get_num_threads()
    n_texts = sum(int(b["attention_mask"].shape[0]) for b in batches)
    with tqdm(total=n_texts, desc=desc, unit="text", disable=not progress, leave=False) as bar:
        for batch in batches:
            key = tuple(batch["order"])
            records = cache.get(key) if cache is not None else None
            writer = cache.writer(key) if records is None and cache is not None and adapter.kind != "generic" else None
            if writer is not None:              # written layer by layer during the forward pass, read back mapped
                record(adapter, batch, sink=writer.add)
                records = cache.finish(key, writer, len(adapter.sites))
            elif records is None:
                records = record(adapter, batch)
                if cache is not None:
                    cache.put(key, records)
            keep = [k for k, t in enumerate(batch["order"]) if texts is None or t in texts]
            if len(keep) < len(batch["order"]):
                batch, records = select_texts(batch, records, keep)
            lbs = layer_batches(adapter, batch, records, tile_bytes, device)
            del records
            if on_batch is not None:
                on_batch(batch, lbs)
            _run_layers(lbs, fn, on_result, threads)
            _trim_heap()
            bar.update(int(batch["attention_mask"].shape[0]))   # tqdm shows texts/s and the ETA


def _run_layers(lbs: list[LayerBatch], fn: Callable[[LayerBatch], Any], on_result: Callable[[int, Any], None],
                threads: int) -> None:
    """Run ``fn`` on the layers ``lbs`` in a pool of ``threads`` workers, at most ``threads`` layers in flight,
    handing results over in layer order. ``lbs`` is emptied as layers are submitted, so a finished layer's
    inputs (its recorded queries, keys, values) and temporaries are freed before the next layer starts, which
    reuses their heap pages: peak memory is that of ``threads`` layers, not of the whole model. (The heap is
    trimmed once per batch, by the caller: trimming after every layer hands back pages that the next layer
    faults in again: 0.5-1.4 s of SmolLM2-135M's 14 s on 16 texts.)"""
    lbs.reverse()
    pending: collections.deque = collections.deque()
    with _layer_pool(threads) as pool:
        while lbs or pending:
            while lbs and len(pending) < max(1, threads):
                lb = lbs.pop()
                pending.append((lb.index, pool.submit(fn, lb)))
                del lb
            i, fut = pending.popleft()
            on_result(i, fut.result())
            del fut


def fit_pass(adapter, batches, tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
             cache: forward_cache.ForwardCache | None = None, seed: int = 0, n_boot: int = N_BOOT,
             device: "torch.device | str" = "cpu", reference_seed: int = 0
             ) -> tuple[list[LayerFitSums], MaskStore, CorpusStats]:
    """Step 2 over ``batches`` on ``device``: per-layer fit sums (with ``n_boot`` bootstrap replicates keyed by
    ``seed``; the key null's queries keyed by ``reference_seed``), the kept masks and the corpus counts (the forward
    passes' records are kept in ``cache`` for step 3 when given)."""
    W = [s.w_out().to(device) for s in adapter.sites]
    sums = [LayerFitSums() for _ in adapter.sites]
    masks, corpus = MaskStore(), CorpusStats()

    def on_batch(batch, lbs):
        masks.add(lbs)
        corpus.update(batch)
    _per_layer(adapter, batches, lambda lb: LayerFitSums().update(lb, W[lb.index], seed, n_boot, reference_seed),
               lambda i, r: sums.__setitem__(i, sums[i].merge(r)), tile_bytes, "fit", progress, on_batch, cache,
               device=device)
    return sums, masks, corpus


def spectra_pass(adapter, batches, fits: list[dict], null_fits: list[dict], powers: list, seed: int,
                 tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
                 cache: forward_cache.ForwardCache | None = None, grams: list | None = None,
                 n_boot: int = N_BOOT, texts: frozenset | None = None, dependence: bool = True,
                 device: "torch.device | str" = "cpu", removal_spectra: str = REMOVAL_SPECTRA[0],
                 reference_seed: int = 0) -> list[LayerSpectra]:
    """Step 3 over ``batches`` on ``device``: per-layer pooled spectra of the spectra texts ``texts`` (corpus positions;
    None: all) and Gram sums of every text (batches kept in ``cache`` are read from it instead of a second
    forward pass); with ``grams`` (step 2's merged Gram sums per layer) and ``n_boot > 0`` also the CKA influence
    sums of the ``n_boot`` bootstrap replicates; ``dependence=False``: the spectra of ``texts`` only (a later stage);
    ``removal_spectra``: how the layer without each head is taken (:data:`..statistics.spectral.REMOVAL_SPECTRA`);
    ``seed`` keys the bootstrap weights, ``reference_seed`` the reference draws (equivalents, null heads, rotation)."""
    W = [s.w_out().to(device) for s in adapter.sites]
    store = "float64" if compute_dtype(adapter) == torch.float64 else "float32"
    cut = texts if not dependence else None     # a later stage: its batches cut to its texts before the work
    acc = [LayerSpectra(s.n_heads, store, head_dim=s.head_dim, d_out=s.d_out) for s in adapter.sites]
    g = grams if grams is not None else [None] * len(W)
    _per_layer(adapter, batches,
               lambda lb: layer_batch_spectra(lb, W[lb.index], fits[lb.index], null_fits[lb.index],
                                              powers[lb.index], reference_seed, g[lb.index],
                                              weights(seed, lb.order, n_boot) if g[lb.index] is not None and n_boot else None,
                                              texts, dependence, removal_spectra),
               lambda i, r: acc[i].update(r), tile_bytes, "spectra", progress, cache=cache, texts=cut, device=device)
    return acc


def first_order_pass(adapter, grad_batches, seed: int, progress: bool = False, n_boot: int = N_BOOT) -> RemovalSums:
    """Step 4a: Michel importance and first-order removal effects over ``grad_batches`` (one forward and
    one backward pass per batch)."""
    from tqdm.auto import tqdm
    acc = RemovalSums()
    for batch in tqdm(grad_batches, desc="first order", disable=not progress, leave=False):
        acc.add_first_order(adapter, batch, seed, n_boot)
    return acc


def exact_pass(adapter, rm_batches, *, mean_ablation: bool, means, max_tokens: int, seed: int,
               positions: int | None = None, heads_of: dict | None = None, progress: bool = False,
               n_boot: int = N_BOOT, vocab_top: int | None = None, per_text: bool = False,
               first_order: bool = False) -> RemovalSums:
    """Step 4b: exact removal of ``heads_of`` (default every head) over ``rm_batches``, on ``positions``
    sampled positions per text (default all) and ``vocab_top`` words per position (default all); ``per_text``:
    keep each text's effects (an adaptive plan's prediction); ``first_order``: step 4a on the same batches, from
    the removal's reference passes."""
    from tqdm.auto import tqdm
    n = sum(len(v) for v in heads_of.values()) if heads_of is not None else sum(s.n_heads for s in adapter.sites)
    total = n * len(rm_batches) * (2 if mean_ablation else 1)
    with tqdm(total=total, desc="head removal", disable=not progress, leave=False) as bar:
        return RemovalSums().add_removal(adapter, rm_batches, mean_ablation, means, max_tokens, progress=bar.update,
                                         positions=positions, seed=seed, heads_of=heads_of,
                                         n_boot=n_boot, vocab_top=vocab_top, per_text=per_text,
                                         first_order=first_order)
