"""Diffuse-attention detection: normalized attention entropy against the Gaussian-equivalent null.

For a query with n allowed keys, the normalized entropy of its attention row is
``h = -sum_j A_ij log A_ij / log n`` (1 = uniform). The Gaussian-equivalent null of a head
(docs/theory.md, sections "Model and normalization" and "The Gaussian equivalent") is a random head:
scores S_ij iid N(0, 1), attention softmax(beta * S).
Its expected normalized entropy ``h_null(n, beta)`` (about ``1 - beta^2 / (2 log n)`` for large n)
is computed here exactly by a fixed-seed Monte-Carlo average and cached.

The *selection score* of a query is ``h_null(n, beta) - h``: about 0 (or negative) when the
attention row is as flat as a random head's — the head does not select — and positive when it
concentrates on a few keys. A query is *diffuse* when its selection score is <= ``margin``; a head
is flagged diffuse when its mean selection score over queries (and inputs) is <= ``margin``.

This is the zoo's own stand-in for the library's selection score: :data:`SELECTION_SCORE` is the
function the diffuse-correction model calls (``probs, allowed, beta -> [B, H, L]``) and can be
replaced by the library's one.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

__all__ = ["null_normalized_entropy", "normalized_entropy", "entropy_selection_score", "SELECTION_SCORE",
           "head_diffuse_table", "DEFAULT_MARGIN"]

DEFAULT_MARGIN = 0.0


@functools.lru_cache(maxsize=4096)
def null_normalized_entropy(n: int, beta: float, draws: int = 4096) -> float:
    """E[H(softmax(beta g)) / log n], g ~ N(0, I_n); NaN for n < 2. Deterministic (seed 0)."""
    if n < 2:
        return float("nan")
    g = np.random.default_rng(0).standard_normal((draws, n)) * beta
    g -= g.max(axis=1, keepdims=True)
    p = np.exp(g)
    p /= p.sum(axis=1, keepdims=True)
    H = -(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1)
    return float(H.mean() / math.log(n))


def normalized_entropy(probs: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """probs [B, H, L, L], allowed broadcastable bool -> (h [B, H, L], n [B, H, L] allowed keys).

    h is NaN where fewer than 2 keys are allowed."""
    allowed = allowed.expand_as(probs)
    n = allowed.sum(-1)
    plogp = torch.where(probs > 0, probs * torch.log(probs.clamp_min(1e-30)), torch.zeros_like(probs))
    H = -(plogp * allowed).sum(-1)
    logn = torch.log(n.clamp_min(2).to(probs.dtype))
    h = torch.where(n >= 2, H / logn, torch.full_like(H, float("nan")))
    return h, n


def entropy_selection_score(probs: torch.Tensor, allowed: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Selection score per query, ``h_null(n, beta) - h`` ([B, H, L]; NaN where n < 2)."""
    h, n = normalized_entropy(probs, allowed)
    uniq = torch.unique(n)
    table = torch.tensor([null_normalized_entropy(int(u), round(float(beta), 6)) for u in uniq.tolist()],
                         dtype=probs.dtype, device=probs.device)
    null = table[torch.searchsorted(uniq, n)]
    return null - h


#: the selection score the diffuse-correction model uses; swap for the library's when it exists
SELECTION_SCORE = entropy_selection_score


def head_diffuse_table(records: dict, margin: float = DEFAULT_MARGIN, score_fn=None):
    """Per-head table from recorded attention (``name -> list[AttentionRecord]``).

    Returns a pandas DataFrame with one row per (block, head): ``block``, ``path``, ``head``,
    ``selection`` (mean selection score), ``entropy`` (mean normalized entropy), ``diffuse_queries``
    (fraction of queries with score <= margin) and ``diffuse`` (head flagged: mean score <= margin).
    """
    import pandas as pd

    score_fn = score_fn or entropy_selection_score
    rows = []
    for name, recs in records.items():
        if not recs:
            continue
        probs = torch.cat([r.probs for r in recs])
        allowed = torch.cat([r.allowed for r in recs])[:, None]
        beta = recs[0].beta
        sc = score_fn(probs, allowed, beta)
        h, _ = normalized_entropy(probs, allowed)
        path = recs[0].path
        for hd in range(probs.shape[1]):
            s = sc[:, hd]
            ok = ~torch.isnan(s)
            rows.append(dict(block=name, path=path, head=hd, selection=float(s[ok].mean()),
                             entropy=float(h[:, hd][ok].mean()),
                             diffuse_queries=float((s[ok] <= margin).float().mean()),
                             diffuse=bool(float(s[ok].mean()) <= margin)))
    return pd.DataFrame(rows)
