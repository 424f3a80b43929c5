"""``diagnose()``: per-layer, per-head diagnosis of a trained transformer's attention.

A pipeline of named steps (:mod:`.steps`), each with mergeable per-text state, so that the tables
depend only on the multiset of texts and a corpus can be split, diagnosed in parts and merged:

1. **collect** (:mod:`.steps.collect`): a forward pass per length bucket; per layer the attention
   inputs (whatever the kernel) and the model's own mask; attention rows recomputed in query tiles;
2. **fit** (:mod:`.steps.fit`): sums for the Gaussian-equivalent fit (``beta_hat``, ``alpha_hat``,
   ``R^2``), the baselines and the value-path power; then the null heads' fit at the heads' fitted
   score scales (from the kept masks, no model needed);
3. **spectra** (:mod:`.steps.spectra`): the first pass' records read back from disk on a CPU
   (:mod:`.steps.forward_cache`), else a second forward pass; centered output spectra of each head,
   its Gaussian equivalent, a null head and its equivalent; layer spectra, free sums, removed heads;
4. **removal/importance** (:mod:`.steps.removal`): exact head removal with activation reuse (finer
   length buckets) and Michel et al. gradient importance;
5. **tables** (:mod:`.steps.tables`): ``heads``, ``layers``, ``pairs`` (columns in :mod:`.columns`).

The model is never modified and its outputs are unchanged; everything runs under ``torch.no_grad``
except the gradient probes, and statistics are accumulated in float64 on the CPU.
"""
from __future__ import annotations

import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..models import adapt, make_batches
from . import selection as sel
from .removal import spearman_table
from .result import Diagnosis
from .steps import forward_cache
from .steps.collect import DEFAULT_TILE_BYTES, LayerBatch, compute_dtype, layer_batches, record
from .steps.fit import LayerFitSums, MaskStore, NullFitSums
from .steps.removal import RemovalSums
from .steps.spectra import LayerSpectra, layer_batch_spectra
from .steps.tables import TableOptions, build_tables
from .texts import resolve_texts

__all__ = ["diagnose", "CorpusStats", "Shard", "make_shards", "StepResults", "run_steps", "tables_and_summary",
           "fit_pass", "null_pass", "spectra_pass", "removal_pass"]

_NOTE_CAUSAL = ("causal attention: the theory (docs/theory.md) assumes every query sees all l tokens. Here query i "
                "sees n_i = i keys; the Gaussian equivalent is applied row by row with l -> n_i, and the uniform part "
                "11^T/n_i no longer vanishes under centering (it becomes a running mean). Read beta_hat, R^2 and "
                "the baselines as usual; read spectral distances as descriptive, not as tests of the law.")
_NOTE_WINDOW = ("sliding-window layers: keys farther than the window are masked; the window {w} binds only for "
                "texts longer than {w} tokens (longest text here: {L}), so {status}.")
_NOTE_GQA = ("grouped-query attention: query heads of a group share keys and values (column shared_kv in the "
             "pairs table; layer columns cka_shared_kv_mean / cka_unshared_kv_mean). The theory predicts that "
             "sharing across heads leaves the spectrum of the sum unchanged: compare free_defect_w1_rel with a "
             "model without sharing.")
_NOTE_FEW = ("{n} real tokens is below the minimum of {m} for a selection label: every head is 'undetermined' "
             "(scores are still reported; more texts give labels).")


@dataclass
class CorpusStats:
    """Texts, real tokens and the longest text seen (mergeable)."""

    n_texts: int = 0
    n_tokens: int = 0
    max_tokens: int = 0

    def update(self, batch: dict) -> "CorpusStats":
        lengths = batch["attention_mask"].sum(1)
        self.n_texts += int(lengths.numel())
        self.n_tokens += int(lengths.sum())
        self.max_tokens = max(self.max_tokens, int(lengths.max()))
        return self

    def merge(self, other: "CorpusStats") -> "CorpusStats":
        return CorpusStats(self.n_texts + other.n_texts, self.n_tokens + other.n_tokens,
                           max(self.max_tokens, other.max_tokens))


@contextlib.contextmanager
def _layer_pool(n: int):
    """``n`` worker threads over the layers of a batch, each running torch single-threaded (LAPACK and
    torch release the GIL). Results are consumed in layer order: nothing depends on the thread count."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
            yield pool
    finally:
        torch.set_num_threads(old)


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc ``malloc_trim``): the per-batch temporaries of many
    sizes otherwise leave the resident size growing with the corpus. No-op elsewhere."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


def _per_layer(adapter, batches, fn: Callable[[LayerBatch], Any], on_result: Callable[[int, Any], None],
               tile_bytes: int, desc: str, progress: bool, on_batch: Callable | None = None,
               cache: forward_cache.ForwardCache | None = None) -> None:
    """Collect each batch (from ``cache`` when it kept the batch, else by a forward pass, then kept in
    ``cache``), run ``fn`` on its layers in a thread pool and hand results over in order."""
    from tqdm.auto import tqdm
    threads = torch.get_num_threads()
    n_texts = sum(int(b["attention_mask"].shape[0]) for b in batches)
    with tqdm(total=n_texts, desc=desc, unit="text", disable=not progress, leave=False) as bar:
        for batch in batches:
            key = tuple(batch["order"])
            records = cache.get(key) if cache is not None else None
            if records is None:
                records = record(adapter, batch)
                if cache is not None:
                    cache.put(key, records)
            lbs = layer_batches(adapter, batch, records, tile_bytes)
            del records
            if on_batch is not None:
                on_batch(batch, lbs)
            with _layer_pool(threads) as pool:
                for lb, r in zip(lbs, pool.map(fn, lbs)):
                    on_result(lb.index, r)
            del lbs
            _trim_heap()
            bar.update(int(batch["attention_mask"].shape[0]))   # tqdm shows texts/s and the ETA


def fit_pass(adapter, batches, tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
             cache: forward_cache.ForwardCache | None = None) -> tuple[list[LayerFitSums], MaskStore, CorpusStats]:
    """Step 2 over ``batches``: per-layer fit sums, the kept masks and the corpus counts (the forward
    passes' records are kept in ``cache`` for step 3 when given)."""
    W = [s.w_out().cpu() for s in adapter.sites]
    sums = [LayerFitSums() for _ in adapter.sites]
    masks, corpus = MaskStore(), CorpusStats()

    def on_batch(batch, lbs):
        masks.add(lbs)
        corpus.update(batch)
    _per_layer(adapter, batches, lambda lb: LayerFitSums().update(lb, W[lb.index]),
               lambda i, r: sums.__setitem__(i, sums[i].merge(r)), tile_bytes, "fit", progress, on_batch, cache)
    return sums, masks, corpus


def null_pass(sites, masks: MaskStore, fits: list[dict], seed: int, tile_bytes: int = DEFAULT_TILE_BYTES,
              dtype: torch.dtype = torch.float32) -> list[NullFitSums]:
    """Null heads' fit sums at the heads' fitted score scales, from the kept masks (no model)."""
    out = [NullFitSums() for _ in sites]
    for valid, order, allowed_of in masks:
        B, L = valid.shape
        for i, s in enumerate(sites):
            rows = max(1, min(L, tile_bytes // max(1, 4 * B * s.n_heads * L)))
            out[i].update(allowed_of(i), valid, order, i, s.n_heads, s.head_dim, fits[i]["score_scale"], seed, rows,
                          dtype)
    return out


def spectra_pass(adapter, batches, fits: list[dict], null_fits: list[dict], powers: list, seed: int,
                 tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
                 cache: forward_cache.ForwardCache | None = None) -> list[LayerSpectra]:
    """Step 3 over ``batches``: per-layer pooled spectra and Gram sums (batches kept in ``cache`` are
    read from it instead of a second forward pass)."""
    W = [s.w_out().cpu() for s in adapter.sites]
    acc = [LayerSpectra(s.n_heads) for s in adapter.sites]
    _per_layer(adapter, batches,
               lambda lb: layer_batch_spectra(lb, W[lb.index], fits[lb.index], null_fits[lb.index],
                                              powers[lb.index], seed),
               lambda i, r: acc[i].update(r), tile_bytes, "spectra", progress, cache=cache)
    return acc


def removal_pass(adapter, rm_batches, grad_batches, *, removal: bool, mean_ablation: bool, gradient: bool,
                 means, max_tokens: int, seed: int, progress: bool = False) -> RemovalSums:
    """Step 4: exact removal over ``rm_batches`` and gradient importance over ``grad_batches``."""
    from tqdm.auto import tqdm
    acc = RemovalSums()
    if removal:
        total = sum(s.n_heads for s in adapter.sites) * len(rm_batches) * (2 if mean_ablation else 1)
        with tqdm(total=total, desc="head removal", disable=not progress, leave=False) as bar:
            acc.add_removal(adapter, rm_batches, mean_ablation, means, max_tokens, progress=bar.update)
    if gradient:
        for batch in tqdm(grad_batches, desc="gradient", disable=not progress, leave=False):
            acc.add_importance(adapter, batch, seed)
    return acc


@dataclass
class Shard:
    """A part of the corpus: its length-bucketed batches for the statistics and for exact removal (texts
    keep their positions in the whole corpus, so their random draws do not depend on the sharding)."""

    batches: list
    removal_batches: list


def make_shards(tokenizer, texts: Sequence[str], n_shards: int = 1, max_length: int = 128, bucket_size: int = 16,
                removal_bucket_size: int = 4) -> list[Shard]:
    """Split ``texts`` into ``n_shards`` contiguous parts (as equal as possible) and batch each."""
    n = len(texts)
    cuts = [round(k * n / n_shards) for k in range(n_shards + 1)]
    return [Shard(make_batches(tokenizer, texts[a:b], max_length, bucket_size, first_id=a),
                  make_batches(tokenizer, texts[a:b], max_length, min(bucket_size, removal_bucket_size), first_id=a))
            for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _merge(parts: list) -> Any:
    """Merge accumulators (or lists of per-layer accumulators) in order."""
    if isinstance(parts[0], list):
        return [_merge([p[i] for p in parts]) for i in range(len(parts[0]))]
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


@dataclass
class StepResults:
    """Merged accumulators and fits of steps 2-4, the input of the tables."""

    fit_sums: list
    fits: list
    null_fits: list
    spectra: list
    removal: RemovalSums
    corpus: CorpusStats


def run_steps(adapter, shards: Sequence[Shard], *, seed: int = 0, removal: bool = True, mean_ablation: bool = False,
              gradient: bool = True, max_tokens: int = 16384, tile_bytes: int = DEFAULT_TILE_BYTES,
              progress: bool = False, timings: dict | None = None, reuse_forward: bool | None = None) -> StepResults:
    """Steps 2-4 over the shards, merging each step's accumulators before the next step needs them.

    ``reuse_forward``: keep the first forward pass' records on disk for step 3 (:mod:`.steps.forward_cache`;
    ``None``: when the model is on the CPU)."""
    timings = {} if timings is None else timings
    cache = forward_cache.ForwardCache() if forward_cache.wanted(adapter, reuse_forward) else None
    try:
        t0 = time.perf_counter()
        parts = [fit_pass(adapter, sh.batches, tile_bytes, progress, cache) for sh in shards]
        fit_sums, corpus = _merge([p[0] for p in parts]), _merge([p[2] for p in parts])
        fits = [s.fit() for s in fit_sums]
        dtype = compute_dtype(adapter)
        null_fits = [s.fit() for s in _merge([null_pass(adapter.sites, p[1], fits, seed, tile_bytes, dtype)
                                              for p in parts])]
        del parts
        timings["fit"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        powers = [s.head_power() for s in fit_sums]
        spectra = _merge([spectra_pass(adapter, sh.batches, fits, null_fits, powers, seed, tile_bytes, progress, cache)
                          for sh in shards])
        timings["spectra"] = time.perf_counter() - t0
    finally:
        if cache is not None:
            cache.close()
    t0 = time.perf_counter()
    means = [s.context_means() for s in fit_sums]
    rem = _merge([removal_pass(adapter, sh.removal_batches, sh.batches, removal=removal, mean_ablation=mean_ablation,
                               gradient=gradient, means=means, max_tokens=max_tokens, seed=seed, progress=progress)
                  for sh in shards])
    timings["removal"] = time.perf_counter() - t0
    return StepResults(fit_sums, fits, null_fits, spectra, rem, corpus)


def _one_blas_thread():
    """numpy's OpenBLAS with several threads is 10x slower on the small batched eigenproblems used here."""
    try:
        from threadpoolctl import ThreadpoolController
        return ThreadpoolController().select(internal_api="openblas").limit(limits=1)
    except Exception:  # threadpoolctl missing or no OpenBLAS: nothing to limit
        return contextlib.nullcontext()


def _is_tokenizer(obj: Any) -> bool:
    return obj is not None and callable(obj) and not isinstance(obj, (torch.Tensor, dict)) and not hasattr(obj, "keys")


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts: Sequence[str] | str | None = None, *,
             n_texts: int | None = None, max_length: int = 128, bucket_size: int = 16, removal: bool = True,
             mean_ablation: bool = False, gradient: bool = True, threshold: float = sel.DIFFUSE_THRESHOLD,
             min_tokens: int = sel.MIN_TOKENS_FOR_LABEL, seed: int = 0, max_tokens: int = 16384,
             removal_bucket_size: int = 4, tile_bytes: int = DEFAULT_TILE_BYTES, pack: bool | None = None,
             progress: bool = False, model_name: str | None = None, reuse_forward: bool | None = None) -> Diagnosis:
    """Diagnose every attention head of ``model``.

    Parameters
    ----------
    model : nn.Module or ModelAdapter
        A supported model (see :func:`attnspec.models.adapt`), with any attention implementation.
    tokenizer_or_inputs : tokenizer, dict or tensor
        A tokenizer (then ``texts`` are tokenized, truncated to ``max_length`` and length-bucketed),
        a dict/BatchEncoding of ``input_ids``/``attention_mask``, or inputs for generic models (see
        :func:`attnspec.models.make_batches`).
    texts : list of str or 'builtin' or None
        Texts (policy in :mod:`attnspec.diagnostics.texts`: ``'builtin'``/``None`` takes ``n_texts``
        texts of the built-in corpus, packed to ``max_length`` tokens for causal LMs unless ``pack``).
    removal, mean_ablation, gradient : bool
        Run exact head removal (zero ablation), also mean ablation, and Michel et al. importance.
    threshold : float
        Selection-score threshold below which a head is flagged diffuse (default ``log 2``).
    min_tokens : int
        Fewest real tokens for a selection label (fewer: ``'undetermined'``).
    seed : int
        Seeds the Gaussian-equivalent noise, null heads, free rotations and gradient probes.
    max_tokens : int
        Token budget of one ablation forward pass (``K`` heads removed per pass = budget / (B L)).
    removal_bucket_size : int
        Texts per length bucket in exact removal (at most ``bucket_size``).
    tile_bytes : int
        Budget of one tile of recomputed attention weights (float32 ``(B, H, rows, L)``).
    reuse_forward : bool, optional
        Keep what the first forward pass recorded on disk (temporary, removed at the end) and read it
        back for the spectra instead of a second forward pass. Default: when the model is on the CPU.

    Returns
    -------
    Diagnosis
        ``.heads`` (one row per layer x head), ``.layers``, ``.pairs`` and ``.summary``; column
        meanings in :mod:`attnspec.diagnostics.columns`.
    """
    for name, v, lo in (("max_length", max_length, 2), ("bucket_size", bucket_size, 1),
                        ("removal_bucket_size", removal_bucket_size, 1), ("max_tokens", max_tokens, 1),
                        ("tile_bytes", tile_bytes, 1), ("min_tokens", min_tokens, 0)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    with _one_blas_thread():
        return _diagnose(model, tokenizer_or_inputs, texts, n_texts=n_texts, max_length=max_length,
                         bucket_size=bucket_size, removal=removal, mean_ablation=mean_ablation, gradient=gradient,
                         threshold=threshold, min_tokens=min_tokens, seed=seed, max_tokens=max_tokens,
                         removal_bucket_size=removal_bucket_size, tile_bytes=tile_bytes, pack=pack,
                         progress=progress, model_name=model_name, reuse_forward=reuse_forward)


def _diagnose(model, tokenizer_or_inputs, texts, *, n_texts, max_length, bucket_size, removal, mean_ablation,
              gradient, threshold, min_tokens, seed, max_tokens, removal_bucket_size, tile_bytes, pack, progress,
              model_name, reuse_forward) -> Diagnosis:
    t_start = time.perf_counter()
    adapter = adapt(model)
    tmod = adapter.model
    was_training = tmod.training
    tmod.eval()
    source = "inputs"
    if _is_tokenizer(tokenizer_or_inputs):
        texts, source = resolve_texts(texts, tokenizer_or_inputs, adapter.kind, n_texts, max_length, pack)
        shards = make_shards(tokenizer_or_inputs, texts, 1, max_length, bucket_size, removal_bucket_size)
    else:
        batches = make_batches(tokenizer_or_inputs, max_length=max_length, bucket_size=bucket_size)
        shards = [Shard(batches, batches)]
    timings: dict[str, float] = {}
    try:
        res = run_steps(adapter, shards, seed=seed, removal=removal, mean_ablation=mean_ablation, gradient=gradient,
                        max_tokens=max_tokens, tile_bytes=tile_bytes, progress=progress, timings=timings,
                        reuse_forward=reuse_forward)
    finally:
        if was_training:
            tmod.train()
    heads, layers, pairs, summary = tables_and_summary(adapter, res, removal=removal, mean_ablation=mean_ablation,
                                                       gradient=gradient, threshold=threshold, min_tokens=min_tokens,
                                                       timings=timings, source=source, max_length=max_length,
                                                       bucket_size=bucket_size, seed=seed,
                                                       model_name=model_name or type(tmod).__name__)
    timings["total"] = time.perf_counter() - t_start
    summary["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    store = {i: {"actual": sp.of_layer("act"), "gaussian_equivalent": sp.of_layer("ge"), "free_sum": sp.of_layer("free")}
             for i, sp in enumerate(res.spectra)}
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, spectra=store, summary=summary)


def tables_and_summary(adapter, res: StepResults, *, removal, mean_ablation, gradient, threshold, min_tokens, timings,
                       source, max_length, bucket_size, seed, model_name):
    """Step 5: ``(heads, layers, pairs, summary)`` from the merged step results."""
    t0 = time.perf_counter()
    effect_name = "loss_increase" if adapter.kind == "causal-lm" else "embedding_shift"
    opt = TableOptions(removal=removal, mean_ablation=mean_ablation, gradient=gradient, threshold=threshold,
                       min_tokens=min_tokens, effect_name=effect_name)
    sites = adapter.sites
    W = [s.w_out().cpu() for s in sites]
    heads, layers, pairs = build_tables(sites, res.fit_sums, res.fits, res.spectra, res.removal, W,
                                        res.corpus.n_texts, res.corpus.max_tokens, opt)
    timings["tables"] = time.perf_counter() - t0
    summary = _summary(adapter, heads, res.corpus, opt, timings, source, max_length, bucket_size, seed, model_name)
    return heads, layers, pairs, summary


def _notes(sites, corpus: CorpusStats, min_tokens: int) -> list[str]:
    notes = []
    if any(s.causal for s in sites):
        notes.append(_NOTE_CAUSAL)
    L = corpus.max_tokens
    for w in sorted({s.window for s in sites if s.window is not None}):
        notes.append(_NOTE_WINDOW.format(w=w, L=L, status="it does not change any statistic here" if w >= L
                                         else "those layers attend to a band, and the full-attention theory does not apply to them"))
    if any(s.n_kv_heads < s.n_heads for s in sites):
        notes.append(_NOTE_GQA)
    if corpus.n_tokens < min_tokens:
        notes.append(_NOTE_FEW.format(n=corpus.n_tokens, m=min_tokens))
    return notes


def _summary(adapter, heads, corpus: CorpusStats, opt: TableOptions, timings, source, max_length, bucket_size,
             seed, model_name) -> dict:
    sites = adapter.sites
    counts = {f"n_{k}": int((heads["selection"] == k).sum()) for k in sel.LABELS}
    summary = {
        "model": model_name, "family": adapter.family, "kind": adapter.kind,
        "attn_implementation": getattr(getattr(adapter.model, "config", None), "_attn_implementation", None),
        "n_layers": len(sites), "n_heads": int(sum(s.n_heads for s in sites)), "n_texts": corpus.n_texts,
        "n_tokens": corpus.n_tokens, "max_tokens_per_text": corpus.max_tokens, "texts": source,
        "max_length": max_length, "bucket_size": bucket_size,
        "removal_effect": opt.effect_name if opt.removal else None, "activation_reuse": bool(adapter.can_reuse),
        "selection_threshold": opt.threshold, "beta_max_diffuse": sel.BETA_MAX_DIFFUSE,
        "min_tokens_for_label": opt.min_tokens, **counts,
        "selection_score_quantiles": {str(q): float(heads["selection_score"].quantile(q)) for q in (0.1, 0.5, 0.9)},
        "spearman": spearman_table(heads), "notes": _notes(sites, corpus, opt.min_tokens),
        "seed": seed, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "torch_threads": torch.get_num_threads(),
    }
    if source == "builtin":
        from ..data import CORPUS_SOURCE
        summary["corpus"] = CORPUS_SOURCE
    return summary
