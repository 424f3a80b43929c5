"""The summary of a diagnosis: what was run, label counts, rank agreement of the removal columns, notes."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from . import selection as sel
from .removal import spearman, spearman_table
from .steps.fit import CorpusStats
from .steps.tables import TableOptions

__all__ = ["build_summary", "removal_summary", "random_head_beta", "verdicts"]

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



def removal_summary(heads: pd.DataFrame, mode: str, screen_code, positions: int | None) -> dict:
    """Mode, scored positions and, when first-order and exact effects were both computed, their measured
    rank agreement: over all exactly removed heads and over the randomly sampled ones only (unbiased for
    the heads that first order alone ranks)."""
    out = {"mode": mode, "positions_per_text": positions}
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


def _notes(sites, corpus: CorpusStats, min_tokens: int, adapter=None) -> list[str]:
    notes = []
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
    fit at the head's scale, same masks). Negative: ``beta_hat`` underestimates hot heads on short texts."""
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
    """How the labels were decided: replicates, interval level, nominal false-positive rate, token minimum."""
    from .bootstrap import LEVEL
    return {"n_boot": opt.n_boot, "interval_level": LEVEL if opt.n_boot else None,
            "selective_if": "selection_score_lo >= selection_threshold" if opt.n_boot else "selection_score >= threshold",
            "diffuse_or_sparse_if": "selection_score_hi < selection_threshold" if opt.n_boot else "score < threshold",
            "nominal_false_positive_rate_selective": round((1 - LEVEL) / 2, 6) if opt.n_boot else None,
            "min_tokens_for_verdict": opt.min_tokens,
            "no_verdict": "cka_excess (an interval, no calibrated threshold: see docs/columns.md)"}


def build_summary(adapter, heads, corpus: CorpusStats, opt: TableOptions, timings, source, max_length, bucket_size,
             seed, model_name) -> dict:
    sites = adapter.sites
    counts = {f"n_{k}": int((heads["selection"] == k).sum()) for k in sel.LABELS}
    summary = {
        "model": model_name, "family": adapter.family, "kind": adapter.kind,
        "attn_implementation": getattr(getattr(adapter.model, "config", None), "_attn_implementation", None),
        "n_layers": len(sites), "n_heads": int(sum(s.n_heads for s in sites)), "n_texts": corpus.n_texts,
        "n_tokens": corpus.n_tokens, "max_tokens_per_text": corpus.max_tokens, "texts": source,
        "max_length": max_length, "bucket_size": bucket_size,
        "removal_effect": opt.effect_name if opt.removal in ("exact", "screened") else None, "activation_reuse": bool(adapter.can_reuse),
        "selection_threshold": opt.threshold, "beta_max_diffuse": sel.BETA_MAX_DIFFUSE,
        "min_tokens_for_label": opt.min_tokens, **counts, "verdicts": verdicts(opt),
        "random_head_beta_hat": random_head_beta(heads),
        "selection_score_quantiles": {str(q): float(heads["selection_score"].quantile(q)) for q in (0.1, 0.5, 0.9)},
        "spearman": spearman_table(heads), "notes": _notes(sites, corpus, opt.min_tokens, adapter),
        "seed": seed, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "torch_threads": torch.get_num_threads(),
    }
    if source == "builtin":
        from ..data import CORPUS_SOURCE
        summary["corpus"] = CORPUS_SOURCE
    return summary
