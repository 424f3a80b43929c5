"""The summary of a diagnosis: what was run, label counts, rank agreement of the removal columns, notes."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import torch

from ..statistics import selection as sel
from ..statistics.bootstrap import N_BOOT
from ..statistics.devices import statistics_device
from ..statistics.removal import spearman, spearman_table
from ..pipeline.fit import CorpusStats
from ..pipeline.removal_plan import EXACT_MODES, RemovalPlan
from .tables import TableOptions

__all__ = ["build_summary", "removal_summary", "random_head_beta", "verdicts", "options_used"]

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
             "in selection and in dependence (scores are still reported; more texts give labels).")
_NOTE_NO_INTERVALS = ("no intervals: {why}; every interval is NaN and every verdict 'undetermined' (selection, "
                      "query_selection, dependence); the scores are still reported.")



def options_used(adapter, opts, mode: str, source: str, plan: RemovalPlan | None = None) -> dict:
    """What the diagnosis was asked and what it used: ``options`` (every field of the
    :class:`attnspec.DiagnoseOptions`), ``options_not_applied`` (the options set to something other than their
    default that this model, these inputs or this removal mode ignore, each with the reason), the model's
    ``dtype`` and ``device`` (of its first parameter), and ``statistics_device``, where the statistics ran
    (:func:`..statistics.devices.statistics_device`).

    Parameters
    ----------
    adapter : ModelAdapter
    opts : DiagnoseOptions
    mode : str
        The removal mode used (``'auto'`` resolved).
    source : str
        Where the texts came from: ``'builtin'``, ``'user'`` or ``'inputs'`` (batches given directly).
    plan : RemovalPlan, optional
        The removal plan used (adaptive or not).

    Returns
    -------
    dict

    Examples
    --------
    >>> from attnspec.diagnostics import DiagnoseOptions
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, _ = tiny_causal_lm()
    >>> u = options_used(ad, DiagnoseOptions(removal="none", removal_vocab=64, screen_top=2), "none", "inputs")
    >>> sorted(u["options_not_applied"]), u["dtype"], u["device"], u["statistics_device"]
    (['removal_vocab', 'screen_top'], 'torch.float32', 'cpu', 'cpu')
    """
    import dataclasses
    exact = mode in EXACT_MODES
    causal = adapter.kind == "causal-lm"
    adaptive = plan is not None and plan.target is not None
    why = {
        "removal_positions": None if exact and causal else "scored positions apply to exact removal of a causal LM",
        "removal_vocab": None if exact and causal else "the LM loss's words apply to exact removal of a causal LM",
        "removal_texts": None if exact else "texts of exact removal (this mode removes no head exactly)",
        "removal_target": None if adaptive else "the agreement target applies to removal_texts='auto'",
        "screen_top": None if mode == "screened" else "applies to removal 'screened'",
        "screen_sample": None if mode == "screened" else "applies to removal 'screened'",
        "mean_ablation": None if exact else "mean ablation is a kind of exact removal",
        "n_texts": None if source != "inputs" else "counts texts (the inputs were given as batches)",
        "pack": None if source == "builtin" else "joins texts of the built-in corpus",
    }
    fields = {f.name: f.default for f in dataclasses.fields(opts)}
    used = dataclasses.asdict(opts)
    not_applied = {k: reason for k, reason in why.items() if reason is not None and used[k] != fields[k]}
    p = next(iter(adapter.model.parameters()), None)
    return {"options": used, "options_not_applied": not_applied,
            "dtype": str(p.dtype) if p is not None else None, "device": str(p.device) if p is not None else None,
            "statistics_device": str(statistics_device(opts.statistics_device, adapter.model))}


def removal_summary(heads: pd.DataFrame, plan: RemovalPlan, screen_code) -> dict:
    """Mode, scored positions, texts and words per position and, when first-order and exact effects were both
    computed, their measured rank agreement: over all exactly removed heads and over the randomly sampled ones
    only (unbiased for the heads that first order alone ranks).

    Parameters
    ----------
    heads : pandas.DataFrame
        The heads table (``layer``; ``removal_effect`` and ``removal_first_order`` when computed).
    plan : RemovalPlan
        What removal measured (:class:`..pipeline.removal_plan.RemovalPlan`).
    screen_code : numpy.ndarray of int, shape (n_layers, max heads), optional
        For ``'screened'``: 2 = among the top heads, 1 = randomly sampled, 0 = first order only.

    Returns
    -------
    dict
        ``mode``, ``positions_per_text``, ``texts`` and ``vocab_top`` (unless ``'none'``; ``'all'`` when not
        sampled), ``n_texts_used``, ``n_exact_heads``; for an adaptive plan (``removal_texts='auto'``) also
        ``texts_rule`` ``'auto'``, ``agreement_target``, ``predicted_agreement`` (the predicted Spearman
        correlation of the heads' ranking on these texts with the whole corpus') and ``stages`` (texts per stage);
        for ``'screened'`` also ``n_top``, ``n_sampled`` and the Spearman correlations
        ``spearman_first_order_exact_all`` / ``_sampled`` (``None`` under 3 heads).

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> heads = pd.DataFrame({"layer": [0, 0, 1], "removal_effect": [0.2, 0.1, np.nan]})
    >>> removal_summary(heads, RemovalPlan("exact", n_corpus=16), None)
    {'mode': 'exact', 'positions_per_text': None, 'texts': 'all', 'vocab_top': 'all', 'n_texts_used': 16,
     'n_exact_heads': 2}
    >>> plan = RemovalPlan.of("sampled", 16, seed=0).grown(9)
    >>> from dataclasses import replace
    >>> s = removal_summary(heads, replace(plan, predicted=0.93), None)
    >>> s["n_texts_used"], s["texts_rule"], s["agreement_target"], s["predicted_agreement"], s["stages"]
    (9, 'auto', 0.92, 0.93, [6, 9])
    """
    mode = plan.mode
    out = {"mode": mode, "positions_per_text": plan.positions}
    if mode != "none":
        out.update(texts=sorted(plan.texts) if plan.texts else "all", vocab_top=plan.vocab_top or "all",
                   n_texts_used=plan.n_texts)
        if plan.target is not None:
            out.update(texts_rule="auto", agreement_target=plan.target,
                       predicted_agreement=None if plan.predicted is None else round(float(plan.predicted), 4),
                       stages=list(plan.stages))
    if "removal_effect" in heads:
        out["n_exact_heads"] = int(heads["removal_effect"].notna().sum())
    if mode == "screened" and screen_code is not None:
        code = np.concatenate([screen_code[i, :n] for i, n in enumerate(heads.groupby("layer").size())])
        ex, fo = heads["removal_effect"].to_numpy(), heads["removal_first_order"].to_numpy()
        out["n_top"], out["n_sampled"] = int((code == 2).sum()), int((code == 1).sum())
        for name, keep in (("spearman_first_order_exact_all", code > 0), ("spearman_first_order_exact_sampled", code == 1)):
            out[name] = spearman(fo[keep], ex[keep]) if keep.sum() > 2 else None
    return out


_NOTE_BASE = ("{name} has no LM head (a base model): removal effects are the representation shift (1 - cos of the "
              "mean-pooled final hidden states), not a loss increase.")


_NOTE_LOSS = ("model loss: the unmodified model predicts these texts at {loss:.2f} nats per token, worse than a uniform "
              "guess over its {V:,} words (log V = {logV:.2f}): it is probably mis-loaded (a transformers version "
              "that builds this architecture differently, a foreign tokenizer, damaged weights), and the diagnosis "
              "describes that other function.")
#: A model whose mean NLL exceeds ``log V`` by more than this (nats) gets :data:`_NOTE_LOSS` (random-init models sit
#: within about 0.1 of ``log V``; Gemma 3 270M as one GPU machine's software stack built it sat 0.72 above).
LOSS_MARGIN = 0.5


def loss_note(loss: float | None, vocab: int | None) -> str | None:
    """The note (and warning) for a causal LM that predicts its texts worse than a uniform guess, else None.

    Examples
    --------
    >>> loss_note(4.5, 262_144) is None, loss_note(13.2, 262_144)[:41]
    (True, 'model loss: the unmodified model predicts')
    """
    if loss is None or not vocab or loss <= np.log(vocab) + LOSS_MARGIN:
        return None
    return _NOTE_LOSS.format(loss=loss, V=int(vocab), logV=float(np.log(vocab)))


def _notes(sites, corpus: CorpusStats, min_tokens: int, adapter=None, n_boot: int = N_BOOT) -> list[str]:
    notes = []
    if not n_boot:
        from ..statistics.bootstrap import MIN_REPLICATES, MIN_TEXTS_FOR_INTERVALS
        why = (f"{corpus.n_texts} text(s), fewer than the {MIN_TEXTS_FOR_INTERVALS} a bootstrap over texts needs"
               if corpus.n_texts < MIN_TEXTS_FOR_INTERVALS
               else f"n_boot below {MIN_REPLICATES} (the fewest replicates of a percentile interval)")
        notes.append(_NOTE_NO_INTERVALS.format(why=why))
    if adapter is not None and adapter.kind == "encoder" and getattr(adapter, "decoder", False):
        notes.append(_NOTE_BASE.format(name=type(adapter.model).__name__))
    notes.extend(getattr(adapter, "notes", ()))   # the adapter's own statement (encoder-decoders: decoder input, removal)
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


def random_head_beta(heads: pd.DataFrame) -> dict:
    """What ``beta_hat`` returns for a random head at these text lengths: per band of ``score_scale``, the
    heads in it and the median relative bias ``beta_null / score_scale - 1`` (``beta_null``: the null head's
    fit at the head's scale, same masks). Negative: ``beta_hat`` underestimates hot heads on short texts.

    Parameters
    ----------
    heads : pandas.DataFrame
        The heads table with ``score_scale`` and ``beta_null`` (without ``beta_null``: empty result).

    Returns
    -------
    dict
        ``'score_scale_{lo}_to_{hi}'`` -> ``{'heads': n, 'median_relative_bias': float}`` for the bands
        [0, 1), [1, 1.5), [1.5, 2.5), [2.5, inf) that hold a head.

    Examples
    --------
    >>> import pandas as pd
    >>> heads = pd.DataFrame({"score_scale": [0.5, 0.8, 2.0], "beta_null": [0.45, 0.8, 1.6]})
    >>> random_head_beta(heads)
    {'score_scale_0_to_1': {'heads': 2, 'median_relative_bias': -0.05},
     'score_scale_1.5_to_2.5': {'heads': 1, 'median_relative_bias': -0.2}}
    """
    if "beta_null" not in heads:
        return {}
    out = {}
    s, b = heads["score_scale"].to_numpy(float), heads["beta_null"].to_numpy(float)
    for lo, hi in ((0.0, 1.0), (1.0, 1.5), (1.5, 2.5), (2.5, np.inf)):
        keep = (s >= lo) & (s < hi) & np.isfinite(b) & (s > 0)
        if keep.any():
            out[f"score_scale_{lo:g}_to_{hi:g}"] = {"heads": int(keep.sum()),
                                                    "median_relative_bias": float(np.median(b[keep] / s[keep] - 1))}
    return out


def verdicts(opt: TableOptions) -> dict:
    """How the labels were decided: replicates, interval level, rules, nominal false-positive rates, token minimum.

    ``selection``: ``selective`` when the lower bound of ``selection_score`` reaches the threshold.
    ``dependence`` (pairs, :mod:`.dependence_verdict`): ``dependent`` when ``cka_excess_lo`` exceeds the
    layer background (median excess of the other pairs not sharing a key/value head) by the margin
    ``tau`` (:data:`.dependence_verdict.MARGINS`), ``independent`` when ``cka_excess_hi`` stays below
    background + ``tau``; a head is dependent when one of its pairs is. Each is a one-sided test at
    ``(1 - level) / 2`` for a score exactly at its threshold.

    Parameters
    ----------
    opt : TableOptions
        The tables' options (``n_boot``, ``min_tokens``).

    Returns
    -------
    dict
        ``n_boot``, ``interval_level``, the rules ``selective_if``, ``diffuse_or_sparse_if``, ``dependent_if``,
        ``independent_if``, ``head_dependent_if``, the margins ``dependence_margin`` (by attention mask), the
        nominal false-positive rates ``nominal_false_positive_rate_selective`` and ``_dependent``,
        ``min_tokens_for_verdict``. Without intervals (``n_boot`` 0: none asked for, or too few texts) every
        rule reads ``never``: every verdict is ``undetermined``.

    Examples
    --------
    >>> from attnspec.diagnostics.result.tables import TableOptions
    >>> v = verdicts(TableOptions(n_boot=200))
    >>> v["interval_level"], v["nominal_false_positive_rate_selective"], v["selective_if"]
    (0.95, 0.025, 'selection_score_lo >= selection_threshold')
    >>> v["dependent_if"], v["dependence_margin"]
    ('cka_excess_lo - cka_excess_background >= dependence_margin', {'bidirectional': 0.1, 'causal': 0.6})
    >>> verdicts(TableOptions(n_boot=0))["dependent_if"]
    'never (no intervals: every verdict undetermined)'
    """
    from ..statistics.bootstrap import LEVEL
    from ..statistics.query_selection import MARGIN as QS_MARGIN
    from .dependence_verdict import MARGINS
    b = bool(opt.n_boot)
    fpr = round((1 - LEVEL) / 2, 6) if b else None
    never = "never (no intervals: every verdict undetermined)"

    def rule(text: str) -> str:
        return text if b else never
    return {"n_boot": opt.n_boot, "interval_level": LEVEL if b else None,
            "selective_if": rule("selection_score_lo >= selection_threshold"),
            "diffuse_or_sparse_if": rule("selection_score_hi < selection_threshold"),
            "query_selective_if": rule("query_selection_score_lo >= query_selection_margin"),
            "query_not_selective_if": rule("query_selection_score_hi < query_selection_margin"),
            "query_selection_margin": QS_MARGIN,
            "nominal_false_positive_rate_selective": fpr,
            "dependent_if": rule("cka_excess_lo - cka_excess_background >= dependence_margin"),
            "independent_if": rule("cka_excess_hi - cka_excess_background < dependence_margin"),
            "head_dependent_if": "one of the head's pairs is dependent (dependence_partner: the partner)",
            "dependence_background": ("cka_excess_background: median cka_excess of the layer's other pairs that do "
                                      "not share a key/value head"),
            "dependence_margin": dict(MARGINS),
            "nominal_false_positive_rate_dependent": fpr,
            "min_tokens_for_verdict": opt.min_tokens}


def _dead(heads: pd.DataFrame) -> list:
    """``[[layer, head], ...]`` of the heads with zero output (column ``dead``)."""
    if "dead" not in heads:
        return []
    return [[int(r.layer), int(r.head)] for r in heads.loc[heads["dead"], ["layer", "head"]].itertuples()]


def _query_counts(heads: pd.DataFrame) -> dict:
    """Per-query selection beside the shared-target labels: ``n_query_selective`` (and not selective,
    undetermined) and ``query_selective_by_rule`` (selective heads per best rule); empty without the columns."""
    if "query_selection" not in heads:
        return {}
    out = {f"n_query_{k.replace(' ', '_')}": int((heads["query_selection"] == k).sum())
           for k in ("selective", "not selective", "undetermined")}
    sel_heads = heads[heads["query_selection"] == "selective"]
    out["query_selective_by_rule"] = {str(k): int(v) for k, v in sel_heads["query_selection_rule"].value_counts().items()}
    return out


def _dependence_counts(heads: pd.DataFrame, pairs: pd.DataFrame | None) -> dict:
    """``n_dependent_heads`` (and ``n_dependent_pairs`` when the pairs table is given); empty without the column."""
    out = {}
    if "dependence" in heads:
        out["n_dependent_heads"] = int((heads["dependence"] == "dependent").sum())
    if pairs is not None and "dependence" in pairs:
        out["n_dependent_pairs"] = int((pairs["dependence"] == "dependent").sum())
    return out


def build_summary(adapter, heads, corpus: CorpusStats, opt: TableOptions, timings, source, max_length, bucket_size,
             seed, model_name, pairs: pd.DataFrame | None = None, model_loss: float | None = None) -> dict:
    """The ``summary`` of a diagnosis: model, corpus, options, label counts, verdict rules, notes, timings.

    Parameters
    ----------
    adapter : ModelAdapter
        The diagnosed model (sites, kind, family).
    heads : pandas.DataFrame
        The heads table (``selection``, ``selection_score``; removal columns when computed).
    corpus : CorpusStats
        Texts and real tokens seen.
    opt : TableOptions
        Options of the tables.
    timings : dict of str to float
        Seconds per step (rounded to ms).
    source, max_length, bucket_size, seed, model_name
        Recorded as given (``source``: ``'builtin'`` adds the corpus' provenance).
    pairs : pandas.DataFrame, optional
        The pairs table: adds ``n_dependent_pairs``.
    model_loss : float, optional
        A causal LM's own mean NLL per scored position (the removal step's reference pass): adds
        ``model_loss_per_token``, and a note and a warning when it is worse than a uniform guess (:func:`loss_note`).

    Returns
    -------
    dict
        JSON-ready; ``n_selective`` ... ``n_undetermined`` count the labels, ``n_dependent_heads`` (and
        ``n_dependent_pairs``) the dependence verdicts, ``verdicts`` states the rules, ``notes`` say what limits the
        reading (causal masks, windows, shared keys and values, too few tokens).

    Examples
    --------
    >>> import pandas as pd
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> from attnspec.diagnostics.pipeline.fit import CorpusStats
    >>> from attnspec.diagnostics.result.tables import TableOptions
    >>> ad, batch = tiny_causal_lm()
    >>> heads = pd.DataFrame({"selection": ["diffuse", "undetermined", "diffuse", "selective"],
    ...                       "selection_score": [0.1, 0.5, -0.2, 1.0]})
    >>> s = build_summary(ad, heads, CorpusStats().update(batch), TableOptions(), {"fit": 0.01}, "user", 128, 8,
    ...                   0, "tiny")
    >>> s["n_layers"], s["n_heads"], s["n_tokens"], s["n_diffuse"], s["n_selective"]
    (2, 4, 12, 2, 1)
    >>> [n.split(":")[0] for n in s["notes"]]      # a causal LM, and 12 tokens is under the label minimum
    ['causal attention', '12 real tokens is below the minimum of 400 for a selection label']
    """
    sites = adapter.sites
    counts = {f"n_{k}": int((heads["selection"] == k).sum()) for k in sel.LABELS}
    summary = {
        "model": model_name, "family": adapter.family, "kind": adapter.kind,
        "attn_implementation": getattr(getattr(adapter.model, "config", None), "_attn_implementation", None),
        "n_layers": len(sites), "n_heads": int(sum(s.n_heads for s in sites)), "n_texts": corpus.n_texts,
        "n_tokens": corpus.n_tokens, "max_tokens_per_text": corpus.max_tokens, "texts": source,
        "max_length": max_length, "bucket_size": bucket_size,
        "removal_effect": opt.effect_name if opt.removal in EXACT_MODES else None, "activation_reuse": bool(adapter.can_reuse),
        "selection_threshold": opt.threshold, "beta_max_diffuse": sel.BETA_MAX_DIFFUSE,
        "min_tokens_for_label": opt.min_tokens, **counts, **_query_counts(heads), **_dependence_counts(heads, pairs),
        "verdicts": verdicts(opt),
        "random_head_beta_hat": random_head_beta(heads),
        "selection_score_quantiles": {str(q): float(heads["selection_score"].quantile(q)) for q in (0.1, 0.5, 0.9)},
        "spearman": spearman_table(heads), "notes": _notes(sites, corpus, opt.min_tokens, adapter, opt.n_boot),
        "dead_heads": _dead(heads),
        "seed": seed, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "torch_threads": torch.get_num_threads(),
    }
    if getattr(adapter, "toolkit", None):      # the interpretability toolkit the model came in (models.toolkits)
        summary["toolkit"] = dict(adapter.toolkit)
    if source == "builtin":
        from ...data import CORPUS_SOURCE
        summary["corpus"] = CORPUS_SOURCE
    if summary["dead_heads"]:
        summary["notes"].append(
            "dead heads (zero output: a pruned W_O or V slice), as [layer, head]: "
            f"{summary['dead_heads']}; their spectral columns are 0, selection undetermined, removal effect 0")
    if model_loss is not None:
        summary["model_loss_per_token"] = round(float(model_loss), 4)
        cfg = getattr(adapter.model, "config", None)
        note = loss_note(model_loss, getattr(getattr(cfg, "text_config", None) or cfg, "vocab_size", None))
        if note is not None:
            summary["notes"].append(note)
            warnings.warn(note, RuntimeWarning, stacklevel=2)
    return summary
