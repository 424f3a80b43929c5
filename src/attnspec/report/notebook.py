"""Rich display of a comparison and a tracking in notebooks: their ``_repr_html_`` (the diagnosis's is
:func:`attnspec.diagnostics.result.display.diagnosis_html`, built from the same pieces).

A comparison shows the two models, how many heads changed (in all and per diagnostic), the changed heads with
``b - a`` and its paired 95 % interval, and a map of the ``selection_score`` difference; a tracking shows per step
the verdict counts and the heads whose selection score moved most. Figures: :func:`attnspec.figures.difference_figure`
(``comparison.heads``), :func:`attnspec.figures.trajectories_figure` (``tracking.table``).
"""
from __future__ import annotations

import html

import pandas as pd

from ..diagnostics.result.display import block, fmt, heat_map, key_values, table, with_interval

__all__ = ["comparison_html", "tracking_html"]


def _model_of(comp, side: str) -> str:
    """The model name of side ``'a'`` or ``'b'`` of a comparison (its diagnosis, else its summary)."""
    d = getattr(comp, side, None)
    if d is not None and getattr(d, "summary", None):
        return str(d.summary.get("model", side))
    info = (getattr(comp, "summary", None) or {}).get(side)
    return str(info.get("model", side)) if isinstance(info, dict) else side


def comparison_html(comp, top: int = 8) -> str:
    """A comparison in a notebook cell: the two models, how many heads changed (in all and per diagnostic), the
    ``top`` changed heads by their largest difference relative to the column's largest, with ``b - a`` and its
    paired interval, and a heat map of the ``selection_score`` difference.

    Examples
    --------
    >>> import pandas as pd
    >>> heads = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score_scale_diff": [0.0, 0.5],
    ...                       "score_scale_diff_lo": [-0.1, 0.4], "score_scale_diff_hi": [0.1, 0.6],
    ...                       "changed": [False, True], "changed_in": ["", "score_scale"]})
    >>> page = comparison_html(type("C", (), {"heads": heads, "summary": {}, "a": None, "b": None})())
    >>> "changed (score_scale): <b>1</b>" in page and "0.5 [0.4, 0.6]" in page
    True
    """
    h = comp.heads
    changed_in = h["changed_in"].fillna("").astype(str) if "changed_in" in h else pd.Series("", index=h.index)
    counts = {"any": int((changed_in != "").sum())}
    for names in changed_in[changed_in != ""]:
        for name in (n.strip() for n in names.split(",")):
            counts[name] = counts.get(name, 0) + 1
    diffs = [c for c in h.columns if c.endswith("_diff")]
    rows = []
    if diffs:
        rel = pd.DataFrame({c: h[c].abs() / (h[c].abs().max() or 1.0) for c in diffs}).max(axis=1)
        rel = rel.where(changed_in != "", rel - 10.0)                  # changed heads first
        for i in rel.sort_values(ascending=False).index[:top]:
            r = h.loc[i]
            row = {"layer": str(int(r["layer"])), "head": str(int(r["head"]))}
            for c in diffs[:4]:
                row[f"{c} [95 %]"] = with_interval(r, c)
            row["changed_in"] = html.escape(changed_in[i])
            rows.append(row)
    line = f"attnspec comparison: b = {_model_of(comp, 'b')} minus a = {_model_of(comp, 'a')}, {len(h)} heads"
    diff_col = "selection_score_diff" if "selection_score_diff" in h else (diffs[0] if diffs else None)
    return block(f'<div class="line">{html.escape(line)}</div>', key_values({f"changed ({k})": v for k, v in counts.items()}),
                  table(rows), heat_map(h, diff_col, f"{diff_col} (b - a)", diverging=True) if diff_col else "")


def tracking_html(tracking, top: int = 6) -> str:
    """A tracking in a notebook cell: the steps, and per step the verdict counts; the ``top`` heads whose
    ``selection_score`` moved most between the first and the last step.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 0, 10, 10], "checkpoint": ["c0", "c0", "c10", "c10"], "layer": 0,
    ...                   "head": [0, 1, 0, 1], "selection_score": [0.1, 0.2, 0.9, 0.2],
    ...                   "selection": ["diffuse", "diffuse", "selective", "diffuse"]})
    >>> page = tracking_html(type("T", (), {"table": t})())
    >>> "2 steps (0 .. 10), 2 heads" in page and "<td>0.8</td>" in page
    True
    """
    t = tracking.table
    if t is None or not len(t):
        return block('<div class="line">attnspec tracking: no step diagnosed</div>')
    steps = sorted(t["step"].unique())
    per_step = []
    for step in steps:
        rows = t[t["step"] == step]
        row = {"step": str(int(step)), "checkpoint": html.escape(str(rows["checkpoint"].iloc[0]))}
        for col, value in (("selection", "selective"), ("query_selection", "selective"), ("dependence", "dependent")):
            if col in rows:
                row[f"{col} = {value}"] = str(int((rows[col] == value).sum()))
        if "selection_score" in rows:
            row["mean selection_score"] = fmt(rows["selection_score"].mean())
        per_step.append(row)
    moved = []
    if "selection_score" in t and len(steps) > 1:
        first = t[t["step"] == steps[0]].set_index(["layer", "head"])["selection_score"]
        last = t[t["step"] == steps[-1]].set_index(["layer", "head"])["selection_score"]
        delta = (last - first).dropna()
        for (layer, head), d in delta.reindex(delta.abs().sort_values(ascending=False).index).head(top).items():
            moved.append({"layer": str(layer), "head": str(head), f"step {int(steps[0])}": fmt(first[(layer, head)]),
                          f"step {int(steps[-1])}": fmt(last[(layer, head)]), "change": fmt(d)})
    n_heads = t[["layer", "head"]].drop_duplicates().shape[0]
    line = f"attnspec tracking: {len(steps)} steps ({int(steps[0])} .. {int(steps[-1])}), {n_heads} heads"
    return block(f'<div class="line">{html.escape(line)}</div>', table(per_step),
                  '<div class="muted">heads whose selection score moved most</div>' if moved else "", table(moved))
