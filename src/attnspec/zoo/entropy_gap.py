"""Flat-attention detection inside the zoo: the entropy gap of a query to the Gaussian-equivalent null.

For a query with n allowed keys, the normalized entropy of its attention row is
``h = -sum_j A_ij log A_ij / log n`` (1 = uniform). The null is a random head: scores S_ij iid
N(0, 1), attention softmax(beta * S) (docs/theory.md, "The Gaussian equivalent"). Its expected
normalized entropy ``h_null(n, beta)`` (about ``1 - beta^2 / (2 log n)`` for large n) is computed here
by a fixed-seed Monte-Carlo average and cached.

The *entropy gap* of a query is ``h_null(n, beta) - h``: about 0 (or negative) when the attention row
is as flat as a random head's, positive when it concentrates on a few keys. A query is *flat* when
its gap is <= ``margin``; a head is flagged ``flat`` when its mean gap over queries (and inputs) is
<= ``margin``. The diffuse-correction model (:mod:`attnspec.zoo.diffuse`) sharpens flat queries.

This is a per-query, in-model quantity and differs from the library's per-head ``selection_score``
(a spectral comparison with a null head, :mod:`attnspec.diagnostics`); its columns
(:func:`entropy_gap_table`) are named so that none collides with a column of the diagnosis tables.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

__all__ = ["null_normalized_entropy", "normalized_entropy", "entropy_gap", "entropy_gap_table", "DEFAULT_MARGIN"]

DEFAULT_MARGIN = 0.0


@functools.lru_cache(maxsize=4096)
def null_normalized_entropy(n: int, beta: float, draws: int = 4096) -> float:
    """E[H(softmax(beta g)) / log n], g ~ N(0, I_n); NaN for n < 2. Deterministic (seed 0).

    Examples
    --------
    >>> null_normalized_entropy(50, 0.0)
    1.0
    """
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

    ``h = H(p) / log n`` over the ``n`` allowed keys of each query; NaN where fewer than 2 keys are allowed.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[[[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]]]])
    >>> normalized_entropy(p, torch.ones(1, 1, 2, 4, dtype=torch.bool))
    (tensor([[[1., 0.]]]), tensor([[[4, 4]]]))
    """
    allowed = allowed.expand_as(probs)
    n = allowed.sum(-1)
    plogp = torch.where(probs > 0, probs * torch.log(probs.clamp_min(1e-30)), torch.zeros_like(probs))
    H = -(plogp * allowed).sum(-1)
    logn = torch.log(n.clamp_min(2).to(probs.dtype))
    h = torch.where(n >= 2, H / logn, torch.full_like(H, float("nan")))
    return h, n


def entropy_gap(probs: torch.Tensor, allowed: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Entropy gap per query, ``h_null(n, beta) - h`` ([B, H, L]; NaN where n < 2).

    Examples
    --------
    >>> import torch
    >>> ok = torch.ones(1, 1, 2, 10, dtype=torch.bool)
    >>> bool((entropy_gap(torch.full((1, 1, 2, 10), 0.1), ok) < 0).all())    # uniform rows: flatter than null
    True
    """
    h, n = normalized_entropy(probs, allowed)
    uniq = torch.unique(n)
    table = torch.tensor([null_normalized_entropy(int(u), round(float(beta), 6)) for u in uniq.tolist()],
                         dtype=probs.dtype, device=probs.device)
    null = table[torch.searchsorted(uniq, n)]
    return null - h


def entropy_gap_table(model, X, margin: float = DEFAULT_MARGIN):
    """Per-head entropy gaps of a zoo model on epochs X [B, C, T] (volts).

    The attention weights come from the library's capture on the model's adapter
    (:func:`attnspec.models.custom.custom_adapter`), and each block's allowed pairs from its structure
    mask. Returns a pandas DataFrame, one row per (block, head): ``block``, ``path``, ``head``,
    ``entropy_gap`` (mean over queries), ``normalized_entropy`` (mean h), ``flat_query_fraction``
    (fraction of queries with gap <= margin) and ``flat`` (mean gap <= margin).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> m = StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                            n_layers=1)
    >>> table = entropy_gap_table(m, 1e-5 * np.random.default_rng(0).standard_normal((2, 3, 64)))
    >>> table[["block", "path", "head"]].values.tolist()
    [['layers.0.attn', 'time', 0], ['layers.0.attn', 'time', 1]]
    """
    import pandas as pd

    from ..models.custom import custom_adapter, custom_inputs
    from ..models.hooks import capture

    model.eval()
    adapter = custom_adapter(model)
    batch = custom_inputs(adapter, X)
    with torch.no_grad(), capture(adapter.sites) as cap:
        adapter.run(batch)
    rows = []
    for site, probs in zip(adapter.sites, cap.weights):
        allowed = site.allowed(batch["attention_mask"])[:, None]
        gap = entropy_gap(probs, allowed, site.module.beta)
        h, _ = normalized_entropy(probs, allowed)
        ok = ~torch.isnan(gap)
        for hd in range(probs.shape[1]):
            g, m = gap[:, hd], ok[:, hd]
            mean = float(g[m].mean())
            rows.append(dict(block=site.name, path=site.path, head=hd, entropy_gap=mean,
                             normalized_entropy=float(h[:, hd][m].mean()),
                             flat_query_fraction=float((g[m] <= margin).float().mean()), flat=bool(mean <= margin)))
    return pd.DataFrame(rows)
