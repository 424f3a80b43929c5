"""Head-removal sensitivity: spectral shift, exact functional effect, first-order importance.

For every head ``h`` of layer ``i``:

* ``removal_spec_shift`` (a): ``W1(spec Y, spec (Y - Y_h)) / m1(spec Y)``, the shift of the layer's
  centered output spectrum (normalized as in :mod:`~attnspec.diagnostics.statistics.spectral`, both with the full
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
from ...spectra import moments, wasserstein1

__all__ = ["spectral_shift", "normalize_per_layer", "spearman", "spearman_table"]


def spectral_shift(full: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Shift of a spectrum when each head is removed, relative to its first moment.

    ``shift[h] = W1(full, removed[h]) / m1(full)``: the 1-Wasserstein distance between the empirical
    distributions of the eigenvalues, divided by the mean eigenvalue of ``full`` (NaN when it is 0).

    Parameters
    ----------
    full : numpy.ndarray
        ``(n,)`` eigenvalues of the whole layer's output.
    removed : numpy.ndarray
        ``(H, n)`` eigenvalues with head ``h`` removed, one row per head.

    Returns
    -------
    numpy.ndarray
        ``(H,)`` non-negative.

    Examples
    --------
    Removing a head that halves every eigenvalue moves the spectrum by half its mean:

    >>> import numpy as np
    >>> full = np.array([1., 2., 3.])
    >>> spectral_shift(full, np.stack([full, full / 2]))
    array([0. , 0.5])
    """
    m1 = float(moments(full, 1)[0])
    return np.array([wasserstein1(full, r) / m1 if m1 > 0 else np.nan for r in removed])


def normalize_per_layer(raw: np.ndarray) -> np.ndarray:
    """Divide each layer's head importances by their l2 norm over the layer's heads (Michel et al. 2019).

    ``out[i, h] = raw[i, h] / sqrt(sum_g raw[i, g]^2)``, NaN entries left out of the norm.

    Parameters
    ----------
    raw : numpy.ndarray
        ``(n_layers, H)`` importances.

    Returns
    -------
    numpy.ndarray
        ``(n_layers, H)``, each row of unit l2 norm (NaN for an all-zero row).

    Examples
    --------
    >>> import numpy as np
    >>> normalize_per_layer(np.array([[3., 4.], [1., np.nan]]))
    array([[0.6, 0.8],
           [1. , nan]])
    """
    norm = np.sqrt(np.nansum(raw ** 2, axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return raw / norm


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: the Pearson correlation of the ranks (ties get their average rank).

    Parameters
    ----------
    x, y : numpy.ndarray
        ``(n,)`` paired values, without NaN.

    Returns
    -------
    float
        In [-1, 1]; 1 for any increasing relation.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1., 2., 3., 4.])
    >>> spearman(x, np.exp(x)), spearman(x, -x ** 3)
    (1.0, -1.0)
    """
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_table(heads: pd.DataFrame, cols=("removal_spec_shift", "removal_effect", "removal_first_order",
                                                "michel_importance_raw")) -> dict:
    """Spearman correlations between the removal columns of a head table, pair by pair.

    Only the columns of ``cols`` present in ``heads`` with more than two values are used; each pair
    is correlated over the heads where both are defined.

    Parameters
    ----------
    heads : pandas.DataFrame
        One row per head (``Diagnosis.heads``).
    cols : sequence of str, optional
        Columns to compare, in order.

    Returns
    -------
    dict
        ``{"a~b": rho}`` for every pair ``a`` before ``b`` in ``cols``.

    Examples
    --------
    >>> import pandas as pd
    >>> heads = pd.DataFrame({"removal_spec_shift": [.1, .3, .2, .4],
    ...                       "removal_effect": [1., 3., 2., None],
    ...                       "michel_importance_raw": [4., 3., 2., 1.]})
    >>> spearman_table(heads)
    {'removal_spec_shift~removal_effect': 1.0, 'removal_spec_shift~michel_importance_raw': -0.8,
     'removal_effect~michel_importance_raw': -0.5}
    """
    out = {}
    cols = [c for c in cols if c in heads and heads[c].notna().sum() > 2]
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            ok = heads[a].notna() & heads[b].notna()
            out[f"{a}~{b}"] = spearman(heads.loc[ok, a].to_numpy(), heads.loc[ok, b].to_numpy())
    return out
