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

import collections
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..models import adapt, make_batches
from . import selection as sel
from .bootstrap import N_BOOT, weights
from .resources import _layer_pool, _one_blas_thread, _trim_heap
from .result import Diagnosis
from .steps import forward_cache
from .steps.collect import DEFAULT_TILE_BYTES, LayerBatch, compute_dtype, layer_batches, record
from .steps.fit import CorpusStats, LayerFitSums, MaskStore, NullFitSums, null_sums
from .steps.removal import RemovalSums, removal_step, resolve_mode
from .steps.removal_plan import RemovalPlan, check_removal_texts, only_texts
from .steps.spectra import LayerSpectra, layer_batch_spectra
from .steps.tables import TableOptions, build_tables
from .summary import build_summary, removal_summary
from .shards import Shard, make_shards, merge_parts
from .texts import resolve_texts

#: The passes below (``fit_pass`` .. ``exact_pass``, ``make_shards``, ``merge_parts``, ``run_steps``,
#: ``tables_and_summary``) are the steps :mod:`.workers` and :mod:`.distributed` run one by one, not public.
__all__ = ["diagnose", "CorpusStats"]

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
            _run_layers(lbs, fn, on_result, threads)
            _trim_heap()
            bar.update(int(batch["attention_mask"].shape[0]))   # tqdm shows texts/s and the ETA


def _run_layers(lbs: list[LayerBatch], fn: Callable[[LayerBatch], Any], on_result: Callable[[int, Any], None],
                threads: int) -> None:
    """Run ``fn`` on the layers ``lbs`` in a pool of ``threads`` workers, at most ``threads`` layers in flight,
    handing results over in layer order. ``lbs`` is emptied as layers are submitted, so a finished layer's
    inputs (its recorded queries, keys, values) and temporaries are freed, and the heap trimmed, before the
    next layer starts: peak memory is that of ``threads`` layers, not of the whole model."""
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
            _trim_heap()


def fit_pass(adapter, batches, tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
             cache: forward_cache.ForwardCache | None = None, seed: int = 0, n_boot: int = N_BOOT
             ) -> tuple[list[LayerFitSums], MaskStore, CorpusStats]:
    """Step 2 over ``batches``: per-layer fit sums (with ``n_boot`` bootstrap replicates keyed by
    ``seed``), the kept masks and the corpus counts (the forward passes' records are kept in ``cache``
    for step 3 when given)."""
    W = [s.w_out().cpu() for s in adapter.sites]
    sums = [LayerFitSums() for _ in adapter.sites]
    masks, corpus = MaskStore(), CorpusStats()

    def on_batch(batch, lbs):
        masks.add(lbs)
        corpus.update(batch)
    _per_layer(adapter, batches, lambda lb: LayerFitSums().update(lb, W[lb.index], seed, n_boot),
               lambda i, r: sums.__setitem__(i, sums[i].merge(r)), tile_bytes, "fit", progress, on_batch, cache)
    return sums, masks, corpus


def null_pass(sites, masks: MaskStore, fits: list[dict], seed: int, tile_bytes: int = DEFAULT_TILE_BYTES,
              dtype: torch.dtype = torch.float32, n_boot: int = N_BOOT) -> list[NullFitSums]:
    """Null heads' fit sums at the heads' fitted score scales, from the kept masks (no model; one task per
    layer, :func:`.steps.fit.null_sums`)."""
    return null_sums(sites, masks, fits, seed, tile_bytes, dtype, n_boot)


def spectra_pass(adapter, batches, fits: list[dict], null_fits: list[dict], powers: list, seed: int,
                 tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False,
                 cache: forward_cache.ForwardCache | None = None, grams: list | None = None,
                 n_boot: int = N_BOOT) -> list[LayerSpectra]:
    """Step 3 over ``batches``: per-layer pooled spectra and Gram sums (batches kept in ``cache`` are
    read from it instead of a second forward pass); with ``grams`` (step 2's merged Gram sums per layer)
    also the CKA influence sums of the ``n_boot`` bootstrap replicates."""
    W = [s.w_out().cpu() for s in adapter.sites]
    store = "float64" if compute_dtype(adapter) == torch.float64 else "float32"
    acc = [LayerSpectra(s.n_heads, store, head_dim=s.head_dim, d_out=s.d_out) for s in adapter.sites]
    g = grams if grams is not None else [None] * len(W)
    _per_layer(adapter, batches,
               lambda lb: layer_batch_spectra(lb, W[lb.index], fits[lb.index], null_fits[lb.index],
                                              powers[lb.index], seed, g[lb.index],
                                              weights(seed, lb.order, n_boot) if g[lb.index] is not None else None),
               lambda i, r: acc[i].update(r), tile_bytes, "spectra", progress, cache=cache)
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


@dataclass
class StepResults:
    """Merged accumulators and fits of steps 2-4, the input of the tables."""

    fit_sums: list
    fits: list
    null_fits: list
    spectra: list
    removal: RemovalSums
    corpus: CorpusStats
    removal_plan: RemovalPlan
    screen_code: Any = None       # screened mode: (n_layers, H_max) 2 top, 1 sampled, 0 first order only
    null_sums: list | None = None  # the null heads' fit sums (their bootstrap replicates)
    n_boot: int = N_BOOT


def run_steps(adapter, shards: Sequence[Shard], *, seed: int = 0, removal: str | bool = "exact",
              mean_ablation: bool = False, gradient: bool = True, max_tokens: int = 16384,
              tile_bytes: int = DEFAULT_TILE_BYTES, progress: bool = False, timings: dict | None = None,
              reuse_forward: bool | None = None, removal_positions: int | None = None, screen_top: int | None = None,
              screen_sample: int | None = None, n_boot: int = N_BOOT, removal_texts: int | str | None = None,
              removal_vocab: int | None = None, removal_target: float | None = None) -> StepResults:
    """Steps 2-4 over the shards, merging each step's accumulators before the next step needs them.

    ``reuse_forward``: keep the first forward pass' records on disk for step 3 (:mod:`.steps.forward_cache`;
    ``None``: when the model is on the CPU). ``removal``: one of :data:`.steps.removal.MODES` or 'auto'.
    ``n_boot``: bootstrap replicates over texts (:mod:`.bootstrap`)."""
    mode = resolve_mode(removal, adapter)
    timings = {} if timings is None else timings
    cache = forward_cache.ForwardCache() if forward_cache.wanted(adapter, reuse_forward) else None
    try:
        t0 = time.perf_counter()
        parts = [fit_pass(adapter, sh.batches, tile_bytes, progress, cache, seed, n_boot) for sh in shards]
        fit_sums, corpus = merge_parts([p[0] for p in parts]), merge_parts([p[2] for p in parts])
        fits = [s.fit() for s in fit_sums]
        dtype = compute_dtype(adapter)
        null_sums = merge_parts([null_pass(adapter.sites, p[1], fits, seed, tile_bytes, dtype, n_boot) for p in parts])
        del parts
        timings["fit"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        null_fits = [s.fit() for s in null_sums]
        powers = [s.head_power() for s in fit_sums]
        grams = [s.gram for s in fit_sums]
        spectra = merge_parts([spectra_pass(adapter, sh.batches, fits, null_fits, powers, seed, tile_bytes, progress,
                                            cache, grams, n_boot) for sh in shards])
        timings["spectra"] = time.perf_counter() - t0
    finally:
        if cache is not None:
            cache.close()
    t0 = time.perf_counter()
    plan = RemovalPlan.of(mode, corpus.n_texts, seed, removal_positions, removal_texts, removal_vocab, removal_target)

    def first_order(texts):
        return lambda: merge_parts([first_order_pass(adapter, only_texts(sh.batches, texts), seed, progress,
                                                     n_boot) for sh in shards])

    def exact(heads_of, texts, first_order=False):
        means = [s.context_means() for s in fit_sums]
        return lambda: merge_parts([exact_pass(adapter, only_texts(sh.removal_batches, texts),
                                               mean_ablation=mean_ablation, means=means, max_tokens=max_tokens,
                                               seed=seed, positions=plan.positions, heads_of=heads_of,
                                               progress=progress, n_boot=n_boot, vocab_top=plan.vocab_top,
                                               per_text=plan.target is not None, first_order=first_order)
                                    for sh in shards])
    rem, code, plan = removal_step(plan, [s.n_heads for s in adapter.sites], first_order, exact, timings,
                                   gradient=gradient, screen_top=screen_top, screen_sample=screen_sample, seed=seed,
                                   fuse=True)
    timings["removal"] = time.perf_counter() - t0
    return StepResults(fit_sums, fits, null_fits, spectra, rem, corpus, plan, code, null_sums, n_boot)


def _is_tokenizer(obj: Any) -> bool:
    return obj is not None and callable(obj) and not isinstance(obj, (torch.Tensor, dict)) and not hasattr(obj, "keys")


def _check_ints(optional: bool = False, **values: tuple) -> None:
    """Raise ``ValueError`` naming the option for each ``name=(value, minimum)`` that is not an integer >= minimum
    (``None`` allowed when ``optional``)."""
    for name, (v, lo) in values.items():
        if not (optional and v is None) and (not isinstance(v, int) or isinstance(v, bool) or v < lo):
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts: Sequence[str] | str | None = None, *,
             n_texts: int | None = None, max_length: int = 128, bucket_size: int = 16, removal: str | bool = "auto",
             mean_ablation: bool = False, gradient: bool = True, threshold: float = sel.DIFFUSE_THRESHOLD,
             min_tokens: int = sel.MIN_TOKENS_FOR_LABEL, seed: int = 0, max_tokens: int = 16384,
             removal_bucket_size: int = 4, tile_bytes: int = DEFAULT_TILE_BYTES, pack: bool | None = None,
             progress: bool = False, model_name: str | None = None, reuse_forward: bool | None = None,
             removal_positions: int | None = None, screen_top: int | None = None, screen_sample: int | None = None,
             n_boot: int = N_BOOT, removal_texts: int | str | None = None, removal_vocab: int | None = None,
             removal_target: float | None = None) -> Diagnosis:
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
    removal : {'auto', 'exact', 'sampled', 'screened', 'first-order', 'none'} or bool
        Head removal (:mod:`.steps.removal`): every head exactly; 'sampled': the same on a seeded sample of
        ``removal_texts`` texts, the LM loss on ``removal_vocab`` words per position (default 1,024) plus an
        estimated tail; every head to first order; 'screened': exactly the ``screen_top`` heads of largest
        first-order effect and a seeded ``screen_sample`` of the others (default ``max(8, 5 %)`` each).
        ``'auto'``: 'sampled' above 150 M parameters, else 'exact'. True/False: 'exact'/'none'.
    removal_positions, removal_texts, removal_vocab, removal_target, screen_top, screen_sample : optional
        Positions per text scored by exact removal (default all; 32 screened); texts (all removal columns are
        measured on them; default all; ``'auto'``, the default of 'sampled': 6, then more until the heads'
        ranking is predicted to agree with the whole corpus' at Spearman ``removal_target``, default 0.92,
        :mod:`.steps.removal_agreement`); words per position of the LM loss; see ``removal``.
    mean_ablation, gradient : bool
        Also mean ablation in exact removal; Michel et al. importance (always with first-order removal).
    threshold, min_tokens : float, int
        Selection-score threshold of the labels (default ``log 2``); fewest real tokens for a label.
    n_boot, seed : int
        Poisson-bootstrap replicates over texts (:mod:`.bootstrap`): 95 % intervals (``*_lo``/``*_hi``) and
        the labels, tests against them; the seed of every draw (noise, null heads, rotations, probes, bootstrap).
    max_tokens, removal_bucket_size, tile_bytes : int
        Tokens per ablation pass (``K`` heads removed per pass = budget / (B L)); texts per length bucket
        in exact removal; bytes of one tile of recomputed attention weights (float32 ``(B, H, rows, L)``).
    reuse_forward : bool, optional
        Keep what the first forward pass recorded on disk (temporary, removed at the end) and read it
        back for the spectra instead of a second forward pass. Default: when the model is on the CPU.

    Returns
    -------
    Diagnosis
        ``.heads`` (a row per layer x head), ``.layers``, ``.pairs``, ``.summary`` (columns: :mod:`.columns`).

    Raises
    ------
    ValueError
        If an integer option is below its minimum (named in the message).

    Examples
    --------
    A seeded 2-layer, 2-head GPT-2 on 2 texts of 6 random tokens, every head removed exactly:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    >>> d = diagnose(ad, inputs, min_tokens=0, n_boot=20)
    >>> d.heads[["layer", "head", "n_tokens"]].values.tolist()
    [[0, 0, 12], [0, 1, 12], [1, 0, 12], [1, 1, 12]]
    >>> d.summary["removal_effect"], len(d.layers), len(d.pairs)      # one pair of heads per layer
    ('loss_increase', 2, 2)
    """
    adapter, steps = _checked(model, dict(locals()))
    with _one_blas_thread():
        return _diagnose(adapter, tokenizer_or_inputs, texts, steps, n_texts=n_texts, max_length=max_length,
                         bucket_size=bucket_size, threshold=threshold, min_tokens=min_tokens,
                         removal_bucket_size=removal_bucket_size, pack=pack, model_name=model_name)


def _checked(model, a: dict) -> tuple:
    """``(adapter, step options)`` of :func:`diagnose` called with the arguments ``a``, every option checked
    (``ValueError`` naming it) before any work."""
    _check_ints(**{k: (a[k], lo) for k, lo in (("max_length", 2), ("bucket_size", 1), ("removal_bucket_size", 1),
                                               ("max_tokens", 1), ("tile_bytes", 1), ("min_tokens", 0), ("n_boot", 0))})
    _check_ints(optional=True, **{k: (a[k], lo) for k, lo in (("removal_positions", 1), ("screen_top", 0),
                                                              ("screen_sample", 0), ("removal_vocab", 1))})
    check_removal_texts(a["removal_texts"], removal_target=a["removal_target"])
    adapter = adapt(model)
    mode = resolve_mode(a["removal"], adapter)
    check_removal_texts(a["removal_texts"], mode)
    keys = ("seed", "mean_ablation", "gradient", "max_tokens", "tile_bytes", "progress", "reuse_forward",
            "removal_positions", "screen_top", "screen_sample", "n_boot", "removal_texts", "removal_vocab",
            "removal_target")
    return adapter, dict({k: a[k] for k in keys}, removal=mode)


def _diagnose(adapter, tokenizer_or_inputs, texts, steps: dict, *, n_texts, max_length, bucket_size, threshold,
              min_tokens, removal_bucket_size, pack, model_name) -> Diagnosis:
    t_start = time.perf_counter()
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
        res = run_steps(adapter, shards, timings=timings, **steps)
    finally:
        if was_training:
            tmod.train()
    heads, layers, pairs, summary = tables_and_summary(adapter, res, mean_ablation=steps["mean_ablation"],
                                                       gradient=steps["gradient"], threshold=threshold,
                                                       min_tokens=min_tokens, timings=timings, source=source,
                                                       max_length=max_length, bucket_size=bucket_size,
                                                       seed=steps["seed"], model_name=model_name or type(tmod).__name__)
    timings["total"] = time.perf_counter() - t_start
    summary["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    store = {i: {"actual": sp.of_layer("act"), "gaussian_equivalent": sp.of_layer("ge"), "free_sum": sp.of_layer("free")}
             for i, sp in enumerate(res.spectra)}
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, spectra=store, summary=summary)


def tables_and_summary(adapter, res: StepResults, *, mean_ablation, gradient, threshold, min_tokens, timings,
                       source, max_length, bucket_size, seed, model_name):
    """Step 5: ``(heads, layers, pairs, summary)`` from the merged step results (removal mode: ``res``'s)."""
    t0 = time.perf_counter()
    effect_name = "loss_increase" if adapter.kind == "causal-lm" else "embedding_shift"
    opt = TableOptions(removal=res.removal_plan.mode, mean_ablation=mean_ablation, gradient=gradient, threshold=threshold,
                       min_tokens=min_tokens, effect_name=effect_name, seed=seed, n_boot=res.n_boot)
    sites = adapter.sites
    W = [s.w_out().cpu() for s in sites]
    heads, layers, pairs = build_tables(sites, res.fit_sums, res.fits, res.spectra, res.removal, W,
                                        res.corpus.n_texts, res.corpus.max_tokens, opt, res.null_sums)
    timings["tables"] = time.perf_counter() - t0
    summary = build_summary(adapter, heads, res.corpus, opt, timings, source, max_length, bucket_size, seed, model_name,
                            pairs=pairs, model_loss=res.removal.model_loss())
    summary["removal"] = removal_summary(heads, res.removal_plan, res.screen_code)
    return heads, layers, pairs, summary
