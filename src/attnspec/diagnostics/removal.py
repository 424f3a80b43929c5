"""Head-removal sensitivity: spectral shift, exact functional effect, first-order importance.

For every head ``h`` of layer ``i``:

* ``removal_spec_shift`` (a): ``W1(spec Y, spec (Y - Y_h)) / m1(spec Y)``, the shift of the layer's
  centered output spectrum (normalized as in :mod:`~attnspec.diagnostics.spectral`, both with the full
  layer's value-path power) when the head is removed. ``removal_spec_shift_ge``: the same shift for the
  layer's Gaussian equivalent (every head's attention replaced by its fitted surrogate, same inputs,
  values and ``W_O``) losing the same head, i.e. what the Gaussian-equivalent law of the ``H - 1``
  remaining heads predicts (docs/theory.md, section *From theory to diagnosis*). A head whose actual shift exceeds the prediction
  shapes the layer's spectrum beyond its noise-like part;
* ``removal_effect`` (b): exact, by ablation (:func:`attnspec.models.exact_removal`): the increase of
  next-token cross-entropy per predicted token (nats; column ``loss_increase``) for causal LMs, the mean
  ``1 - cos`` between mean-pooled final hidden states with and without the head for encoders
  (column ``embedding_shift``). ``removal_effect_mean``: the same with the head's context replaced by
  its mean over real tokens and texts (mean ablation) instead of zero, when requested;
* ``michel_importance`` (c): Michel et al. (2019) ``E_x |dL/dxi_h|`` from one backward pass
  (:func:`attnspec.models.michel_importance`), normalized by its l2 norm over the heads of the layer
  as in the paper; ``michel_importance_raw`` before that normalization (comparable across layers).

:func:`spearman_table` reports the Spearman rank correlations between (a), (b) and (c) over all heads.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from ..spectra import moments, wasserstein1

__all__ = ["spectral_shift", "normalize_per_layer", "spearman", "spearman_table"]


def spectral_shift(full: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """``W1(full, removed_h) / m1(full)`` for each row ``removed[h]``."""
    m1 = float(moments(full, 1)[0])
    return np.array([wasserstein1(full, r) / m1 if m1 > 0 else np.nan for r in removed])


def normalize_per_layer(raw: np.ndarray) -> np.ndarray:
    """Michel et al.: divide each layer's importances by their l2 norm over the layer's heads."""
    norm = np.sqrt(np.nansum(raw ** 2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return raw / norm


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson correlation of the ranks (ties get their average rank)."""
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_table(heads: pd.DataFrame, cols=("removal_spec_shift", "removal_effect", "removal_first_order",
                                                "michel_importance_raw")) -> dict:
    """Spearman correlations between the removal columns present (pairs named ``a~b``)."""
    out = {}
    cols = [c for c in cols if c in heads and heads[c].notna().sum() > 2]
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            ok = heads[a].notna() & heads[b].notna()
            out[f"{a}~{b}"] = spearman(heads.loc[ok, a].to_numpy(), heads.loc[ok, b].to_numpy())
    return out
