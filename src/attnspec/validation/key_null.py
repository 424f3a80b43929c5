"""The key-null temperature correction computed beside a diagnosis, as the fit step would accumulate it.

:func:`attnspec.diagnostics.intervals.corrected_beta` uses the key null (a random query against the
head's own keys at the head's row temperatures, :func:`attnspec.diagnostics.identification.key_null_weights`)
when the step-2 fit sums carry its sums. Until the fit step records the keys, :func:`key_null_fit` runs the
same accumulation on its own: the model's forward records (:func:`attnspec.diagnostics.steps.collect.record`),
the heads' weights tile by tile, the key null's queries drawn per text and row (:class:`.noise.TextNoise`,
purpose :data:`KEY_NULL_DRAW`), the per-text sums and their Poisson bootstrap re-weightings with the
diagnosis' text weights (:func:`attnspec.diagnostics.bootstrap.weights`). Its ``beta_hat`` and
``score_scale`` equal the diagnosis' to rounding, so its ``beta_corrected_keys`` and interval are what
the diagnosis reports once the fit step passes the keys to :func:`.identification.score_sums`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..diagnostics import identification as ident
from ..diagnostics.bootstrap import LEVEL, N_BOOT, interval, weighted, weights
from ..diagnostics.intervals import corrected_beta
from ..diagnostics.noise import TextNoise
from ..diagnostics.steps.collect import LayerBatch, layer_batches, record
from ..models import adapt, make_batches
from ..models.attention_calls import AttentionCall

__all__ = ["KEY_NULL_DRAW", "head_keys", "layer_key_null_sums", "key_null_fit"]

#: Purpose of the key null's query draws (one part of their seed; next after :class:`.noise.Draw`'s members).
KEY_NULL_DRAW = 6


def _add(a: dict | None, b: dict) -> dict:
    return dict(b) if a is None else {k: a[k] + b[k] for k in a}


def head_keys(call: AttentionCall, dtype: torch.dtype) -> torch.Tensor:
    """``(B, H, L, d)`` keys each query head reads (a shared key head repeated for its query heads), on the CPU.

    Examples
    --------
    >>> import torch
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()                     # a 2-layer, 2-head GPT-2 on 2 texts of 6 tokens
    >>> head_keys(record(ad, batch)[0], torch.float64).shape
    torch.Size([2, 2, 6, 16])
    """
    rep = call.n_heads // call.n_kv_heads
    k = call.key.to(device="cpu", dtype=dtype)
    return k.repeat_interleave(rep, dim=1) if rep > 1 else k


def layer_key_null_sums(lb: LayerBatch, keys: torch.Tensor, seed: int, n_boot: int = N_BOOT) -> tuple[dict, dict]:
    """The head's and its key null's fit sums over one layer batch, and their bootstrap replicates.

    Parameters
    ----------
    lb : LayerBatch
    keys : torch.Tensor
        ``(B, H, L, d)`` (:func:`head_keys`).
    seed, n_boot : int
        The diagnosis' seed (draws and text weights) and number of replicates.

    Returns
    -------
    totals, replicates : dict
        ``N, sxx, sxy, syy, knull_sxx, knull_sxy, knull_syy``: ``(H,)`` each, and ``(n_boot, H)``.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()                     # a 2-layer, 2-head GPT-2 on 2 texts
    >>> rec = record(ad, batch)
    >>> lb = layer_batches(ad, batch, rec)[0]
    >>> tot, boot = layer_key_null_sums(lb, head_keys(rec[0], lb.dtype), seed=0, n_boot=5)
    >>> sorted(tot), boot["knull_sxy"].shape
    (['N', 'knull_rsxy', 'knull_sxx', 'knull_sxy', 'knull_syy', 'rsxy', 'sxx', 'sxy', 'syy'], (5, 2))
    >>> bool(np.allclose(tot["knull_sxx"], tot["sxx"], rtol=1e-5))     # row temperatures matched
    True
    """
    H, d = keys.shape[1], keys.shape[-1]
    noise = TextNoise(seed, KEY_NULL_DRAW, lb.index, lb.order, lb.valid)
    w = weights(seed, lb.order, n_boot)
    tot = boot = None
    for rows in lb.tiles():
        A, al = lb.weights_of(rows), lb.allowed[:, rows]
        G = noise.rows(rows, (H,), (d,), dtype=lb.dtype)
        per = ident.score_sums(A, al, per_text=True, keys=keys, queries=G)
        tot = _add(tot, {k: v.sum(0) for k, v in per.items()})
        boot = _add(boot, {k: weighted(w, v) for k, v in per.items()})
    return tot, boot


def key_null_fit(model, tokenizer, texts, seed: int = 0, n_boot: int = N_BOOT, max_length: int = 128,
                 bucket_size: int = 16, level: float = LEVEL) -> pd.DataFrame:
    """Per head: ``score_scale`` and ``beta_corrected_keys`` with their intervals, ``beta_hat``, ``beta_null_keys``.

    ``beta_corrected_keys = beta_hat + score_scale - beta_null_keys``
    (:func:`attnspec.diagnostics.intervals.corrected_beta`), its percentile interval from the same
    Poisson replicates as :func:`attnspec.diagnose` with the same ``seed`` and ``n_boot`` (texts keyed by
    their position in ``texts``). Heads whose attention is captured without its keys get NaN.

    Parameters
    ----------
    model, tokenizer
        As for :func:`attnspec.diagnose`.
    texts : list of str
    seed, n_boot, max_length, bucket_size : int
        As for :func:`attnspec.diagnose`.
    level : float

    Returns
    -------
    pandas.DataFrame
        Columns ``layer, head, score_scale, score_scale_lo, score_scale_hi, beta_hat, beta_null_keys,
        beta_corrected_keys, beta_corrected_keys_lo, beta_corrected_keys_hi``.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> df = key_null_fit(model, tok, ["The cat sat on the mat.", "A dog ran home, then it slept."], n_boot=20)
    >>> len(df), bool((df["beta_corrected_keys_lo"] <= df["beta_corrected_keys_hi"]).all())
    (72, True)
    """
    adapter = adapt(model)
    sums: dict[int, list] = {}
    with torch.no_grad():
        for batch in make_batches(tokenizer, texts, max_length, bucket_size):
            records = record(adapter, batch)
            for lb, rec in zip(layer_batches(adapter, batch, records), records):
                if not isinstance(rec, AttentionCall):
                    continue
                tot, boot = layer_key_null_sums(lb, head_keys(rec, lb.dtype), seed, n_boot)
                prev = sums.get(lb.index, [None, None])
                sums[lb.index] = [_add(prev[0], tot), _add(prev[1], boot)]
    rows = []
    for layer, (tot, boot) in sorted(sums.items()):
        f, fr = ident.fit_from_sums(tot), ident.fit_from_sums(boot)
        lo, hi = interval(corrected_beta(boot), level)
        s_lo, s_hi = interval(fr["score_scale"], level)
        rows.append(pd.DataFrame({"layer": layer, "head": np.arange(f["beta_hat"].shape[0]),
                                  "score_scale": f["score_scale"], "score_scale_lo": s_lo, "score_scale_hi": s_hi,
                                  "beta_hat": f["beta_hat"],
                                  "beta_null_keys": ident.symmetric_slopes(tot)["beta_null_keys"],
                                  "beta_corrected_keys": corrected_beta(tot),
                                  "beta_corrected_keys_lo": lo, "beta_corrected_keys_hi": hi}))
    return pd.concat(rows, ignore_index=True)
