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
    """One column used as a detector of one planted property."""

    prop: str           # 'selective', 'dependent', 'important'
    table: str          # 'heads' or 'pairs'
    column: str
    sign: float         # +1: larger means the property; -1: smaller
    kind: str           # 'GE', 'attnspec', 'baseline'
    label: tuple[str, str] | None = None   # (column, value) of attnspec's decision, if it has one


DETECTORS = (
    Detector("selective", "heads", "selection_score", 1.0, "GE", ("selection", "selective")),
    Detector("selective", "heads", "entropy_ratio", -1.0, "baseline"),
    Detector("selective", "heads", "confidence", 1.0, "baseline"),
    Detector("selective", "heads", "score_scale", 1.0, "baseline"),
    Detector("dependent", "pairs", "cka_excess", 1.0, "GE"),
    Detector("dependent", "pairs", "cka", 1.0, "baseline"),
    Detector("dependent", "pairs", "attention_corr", 1.0, "baseline"),
    Detector("dependent", "heads", "cka_excess", 1.0, "GE"),
    Detector("dependent", "heads", "cka_max", 1.0, "baseline"),
    Detector("important", "heads", "removal_spec_shift", 1.0, "GE"),
    Detector("important", "heads", "removal_spec_shift_ge", 1.0, "GE"),
    Detector("important", "heads", "removal_effect", 1.0, "attnspec"),
    Detector("important", "heads", "michel_importance", 1.0, "baseline"),
    Detector("important", "heads", "energy_share", 1.0, "baseline"),
)


def roc_auc(scores, positive) -> float:
    """ROC AUC (Mann-Whitney, ties count one half); NaN without positives, negatives or finite scores.

    Parameters
    ----------
    scores : array_like
        Larger means more likely positive; non-finite entries are dropped.
    positive : array_like of bool
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

    Heads flagged: ``score >= t``; NaN without positives or negatives.
    """
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
        One row per group x detector x subset: ``property, subset, diagnostic, kind, n_pos, n_neg,
        auc, fpr_at_tpr90, label_tpr, label_fpr``.
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

    Returns one row per group x planted beta x estimate: ``n``, ``mean`` of the estimate, ``bias``
    (mean error), ``mae`` (mean absolute error), ``rel_mae`` (mae over the planted beta).
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
    """
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for n in [int(n) for n in lengths for _ in range(reps)]:
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
