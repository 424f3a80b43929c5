"""Step 5: the :class:`.diagnosis.Diagnosis` from the merged step results (:class:`..pipeline.run.StepResults`):
the ``heads``, ``layers``, ``pairs`` and ``roles`` tables (:mod:`.tables`), the summary (:mod:`.summary`) and the pooled
layer spectra. A task like the others (first argument the model's adapter): a cluster builds it on a worker."""
from __future__ import annotations

import time

import numpy as np

from ..options import DiagnoseOptions
from ..statistics.bootstrap import supports_intervals
from ..pipeline.run import StepResults
from ..pipeline.removal_plan import EXACT_MODES
from .diagnosis import Diagnosis
from .intervals import TextWeights, removal_replicates
from .summary import build_summary, options_used, removal_summary
from .tables import TableOptions, build_tables, head_roles, roles_table

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)


def build_diagnosis(adapter, res: StepResults, opts: DiagnoseOptions, source: str, model_name: str,
                    timings: dict) -> Diagnosis:
    """The tables, the summary (``timings`` gets ``'tables'``) and the pooled spectra of a diagnosis. Fewer texts
    than :data:`..statistics.bootstrap.MIN_TEXTS_FOR_INTERVALS` or fewer replicates than
    :data:`..statistics.bootstrap.MIN_REPLICATES`: no interval and every verdict ``undetermined``, the reason in
    ``summary['notes']``."""
    t0 = time.perf_counter()
    effect_name = "loss_increase" if adapter.kind == "causal-lm" else "embedding_shift"
    opt = TableOptions(opts, removal=res.removal_plan.mode, effect_name=effect_name,
                       n_boot=res.n_boot if _intervals(res) else 0)
    sites = adapter.sites
    W = [s.w_out().cpu() for s in sites]
    per_layer: list = []             # each layer's bootstrap replicates, computed once for its intervals
    heads, layers, pairs = build_tables(sites, res.fit_sums, res.fits, res.spectra, res.removal, W,
                                        res.corpus.max_tokens, opt, res.null_sums, per_layer)
    roles = roles_table(res.fit_sums, opt)
    at = heads.columns.get_loc("induction_excess") + 1 if "induction_excess" in heads else len(heads.columns)
    heads.insert(at, "roles", head_roles(heads, roles))
    timings["tables"] = time.perf_counter() - t0
    summary = build_summary(adapter, heads, res.corpus, opt, timings, source, opts.max_length, opts.bucket_size,
                            opts.seed, model_name, pairs=pairs, model_loss=res.removal.model_loss())
    summary["removal"] = removal_summary(heads, res.removal_plan, res.screen_code)
    summary["spectra_texts"] = plan = res.spectra_plan.summary() if res.spectra_plan is not None else None
    if plan is not None and plan["texts_used"] < res.corpus.n_texts:
        why = (f"spectra_texts='auto': verdicts predicted to agree with all texts' on {plan['predicted_agreement']:.0%} "
               f"of heads" if plan["rule"] == "auto" else f"spectra_texts={plan['texts_used']}")
        summary["notes"].append(f"spectral columns (spec_*, selection_score, removal_spec_shift, the layers' spectra) "
                                f"from a seeded sample of {plan['texts_used']} of the {res.corpus.n_texts} texts ({why}); "
                                f"the other columns from every text")
    summary.update(options_used(adapter, opts, res.removal_plan.mode, source, res.removal_plan))
    spectra = {i: {"actual": sp.of_layer("act"), "gaussian_equivalent": sp.of_layer("ge"),
                   "free_sum": sp.of_layer("free")} for i, sp in enumerate(res.spectra)}
    summary["reference_seed"] = int(opts.reference_seed)
    chosen = roles[roles["verdict"] == "selective"]
    summary["roles"] = {"n_heads_with_roles": int((heads["roles"] != "").sum()),
                        "selective_heads_per_rule": {r: int((chosen["rule"] == r).sum()) for r in roles["rule"].unique()}}
    reps, meta = (_replicates(res, opt, heads, per_layer) if opt.n_boot else ({}, {}))
    if meta:
        meta["reference_seed"] = int(opts.reference_seed)   # the reference draws: a paired comparison needs them equal
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, roles=roles, spectra=spectra, summary=summary,
                     replicates=reps,
                     replicate_meta=meta)


def _replicates(res: StepResults, opt: TableOptions, heads, per_layer: list) -> tuple[dict, dict]:
    """The per-head bootstrap replicates of the diagnostic columns (:data:`.intervals.REPLICATE_COLUMNS`), each
    ``(n_boot, n_heads)`` float32 in the row order of ``heads``, and what identifies their weights and texts (seed,
    text ids, the real tokens of each text in the order of the ids, corpus size): the material of a paired
    comparison (:mod:`attnspec.comparing`). ``per_layer``: each layer's head replicates, as the tables computed
    them."""
    ids, lengths = res.spectra[0].corpus_texts() if res.spectra else (np.zeros(0, np.int64),) * 2
    tw = TextWeights(opt.seed, ids, opt.n_boot)
    per_layer = [r for r in per_layer if r is not None]        # the tables' (build_tables(replicates=...))
    if len(per_layer) != len(res.fit_sums):
        per_layer = []
    layer_of, head_of = heads["layer"].to_numpy(int), heads["head"].to_numpy(int)
    out: dict[str, np.ndarray] = {}
    names = [n for n in per_layer[0]] if per_layer else []
    for name in names:
        if all(name in r for r in per_layer):
            out[name] = np.concatenate([r[name] for r in per_layer], axis=1)
    mode = res.removal_plan.mode
    rem = removal_replicates(res.removal, exact=mode in EXACT_MODES, first_order=mode in ("screened", "first-order"))
    for name, x in rem.items():
        out[name] = x[:, layer_of, head_of]
    if "dead" in heads:          # zero output: the table's 0 (nothing departs), not NaN
        dead = heads["dead"].to_numpy(bool)
        for name in ("spec_w1_rel", "selection_score", "cka_excess"):
            if name in out:
                out[name][:, dead] = np.where(np.isfinite(out[name][:, dead]), out[name][:, dead], 0.0)
    reps = {k: np.asarray(v, dtype=np.float32) for k, v in out.items() if v.shape == (opt.n_boot, len(heads))}
    meta = {"seed": int(opt.seed), "n_boot": int(opt.n_boot), "text_ids": tw.ids,
            "text_lengths": lengths[np.argsort(ids, kind="stable")] if lengths.size == ids.size else lengths,
            "n_texts": int(res.corpus.n_texts),
            "n_tokens": int(res.corpus.n_tokens), "max_tokens": int(res.corpus.max_tokens)}
    return reps, meta


def _intervals(res: StepResults) -> bool:
    """Whether the texts and the replicates support intervals (else none is reported, no verdict given)."""
    return supports_intervals(res.corpus.n_texts, res.n_boot)
