"""The step sequence of a diagnosis, written once for every executor (:mod:`.executor`).

1. **prepare**: the texts resolved (:mod:`.texts`) and length-bucketed (:mod:`.shards`), the removal mode;
2. **fit** (one task per group of batches, :func:`.tasks.fit_task`): a forward pass per batch (:mod:`.collect`),
   the sums of the Gaussian-equivalent fit, the baselines and the value path; merged, they give the fits;
   then the **null** heads' fit at the fitted score scales, from the masks each fit task kept (no model);
3. **spectra** (one task per group, where the group was fitted: its forward records are on that disk):
   centered output spectra of each head, its Gaussian equivalent, a null head and its equivalent, layer
   spectra, free sums, removed heads on the spectra texts (:mod:`.spectra_plan`: a seeded sample, grown in
   stages until the selection verdicts are predicted to agree with the whole corpus'), and the CKA bootstrap
   from the merged Gram sums;
4. **removal** (:func:`.head_removal.removal_step`): first-order and exact head removal over the removal jobs,
   as the plan says (:mod:`.removal_plan`); on a cluster these tasks queue behind the spectra and fill the
   workers that the spectra's tail leaves idle.

Each step merges its tasks' accumulators in task order before the next step needs them
(:func:`.shards.merge_parts`), so the result depends only on the texts, the options and the seed. The tables
are built from :class:`StepResults` by :mod:`attnspec.diagnostics.result`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...models import make_batches
from ..checks import check_positions
from ..options import DiagnoseOptions
from ..statistics.bootstrap import N_BOOT, supports_intervals
from . import tasks
from .executor import priority
from .fit import CorpusStats
from .head_removal import RemovalSums, removal_step, resolve_mode
from .removal_plan import RemovalPlan, only_texts
from .shards import make_shards, merge_parts
from .spectra_plan import SpectraPlan
from .texts import resolve_texts

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)


@dataclass
class Prepared:
    """The corpus of a diagnosis, bucketed, and what the sequence needs to know of the model."""

    batches: list
    removal_batches: list
    source: str
    model_name: str
    n_heads: list
    mode: str
    head_dims: list | None = None

    def eigenvalues_per_text(self) -> np.ndarray:
        """Per corpus position, the eigenvalues its text adds to a head spectrum of the narrowest layer:
        ``min(l - 1, d_head)`` (:class:`.spectra_plan.SpectraPlan`)."""
        d = min(self.head_dims) if self.head_dims else 0
        n = max((max(b["order"]) + 1 for b in self.batches), default=0)
        out = np.zeros(n, np.int64)
        for b in self.batches:
            out[list(b["order"])] = np.minimum(b["attention_mask"].sum(1).cpu().numpy() - 1, d).clip(min=0)
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
    removal_plan: RemovalPlan
    screen_code: Any = None       # screened mode: (n_layers, H_max) 2 top, 1 sampled, 0 first order only
    null_sums: list | None = None  # the null heads' fit sums (their bootstrap replicates)
    n_boot: int = N_BOOT
    spectra_plan: SpectraPlan | None = None   # the spectra texts (:mod:`.spectra_plan`)


def _is_tokenizer(obj: Any) -> bool:
    return obj is not None and callable(obj) and not hasattr(obj, "keys") and not hasattr(obj, "shape")


def prepare(adapter, tokenizer_or_inputs: Any, texts: Any, opts: DiagnoseOptions) -> Prepared:
    """Step 1: the removal mode (``'auto'`` resolved by the model's size), the texts resolved by the library's
    text policy and length-bucketed, or the given inputs batched; texts longer than the model's positions are
    refused here, before any forward pass (:func:`..checks.check_positions`)."""
    mode = resolve_mode(opts.removal, adapter)
    if _is_tokenizer(tokenizer_or_inputs):
        texts, source = resolve_texts(texts, tokenizer_or_inputs, adapter.kind, opts.n_texts, opts.max_length,
                                      opts.pack)
        shard = make_shards(tokenizer_or_inputs, texts, 1, opts.max_length, opts.bucket_size,
                            opts.removal_bucket_size)[0]
        batches, removal_batches = shard.batches, shard.removal_batches
    else:
        batches = make_batches(tokenizer_or_inputs, max_length=opts.max_length, bucket_size=opts.bucket_size)
        removal_batches, source = batches, "inputs"
    check_positions(batches, adapter.model, opts.max_length if source != "inputs" else None,
                    "texts" if source != "inputs" else "tokenizer_or_inputs")
    return Prepared(batches, removal_batches, source, opts.model_name or type(adapter.model).__name__,
                    [s.n_heads for s in adapter.sites], mode, [s.head_dim for s in adapter.sites])


def _fit(ex, groups: list, opts: DiagnoseOptions) -> tuple:
    """Step 2: merged fit sums, fits, null sums, corpus counts, the fit tasks' workers and a handle of the
    merged Gram sums."""
    fit = ex.map("fit", tasks.fit_task, [(priority(g), (ex.run_id, g, opts, ex.task_progress), None)
                                         for g in groups])
    parts = ex.gather(fit, "fit")
    grams = ex.reduce("grams", tasks.merged_grams, fit)        # on a cluster: there, from the fit tasks' results
    fit_sums, corpus = merge_parts([p[0] for p in parts]), merge_parts([p[2] for p in parts])
    fits = [s.fit() for s in fit_sums]
    nulls = ex.map("null", tasks.null_task, [(priority(g), (f, fits, opts), None)      # where the masks are
                                             for f, g in zip(fit, groups)], urgency=1)
    null_sums = merge_parts(ex.gather(nulls, "null fit"))
    return fit_sums, fits, null_sums, corpus, [p[3] for p in parts], grams


def _start_spectra(ex, groups: list, fits: list, null_fits: list, powers: list, where: list, grams,
                   opts: DiagnoseOptions, plan: SpectraPlan, fit_sums: list):
    """Step 3 started, each group preferably where it was fitted, spectra on the plan's first spectra texts;
    returns the function that waits for it and runs the plan's later stages (:mod:`.spectra_plan`):
    ``(merged spectra, cache hits, seconds from start to the last task done)``."""
    t0 = time.perf_counter()
    done: list = []

    def stage(texts, dependence: bool, parts: list) -> list:
        calls = [(priority(g), (ex.run_id, g, fits, null_fits, powers, opts, grams if dependence else None,
                                ex.task_progress, texts, dependence), w or None) for g, w in parts]
        handles = ex.map("spectra", tasks.spectra_task, calls, urgency=1)
        for h in handles:
            if hasattr(h, "add_done_callback"):
                h.add_done_callback(lambda _: done.append(time.perf_counter()))
        return handles
    first = stage(plan.texts(), True, list(zip(groups, where)))

    def finish() -> tuple:
        parts = ex.gather(first, "spectra")
        spectra, hits = merge_parts([p[0] for p in parts]), sum(bool(p[1]) for p in parts)
        while (new := plan.grow(spectra, fit_sums, opts)) is not None:
            later = [([b for b in g if not new.isdisjoint(b["order"])], w) for g, w in zip(groups, where)]
            more = ex.gather(stage(new, False, [(g, w) for g, w in later if g]), "spectra")
            spectra = merge_parts([spectra] + [p[0] for p in more])
        ex.close()                       # the forward records are read: the caches go
        seconds = max(done, default=time.perf_counter()) - t0
        return spectra, hits, seconds
    return finish


def _removal(ex, prep: Prepared, groups: list, fit_sums: list, n_texts: int, opts: DiagnoseOptions,
             timings: dict) -> tuple:
    """Step 4 (:func:`.head_removal.removal_step`): first order over the groups, exact removal over the removal
    jobs (first order fused into the first job of each batch when the plan allows), an adaptive plan's later
    stages as more of the same tasks on the added texts. Returns ``(RemovalSums, screen code, plan)``."""
    plan = RemovalPlan.of(prep.mode, n_texts, opts.seed, opts.removal_positions, opts.removal_texts,
                          opts.removal_vocab, opts.removal_target)
    means = [s.context_means() for s in fit_sums]

    def first_order(texts):
        parts = [g for g in (only_texts(g, texts) for g in groups) if g]
        fo = ex.map("first-order", tasks.first_order_task,
                    [(priority(g), (g, opts, ex.task_progress), None) for g in parts])
        return lambda: merge_parts(ex.gather(fo, "first order")) if fo else RemovalSums()

    def exact(heads_of, texts, first_order=False):
        jobs = ex.removal_jobs(only_texts(prep.removal_batches, texts), prep.n_heads, heads_of, opts.max_tokens)
        calls, seen = [], set()   # first order once per batch: in the first job that removes heads on it
        for b, h in jobs:
            ids = {tuple(x["order"]) for x in b}
            fo = first_order and not ids <= seen
            seen |= ids
            cost = priority(b, sum(map(len, h.values())) if h else 0)
            calls.append((cost, (b, means, h, plan, opts, fo, ex.task_progress), None))
        ex_h = ex.map("removal", tasks.exact_task, calls)
        return lambda: merge_parts(ex.gather(ex_h, "head removal")) if ex_h else RemovalSums()
    return removal_step(plan, prep.n_heads, first_order, exact, timings, gradient=opts.gradient,
                        screen_top=opts.screen_top, screen_sample=opts.screen_sample, seed=opts.seed, fuse=True)


def run_steps(ex, prep: Prepared, opts: DiagnoseOptions, timings: dict) -> StepResults:
    """Steps 2-4 through the executor ``ex`` (``timings`` gets each step's seconds; ``ex.counts`` the tasks).

    In this process the spectra are finished before the removal starts; on a cluster the removal's tasks
    are submitted behind the spectra's and the spectra are awaited last."""
    groups = ex.groups(prep.batches)
    if not supports_intervals(sum(int(b["attention_mask"].shape[0]) for b in prep.batches), opts.n_boot):
        opts = opts.replace(n_boot=0)   # no interval will be reported: no replicate is drawn (fits, CKA, removal)
    t0 = time.perf_counter()
    try:
        fit_sums, fits, null_sums, corpus, where, grams = _fit(ex, groups, opts)
        null_fits = [s.fit() for s in null_sums]
        timings["fit"] = time.perf_counter() - t0
        spectra_plan = SpectraPlan.of(corpus.n_texts, opts, prep.eigenvalues_per_text()[:corpus.n_texts])
        finish_spectra = _start_spectra(ex, groups, fits, null_fits, [s.head_power() for s in fit_sums], where,
                                        grams, opts, spectra_plan, fit_sums)
        del grams
        timings["spectra"] = 0.0        # (set below: the steps' order in the summary)
        spectra = None if ex.concurrent else finish_spectra()
        t0 = time.perf_counter()
        rem, code, plan = _removal(ex, prep, groups, fit_sums, corpus.n_texts, opts, timings)
        timings["removal"] = time.perf_counter() - t0
        spectra = spectra or finish_spectra()
    finally:
        ex.close()
    spectra, ex.counts["spectra_cache_hits"], timings["spectra"] = spectra
    ex.counts["fit_workers"] = len({w for w in where if w})
    return StepResults(fit_sums, fits, null_fits, spectra, rem, corpus, plan, code, null_sums, opts.n_boot,
                       spectra_plan)
