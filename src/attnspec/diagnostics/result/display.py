"""Rich display in notebooks (Jupyter, VS Code, Colab): the ``_repr_html_`` of a :class:`.diagnosis.Diagnosis`, and
the pieces :mod:`attnspec.report.notebook` builds a comparison's and a tracking's from.

Each display is one self-contained ``<div class="attnspec">`` (styles scoped to it, no script, no image): a summary
line, the verdict counts, the top heads with their 95 % intervals, and a layer x head heat map (an HTML table whose
cells are coloured by value, the value in the cell's tooltip). Nothing here draws: figures are
:func:`attnspec.figures.plot_diagnosis` and its siblings; the full page is :func:`attnspec.report.write_report`.
"""
from __future__ import annotations

import html

import numpy as np
import pandas as pd

__all__ = ["diagnosis_html", "block", "heat_map", "layer_head_grid", "table", "key_values", "with_interval", "fmt"]

#: Notebook styles, scoped to the ``attnspec`` block so that they never restyle the notebook itself.
STYLE = """<style>
.attnspec{font-family:system-ui,-apple-system,Segoe UI,sans-serif;line-height:1.35;max-width:980px}
.attnspec .line{font-weight:600;margin:.2em 0} .attnspec .kv span{display:inline-block;margin-right:1.2em;font-size:.9em}
.attnspec table.tbl{border-collapse:collapse;font-size:.8em;margin:.4em 0}
.attnspec .tbl td,.attnspec .tbl th{padding:1px 6px;border-bottom:1px solid #eee;text-align:right}
.attnspec .hm{margin:.4em 0;display:inline-block} .attnspec .hm figcaption{font-size:.8em}
.attnspec .hm table{border-collapse:collapse;font-size:.65em} .attnspec .hm td{width:1.5em;height:1.2em;padding:0}
.attnspec .hm th{font-weight:normal;color:#666;padding:0 3px} .attnspec .hm td.na{background:#eee}
.attnspec .cbar{height:.5em;margin-top:.2em} .attnspec .cbar-range{display:flex;justify-content:space-between;font-size:.65em}
.attnspec .muted{color:#666;font-size:.8em}
</style>"""


def fmt(x, digits: int = 3) -> str:
    """A number to ``digits`` significant digits (empty when not finite); anything else as escaped text.

    Examples
    --------
    >>> fmt(0.123456), fmt(float("nan")), fmt("<b>")
    ('0.123', '', '&lt;b&gt;')
    """
    try:
        v = float(x)
    except (TypeError, ValueError):
        return html.escape(str(x))
    return "" if not np.isfinite(v) else f"{v:.{digits}g}"


def with_interval(row: pd.Series, col: str) -> str:
    """``value [lo, hi]`` of column ``col`` of a table row (the point alone when ``col_lo``/``col_hi`` are missing).

    Examples
    --------
    >>> with_interval(pd.Series({"x": 1.0, "x_lo": 0.5, "x_hi": 1.5}), "x"), with_interval(pd.Series({"x": 2.0}), "x")
    ('1 [0.5, 1.5]', '2')
    """
    lo, hi = row.get(f"{col}_lo"), row.get(f"{col}_hi")
    point = fmt(row.get(col))
    if lo is None or hi is None or not (np.isfinite(float(lo)) and np.isfinite(float(hi))):
        return point
    return f"{point} [{fmt(lo)}, {fmt(hi)}]"


def table(rows: list[dict]) -> str:
    """Rows (dicts with the same keys, in order) as an HTML table; strings are put in as they are (already HTML),
    numbers through :func:`fmt`.

    Examples
    --------
    >>> table([{"head": "0", "score": 1.23456}])
    '<table class="tbl"><tr><th>head</th><th>score</th></tr><tr><td>0</td><td>1.23</td></tr></table>'
    """
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{v if isinstance(v, str) else fmt(v)}</td>" for v in r.values()) + "</tr>"
                   for r in rows)
    return f'<table class="tbl"><tr>{head}</tr>{body}</table>'


def key_values(pairs: dict) -> str:
    """``key: value`` pairs on one line (``None`` values left out).

    Examples
    --------
    >>> key_values({"selective": 3, "seed": None})
    '<div class="kv"><span>selective: <b>3</b></span></div>'
    """
    return '<div class="kv">' + "".join(f"<span>{html.escape(str(k))}: <b>{html.escape(str(v))}</b></span>"
                                        for k, v in pairs.items() if v is not None) + "</div>"


def layer_head_grid(heads: pd.DataFrame, col: str, symmetric: bool = False, shape: tuple[int, int] | None = None
                    ) -> tuple[np.ndarray, float, float]:
    """``(M, lo, hi)``: ``heads[col]`` as a ``(layers, heads)`` array (``shape``, default from the table; NaN where a
    head is missing) and its colour range: the finite values' minimum and maximum (0 and 1 when none), or
    ``[-m, m]`` with ``m`` the largest magnitude when ``symmetric`` (diverging maps). The one grid of every layer x
    head map: the notebook's (:func:`heat_map`) and the HTML report's.

    Examples
    --------
    >>> M, lo, hi = layer_head_grid(pd.DataFrame({"layer": [0, 1], "head": [1, 0], "x": [-2.0, 1.0]}), "x", True)
    >>> M.tolist(), lo, hi
    ([[nan, -2.0], [1.0, nan]], -2.0, 2.0)
    """
    nL, nH = shape if shape is not None else (int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1)
    M = np.full((nL, nH), np.nan)
    M[heads["layer"].to_numpy(int), heads["head"].to_numpy(int)] = heads[col].to_numpy(dtype=float)
    finite = M[np.isfinite(M)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if symmetric:
        hi = max(abs(lo), abs(hi), 1e-12)
        lo = -hi
    return M, lo, hi


#: Colour anchors: viridis (sequential) and a blue-white-red map (diverging, symmetric about 0).
_SEQUENTIAL = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))
_DIVERGING = ((33, 102, 172), (247, 247, 247), (178, 24, 43))


def _colour(t: float, anchors) -> str:
    """The colour at ``t`` in [0, 1] between evenly spaced ``anchors`` (linear in RGB), as ``#rrggbb``."""
    x = min(max(t, 0.0), 1.0) * (len(anchors) - 1)
    k = min(int(x), len(anchors) - 2)
    f = x - k
    rgb = [round(a + f * (b - a)) for a, b in zip(anchors[k], anchors[k + 1])]
    return "#%02x%02x%02x" % tuple(rgb)


def heat_map(heads: pd.DataFrame, col: str, title: str, diverging: bool = False) -> str:
    """A layer x head map of ``heads[col]`` as an HTML table: rows are layers, columns heads, each cell coloured
    by its value (viridis from the column's minimum to maximum, or blue-white-red symmetric about 0 when
    ``diverging``), the value in its tooltip; missing heads grey. Empty when the column has no finite value.

    Examples
    --------
    >>> h = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "x": [0.0, 1.0, 0.5]})
    >>> page = heat_map(h, "x", "x")
    >>> page.count("<td"), 'title="L0H1: 1"' in page, 'class="na"' in page
    (4, True, True)
    """
    if col not in heads or not len(heads) or not np.isfinite(heads[col].to_numpy(dtype=float)).any():
        return ""
    M, lo, hi = layer_head_grid(heads, col, symmetric=diverging)
    nL, nH = M.shape
    anchors = _DIVERGING if diverging else _SEQUENTIAL
    span = hi - lo if hi > lo else 1.0
    rows = []
    for layer in range(nL):
        cells = "".join('<td class="na"></td>' if not np.isfinite(x) else
                        f'<td style="background:{_colour((x - lo) / span, anchors)}" title="L{layer}H{h}: {fmt(x)}"></td>'
                        for h, x in enumerate(M[layer]))
        rows.append(f"<tr><th>{layer}</th>{cells}</tr>")
    heads_row = "".join(f"<th>{h}</th>" for h in range(nH))
    return (f'<figure class="hm"><figcaption>{html.escape(title)}: {fmt(lo)} .. {fmt(hi)} (rows layers, columns '
            f'heads)</figcaption><table><tr><th class="corner">L\\H</th>{heads_row}</tr>{"".join(rows)}</table></figure>')


def block(*parts: str) -> str:
    """The scoped style and one ``<div class="attnspec">`` holding the non-empty ``parts``.

    Examples
    --------
    >>> block("<p>a</p>", "").endswith('<div class="attnspec"><p>a</p></div>')
    True
    """
    return STYLE + '<div class="attnspec">' + "".join(p for p in parts if p) + "</div>"


def diagnosis_html(diag, top: int = 8) -> str:
    """A diagnosis in a notebook cell: the model and data, the verdict counts, the ``top`` heads by
    ``selection_score`` with their intervals, verdicts, best per-query rule, roles and removal effect, and the
    selection-score heat map.

    Examples
    --------
    >>> import pandas as pd
    >>> from attnspec.diagnostics.result.diagnosis import Diagnosis
    >>> heads = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "selection_score": [1.2, 0.1],
    ...                       "selection_score_lo": [0.9, -0.1], "selection_score_hi": [1.5, 0.3],
    ...                       "selection": ["selective", "diffuse"]})
    >>> page = diagnosis_html(Diagnosis(heads, pd.DataFrame({"layer": [0]}), summary={"model": "toy", "n_texts": 8}))
    >>> "toy" in page and "1.2 [0.9, 1.5]" in page and page.count("<tr>") >= 3
    True
    """
    s, h = diag.summary, diag.heads
    n_layers = int(h["layer"].max()) + 1 if len(h) else 0
    line = (f"attnspec diagnosis of {s.get('model', '?')} ({s.get('family', '?')}, {s.get('kind', '?')}): "
            f"{n_layers} layers, {len(h)} heads, {s.get('n_texts', '?')} texts, {s.get('n_tokens', '?')} tokens")
    counts = {k[2:]: s[k] for k in ("n_selective", "n_sparse", "n_diffuse", "n_undetermined") if k in s}
    if "query_selection" in h:
        counts["query-selective"] = int((h["query_selection"] == "selective").sum())
    if "dependence" in h:
        counts["dependent"] = int((h["dependence"] == "dependent").sum())
    if "roles" in h:
        counts["with a role"] = int((h["roles"].fillna("") != "").sum())
    rows = []
    order = h.sort_values("selection_score", ascending=False) if "selection_score" in h else h
    for _, r in order.head(top).iterrows():
        row = {"layer": str(int(r["layer"])), "head": str(int(r["head"]))}
        if "selection_score" in h:
            row["selection_score [95 %]"] = with_interval(r, "selection_score")
        for col in ("selection", "query_selection_rule", "roles"):
            if col in h:
                row[col] = html.escape(str(r[col]) if pd.notna(r[col]) else "")
        if "removal_effect" in h:
            row["removal_effect [95 %]"] = with_interval(r, "removal_effect")
        rows.append(row)
    toolkit = s.get("toolkit")
    where = {"seed": s.get("seed"), "reference seed": s.get("reference_seed"),
             "toolkit": f"{toolkit.get('name')} {toolkit.get('wrapper', '')}".strip() if toolkit else None}
    notes = s.get("notes") or []
    return block(f'<div class="line">{html.escape(line)}</div>', key_values(counts), key_values(where),
                  f'<div class="muted">top {min(top, len(h))} heads by selection score</div>' if rows else "",
                  table(rows), heat_map(h, "selection_score", "selection score"),
                  f'<div class="muted">{len(notes)} notes in .summary["notes"]; the full report: '
                  "attnspec.report.write_report(d, path)</div>")
