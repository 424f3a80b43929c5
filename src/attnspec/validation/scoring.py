"""Scoring diagnosis columns against planted truth: ROC AUC, false-positive rates, temperature errors.

Each entry of :data:`DETECTORS` names a planted property, a table (``heads`` or ``pairs``), a column,
the sign that makes a larger value mean "has the property", whether it is an attnspec
Gaussian-equivalence diagnostic (``'GE'``), another attnspec column (``'attnspec'``) or a literature
baseline (``'baseline'``), and the label rule attnspec applies to it, if any.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

__all__ = ["Detector", "DETECTORS", "roc_auc", "fpr_at_tpr", "score_detectors", "beta_errors", "null_beta_hat"]


@dataclass(frozen=True)
class Detector:
    """One column used as a detector of one planted property.

    Attributes
    ----------
    prop : {'selective', 'dependent', 'important'}
        The planted property (a bool column of the truth tables).
    table : {'heads', 'pairs'}
        The diagnosis table that holds ``column``.
    column : str
        The score; ``sign * column`` is larger for rows with the property.
    sign : float
        ``+1``: larger means the property; ``-1``: smaller.
    kind : {'GE', 'attnspec', 'baseline'}
        A Gaussian-equivalence diagnostic, another attnspec column, or a literature baseline.
    label : tuple of (str, str), optional
        ``(column, value)`` of attnspec's own decision on that property, if it makes one.

    Examples
    --------
    >>> det = Detector("selective", "heads", "entropy_ratio", -1.0, "baseline")
    >>> det.sign, det.label
    (-1.0, None)
    >>> [d.column for d in DETECTORS if d.prop == "selective"]
    ['selection_score', 'query_selection_score', 'entropy_ratio', 'confidence', 'score_scale',
     'previous_token_probe', 'induction_probe']
    """

    prop: str
    table: str
    column: str
    sign: float
    kind: str
    label: tuple[str, str] | None = None


def _detectors(prop: str, table: str, ge=(), attnspec=(), baseline=()) -> tuple[Detector, ...]:
    """Detectors of one property in one table, larger meaning the property: GE diagnostics, then other
    attnspec columns, then baselines."""
    kinds = (("GE", ge), ("attnspec", attnspec), ("baseline", baseline))
    return tuple(Detector(prop, table, column, 1.0, kind) for kind, columns in kinds for column in columns)


#: Every detector scored by :func:`score_detectors` (attnspec's columns and the literature baselines).
DETECTORS = (
    Detector("selective", "heads", "selection_score", 1.0, "GE", ("selection", "selective")),
    Detector("selective", "heads", "query_selection_score", 1.0, "GE", ("query_selection", "selective")),
    Detector("selective", "heads", "entropy_ratio", -1.0, "baseline"),     # lower entropy: more selective
    *_detectors("selective", "heads", baseline=("confidence", "score_scale", "previous_token_probe",
                                                  "induction_probe")),
    Detector("dependent", "pairs", "cka_excess", 1.0, "GE", ("dependence", "dependent")),
    Detector("dependent", "pairs", "cka_over_background", 1.0, "GE"),      # the dependence verdict's statistic
    *_detectors("dependent", "pairs", baseline=("cka", "attention_corr")),
    Detector("dependent", "heads", "cka_excess", 1.0, "GE", ("dependence", "dependent")),
    *_detectors("dependent", "heads", baseline=("cka_max",)),
    *_detectors("important", "heads", ge=("removal_spec_shift", "removal_spec_shift_ge"),
                attnspec=("removal_effect",), baseline=("michel_importance", "energy_share")),
)


def roc_auc(scores, positive) -> float:
    """ROC AUC (Mann-Whitney, ties count one half); NaN without positives, negatives or finite scores.

    Parameters
    ----------
    scores : array_like
        Larger means more likely positive; non-finite entries are dropped.
    positive : array_like of bool

    Returns
    -------
    float
        ``P(s_pos > s_neg) + P(s_pos = s_neg) / 2`` over all (positive, negative) pairs, from the rank sum
        of the positives.

    Examples
    --------
    >>> roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
    0.75
    >>> roc_auc([1, 1, 1, 1], [False, False, True, True])        # ties count one half
    0.5
    >>> roc_auc([1, 2], [True, True])                            # no negatives
    nan
    """
    s = np.asarray(scores, float)
    y = np.asarray(positive, bool)
    keep = np.isfinite(s)
    s, y = s[keep], y[keep]
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def fpr_at_tpr(scores, positive, tpr: float = 0.9) -> float:
    """False-positive rate at the highest threshold that flags at least ``tpr`` of the positives.

    Rows flagged: ``score >= t`` with ``t`` the ``ceil(tpr * n_pos)``-th largest positive score; NaN
    without positives or negatives. Non-finite scores are dropped.

    Examples
    --------
    >>> s = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    >>> y = [False, False, False, False, True, False, True, True, True, True]
    >>> fpr_at_tpr(s, y, 0.8)            # t = 0.7 flags no negative
    0.0
    >>> fpr_at_tpr(s, y, 1.0)            # t = 0.5 flags the negative at 0.6, one of five
    0.2
    """
    if not 0.0 < tpr <= 1.0:
        raise ValueError(f"tpr must be in (0, 1], got {tpr}")
    s = np.asarray(scores, float)
    y = np.asarray(positive, bool)
    keep = np.isfinite(s)
    s, y = s[keep], y[keep]
    if not y.any() or y.all():
        return float("nan")
    pos = np.sort(s[y])[::-1]
    t = pos[int(np.ceil(tpr * len(pos))) - 1]
    return float((s[~y] >= t).mean())


def _rates(flag: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    tpr = float(flag[positive].mean()) if positive.any() else float("nan")
    fpr = float(flag[~positive].mean()) if (~positive).any() else float("nan")
    return tpr, fpr


def _subsets(det: Detector, frame: pd.DataFrame) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(subset name, rows kept, positive) per evaluation: all positives, then each selective pattern."""
    positive = frame[det.prop].to_numpy(bool)
    out = [("all", np.ones(len(frame), bool), positive)]
    if det.prop == "selective" and "pattern" in frame:
        for p in sorted(set(frame.loc[positive, "pattern"])):
            keep = ~positive | (frame["pattern"].to_numpy() == p)
            out.append((p, keep, positive[keep]))
    return out


def score_detectors(heads: pd.DataFrame, pairs: pd.DataFrame, by: list[str],
                    detectors=DETECTORS) -> pd.DataFrame:
    """AUC, FPR at 90 % TPR and (where attnspec decides) label TPR/FPR, per detector and group.

    Parameters
    ----------
    heads, pairs : DataFrame
        Diagnosis tables merged with the planted truth (columns ``selective``, ``dependent``,
        ``important``, ``pattern``), stacked over runs with the grouping columns ``by``.
    by : list of str
        Grouping columns (e.g. ``['strength', 'n_texts']``); runs within a group are pooled.

    Returns
    -------
    DataFrame
        One row per group x detector x subset (subset ``'all'``, then one per selective pattern: the heads
        of that pattern against every negative): the grouping columns, ``property, unit, subset, diagnostic,
        kind, n_pos, n_neg, auc, fpr_at_tpr90``, and ``label_tpr, label_fpr`` for detectors with a label.
        Detectors whose column is absent are skipped.

    Examples
    --------
    Two runs of a four-head model whose head 0 is planted selective (class pattern):

    >>> import pandas as pd
    >>> heads = pd.DataFrame({
    ...     "run": [0, 0, 0, 0, 1, 1, 1, 1], "selective": [True, False, False, False] * 2,
    ...     "pattern": ["class", "", "", ""] * 2,
    ...     "selection_score": [2.0, 0.1, 0.3, 0.2, 0.4, 0.1, 0.9, 0.2],
    ...     "selection": ["selective", "diffuse", "diffuse", "diffuse",
    ...                   "undetermined", "diffuse", "selective", "diffuse"]})
    >>> res = score_detectors(heads, pd.DataFrame(), ["run"], DETECTORS[:1])
    >>> res[["run", "subset", "auc", "label_tpr", "label_fpr"]].round(3).values.tolist()
    [[0, 'all', 1.0, 1.0, 0.0], [0, 'class', 1.0, 1.0, 0.0], [1, 'all', 0.667, 0.0, 0.333], [1, 'class', 0.667, 0.0, 0.333]]
    """
    rows = []
    tables = {"heads": heads, "pairs": pairs}
    for det in detectors:
        table = tables[det.table]
        if det.column not in table:
            continue
        for key, grp in table.groupby(by, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            for subset, keep, positive in _subsets(det, grp):
                g = grp[keep]
                s = det.sign * g[det.column].to_numpy(float)
                row = dict(zip(by, key)) | {"property": det.prop, "unit": det.table, "subset": subset,
                                            "diagnostic": det.column,
                                            "kind": det.kind, "n_pos": int(positive.sum()),
                                            "n_neg": int((~positive).sum()), "auc": roc_auc(s, positive),
                                            "fpr_at_tpr90": fpr_at_tpr(s, positive)}
                if det.label is not None:
                    flag = (g[det.label[0]] == det.label[1]).to_numpy(bool)
                    row["label_tpr"], row["label_fpr"] = _rates(flag, positive)
                rows.append(row)
    return pd.DataFrame(rows)


def beta_errors(heads: pd.DataFrame, by: list[str], columns=("beta_hat", "score_scale")) -> pd.DataFrame:
    """Error of temperature estimates against ``planted_beta`` on heads without a planted pattern.

    Parameters
    ----------
    heads : DataFrame
        Diagnosis heads merged with the truth (``selective``, ``planted_beta``) and the ``columns``.
    by : list of str
        Grouping columns; runs within a group are pooled.
    columns : sequence of str
        The estimates of ``beta``.

    Returns
    -------
    DataFrame
        One row per group x planted beta x estimate: ``n``, ``mean`` of the estimate, ``bias`` (mean
        error), ``mae`` (mean absolute error), ``rel_mae`` (mae over the planted beta).

    Examples
    --------
    >>> import pandas as pd
    >>> heads = pd.DataFrame({"n_texts": 8, "selective": [False, False, False, True],
    ...                       "planted_beta": [2.0, 2.0, 2.0, 2.0], "beta_hat": [1.5, 1.7, 1.9, 9.0],
    ...                       "score_scale": [2.4, 2.2, 2.0, 9.0]})
    >>> beta_errors(heads, ["n_texts"])[["estimate", "n", "bias", "mae", "rel_mae"]].round(3).values.tolist()
    [['beta_hat', 3, -0.3, 0.3, 0.15], ['score_scale', 3, 0.2, 0.2, 0.1]]
    """
    h = heads[~heads["selective"]]
    rows = []
    for key, grp in h.groupby([*by, "planted_beta"], sort=True):
        beta = float(key[-1])
        for col in columns:
            err = grp[col].to_numpy(float) - beta
            rows.append(dict(zip([*by, "planted_beta"], key)) | {
                "estimate": col, "n": len(err), "mean": float(grp[col].mean()), "bias": float(err.mean()),
                "mae": float(np.abs(err).mean()), "rel_mae": float(np.abs(err).mean() / beta)})
    return pd.DataFrame(rows)


def null_beta_hat(beta: float, lengths, head_dim: int = 16, seed: int = 0, reps: int = 4,
                  causal: bool = False) -> float:
    """``beta_hat`` that attnspec's fit returns for a random head at inverse temperature ``beta``.

    Scores ``Q K^T / sqrt(head_dim)`` with iid standard normal ``Q, K`` for texts of the given
    ``lengths`` (no padding; ``causal``: query ``i`` sees keys ``j <= i``), row-centered over the allowed
    keys and rescaled so that their pooled root mean square is ``beta``; ``beta_hat = s * sum S y / sum S^2``
    with ``y = n_i A - 1`` over rows with at least two keys (as in
    :mod:`attnspec.diagnostics.identification`), pooled over texts and ``reps`` draws. The gap to ``beta``
    is the finite-length bias of the estimator, not a property of a model.

    Parameters
    ----------
    beta : float
        Planted inverse temperature (> 0).
    lengths : sequence of int
        Text lengths in tokens.
    head_dim : int
        Width of ``Q`` and ``K``.
    seed : int
        Seeds the draws.
    reps : int
        Draws per text.
    causal : bool
        Causal attention (query ``i`` sees keys ``j <= i``).

    Returns
    -------
    float

    Examples
    --------
    Nearly unbiased for a cool head; a hot head saturates (its softmax is nearly one-hot on short texts):

    >>> round(null_beta_hat(0.3, [16] * 4), 2)
    0.29
    >>> round(null_beta_hat(3.0, [16] * 4), 2)
    1.56
    >>> null_beta_hat(1.0, [1, 1])
    Traceback (most recent call last):
    ValueError: lengths must include a text of at least 2 tokens, got [1, 1]
    """
    lengths = [int(n) for n in lengths]
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not lengths or max(lengths) < 2:
        raise ValueError(f"lengths must include a text of at least 2 tokens, got {lengths}")
    if head_dim < 1 or reps < 1:
        raise ValueError(f"head_dim and reps must be >= 1, got head_dim={head_dim}, reps={reps}")
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for n in [n for n in lengths for _ in range(reps)]:
        q, k = torch.randn(2, n, head_dim, generator=gen, dtype=torch.float64)
        allowed = torch.ones(n, n, dtype=torch.bool)
        if causal:
            allowed = allowed.tril()
        allowed &= allowed.sum(1, keepdim=True) >= 2
        cnt = allowed.sum(1, keepdim=True).clamp_min(1)
        S = (q @ k.T / np.sqrt(head_dim)) * allowed
        rows.append(((S - S.sum(1, keepdim=True) / cnt) * allowed, allowed, cnt))
    s_raw = np.sqrt(sum(float(S.pow(2).sum()) for S, _, _ in rows) / sum(int(a.sum()) for _, a, _ in rows))
    sxy = sxx = 0.0
    for S, allowed, cnt in rows:
        S = S * (beta / s_raw)
        A = torch.softmax(S.masked_fill(~allowed, -torch.inf), 1).nan_to_num(0.0)
        y = (cnt * A - 1) * allowed
        sxy += float((S * y).sum())
        sxx += float((S * S).sum())
    return float(sxy / sxx * beta)
