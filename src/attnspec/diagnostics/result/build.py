"""Step 5: the :class:`.diagnosis.Diagnosis` from the merged step results (:class:`..pipeline.run.StepResults`):
the ``heads``, ``layers`` and ``pairs`` tables (:mod:`.tables`), the summary (:mod:`.summary`) and the pooled
layer spectra. A task like the others (first argument the model's adapter): a cluster builds it on a worker."""
from __future__ import annotations

import time

from ..options import DiagnoseOptions
from ..statistics.bootstrap import MIN_REPLICATES, MIN_TEXTS_FOR_INTERVALS
from ..pipeline.run import StepResults
from .diagnosis import Diagnosis
from .summary import build_summary, removal_summary
from .tables import TableOptions, build_tables

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)


def build_diagnosis(adapter, res: StepResults, opts: DiagnoseOptions, source: str, model_name: str,
                    timings: dict) -> Diagnosis:
    """The tables, the summary (``timings`` gets ``'tables'``) and the pooled spectra of a diagnosis. Fewer texts
    than :data:`..statistics.bootstrap.MIN_TEXTS_FOR_INTERVALS` or fewer replicates than
    :data:`..statistics.bootstrap.MIN_REPLICATES`: no interval and every verdict ``undetermined``, the reason in
    ``summary['notes']``."""
    t0 = time.perf_counter()
    effect_name = "loss_increase" if adapter.kind == "causal-lm" else "embedding_shift"
    opt = TableOptions(removal=res.removal_plan.mode, mean_ablation=opts.mean_ablation, gradient=opts.gradient,
                       threshold=opts.threshold, min_tokens=opts.min_tokens, effect_name=effect_name, seed=opts.seed,
                       n_boot=res.n_boot if _intervals(res) else 0)
    sites = adapter.sites
    W = [s.w_out().cpu() for s in sites]
    heads, layers, pairs = build_tables(sites, res.fit_sums, res.fits, res.spectra, res.removal, W,
                                        res.corpus.n_texts, res.corpus.max_tokens, opt, res.null_sums)
    timings["tables"] = time.perf_counter() - t0
    summary = build_summary(adapter, heads, res.corpus, opt, timings, source, opts.max_length, opts.bucket_size,
                            opts.seed, model_name, pairs=pairs, model_loss=res.removal.model_loss())
    summary["removal"] = removal_summary(heads, res.removal_plan, res.screen_code)
    spectra = {i: {"actual": sp.of_layer("act"), "gaussian_equivalent": sp.of_layer("ge"),
                   "free_sum": sp.of_layer("free")} for i, sp in enumerate(res.spectra)}
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, spectra=spectra, summary=summary)


def _intervals(res: StepResults) -> bool:
    """Whether the texts and the replicates support intervals (else none is reported, no verdict given)."""
    return res.corpus.n_texts >= MIN_TEXTS_FOR_INTERVALS and res.n_boot >= MIN_REPLICATES
