"""HTML pages of a comparison and of a tracking run (:mod:`attnspec.compare`): self-contained like the diagnosis
report (inline styles and PNG figures, no script, no external link).

* :func:`render_comparison`: heat maps of the paired differences ``X_diff`` (B minus A; a cell's tooltip gives the
  difference and its interval, a dot marks the heads whose interval clears the margin), the heads that changed
  most with their intervals, and the layer spectra of the most changed head's layer in A and B side by side;
* :func:`render_tracking`: the trajectories figure and the verdict counts per step.
"""
from __future__ import annotations

import html

import numpy as np

from ..figures import png_data_uri
from . import _STYLE, _heatmap, _table

__all__ = ["render_comparison", "render_tracking", "write_comparison_report", "write_tracking_report"]

#: Differences drawn as heat maps: column, title.
_DIFF_MAPS = (("score_scale", "score_scale: inverse temperature"), ("beta_corrected", "beta_corrected"),
              ("selection_score", "selection_score (shared targets)"),
              ("query_selection_score", "query_selection_score (per-query rules)"),
              ("spec_w1_rel", "spec_w1_rel"), ("cka_excess", "cka_excess (dependence)"),
              ("removal_spec_shift", "removal_spec_shift"), ("removal_effect", "removal_effect"))


def _diff_heatmaps(h) -> str:
    nL, nH = int(h["layer"].max()) + 1, int(h["head"].max()) + 1
    out = []
    for col, title in _DIFF_MAPS:
        if f"{col}_diff" not in h:
            continue
        view = h[["layer", "head"]].copy()
        view[f"{col}_diff"] = h[f"{col}_diff"]
        out.append(_heatmap(view, f"{col}_diff", "RdBu_r", f"{title}: B - A", nL, nH))
    return "".join(out)


def render_comparison(comparison) -> str:
    """The comparison page (module docstring) as one HTML document.

    Parameters
    ----------
    comparison : attnspec.compare.Comparison

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from attnspec.comparing import Comparison
    >>> h = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score_scale_a": [1.0, 1.0], "score_scale_b": [1.0, 2.0],
    ...                   "score_scale_diff": [0.0, 1.0], "score_scale_diff_lo": [0.0, 0.9],
    ...                   "score_scale_diff_hi": [0.0, 1.1], "changed": [False, True],
    ...                   "changed_in": ["", "score_scale"], "change_size": [0.0, 8.0]})
    >>> page = render_comparison(Comparison(h, {"n_changed": 1, "a": {"model": "A"}, "b": {"model": "B"}}))
    >>> page.startswith("<!DOCTYPE html>"), "<script" in page, 'title="layer 0, head 1: score_scale_diff = 1"' in page
    (True, False, True)
    """
    from ..figures.compare import difference_figure, spectra_pair_figure
    c = comparison
    s, h = c.summary, c.heads
    esc = html.escape
    a, b = s.get("a", {}), s.get("b", {})
    changed = c.changed() if "change_size" in h else h[h["changed"]]
    fig = difference_figure(h)
    diff_img = f'<img id="differences" alt="differences" src="{png_data_uri(fig)}">' if fig is not None else ""
    spec = ""
    if len(changed) and c.a is not None and c.b is not None and c.a.spectra and c.b.spectra:
        layer = int(changed.iloc[0]["layer"])
        f2 = spectra_pair_figure(c.a.spectra, c.b.spectra, layer, labels=("A", "B"))
        if f2 is not None:
            spec = (f"<h2>Layer {layer} spectra, A and B</h2><p>The layer of the most changed head (L{layer} "
                    f"H{int(changed.iloc[0]['head'])}): its centered output spectrum (blue), its Gaussian "
                    f"equivalent's (orange) and the free sum of its heads (green), in A (left) and B (right).</p>"
                    f'<img id="spectra" alt="layer spectra" src="{png_data_uri(f2)}">')
    cols = ["layer", "head", "changed_in"] + [f"{x}_diff{e}" for x in ("score_scale", "selection_score",
                                                                       "removal_effect")
                                              for e in ("", "_lo", "_hi") if f"{x}_diff{e}" in h]
    by = "".join(f"<li><code>{esc(k)}</code>: {v} (margin {esc(str(s.get('margin_rules', {}).get(k)))})</li>"
                 for k, v in s.get("n_changed_by", {}).items())
    notes = "".join(f"<li>{esc(n)}</li>" for n in s.get("notes", [])) or "<li>every head matched</li>"
    title = f"attnspec comparison: {esc(str(a.get('model')))} (A) vs {esc(str(b.get('model')))} (B)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
{_STYLE}</head><body>
<h1>{title}</h1>
<p class="kv"><span>{s.get('n_heads', len(h))} heads compared</span><span>changed: <b>{s.get('n_changed')}</b></span>
<span>{s.get('n_texts')} texts, seed {s.get('seed')}, {s.get('n_boot')} paired replicates</span></p>
<p>Each difference is B minus A on the same texts; its 95 % interval is a paired bootstrap (the two diagnoses
re-weight every text by the same Poisson weights, so the spread they share cancels). A head has changed when some
diagnostic's interval excludes 0 by more than that diagnostic's margin.</p>
<h2>Notes</h2><ul>{notes}</ul>
<h2>Changed heads per diagnostic</h2><ul>{by}</ul>
<h2>Heat maps of the differences (layer x head)</h2>
<p>Red: larger in B, blue: smaller; hover a cell for the difference.</p>
<div id="heatmaps">{_diff_heatmaps(h)}</div>
<h2>The heads that changed most</h2>
{_table(changed[cols].head(20)) if len(changed) else '<p>No head changed.</p>'}
{diff_img}
{spec}
<p style="font-size:.8em;color:#777">attnspec compare; columns in docs/compare.md</p>
</body></html>
"""


def render_tracking(table, summary: dict | None = None) -> str:
    """The tracking page: the trajectories of the heads that move most, and the verdict counts per step.

    Parameters
    ----------
    table : pandas.DataFrame
        The long table of :func:`attnspec.compare.track` (or of the training callback).
    summary : dict, optional
        Its summary (model, settings).

    Returns
    -------
    str

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 10], "layer": 0, "head": 0, "score_scale": [1.0, 2.0],
    ...                   "selection": ["diffuse", "selective"]})
    >>> page = render_tracking(t, {"model": "tiny"})
    >>> page.startswith("<!DOCTYPE html>"), page.count("data:image/png;base64,")
    (True, 1)
    """
    from ..figures.compare import choose_heads, trajectories_figure
    s = summary or {}
    esc = html.escape
    heads = choose_heads(table)
    fig = trajectories_figure(table, heads)
    img = f'<img id="trajectories" alt="trajectories" src="{png_data_uri(fig)}">' if fig is not None else ""
    counts = table[["step"]].drop_duplicates().sort_values("step").reset_index(drop=True)
    for col, val, name in (("selection", "selective", "selective"), ("selection", "diffuse", "diffuse"),
                           ("query_selection", "selective", "query selective"),
                           ("dependence", "dependent", "dependent")):
        if col in table:
            n = table.assign(x=table[col] == val).groupby("step")["x"].sum()
            counts[name] = counts["step"].map(n).astype(int)
    for col in ("score_scale", "selection_score", "removal_effect"):
        if col in table:
            counts[f"mean {col}"] = counts["step"].map(table.groupby("step")[col].mean())
    title = f"attnspec tracking: {esc(str(s.get('model', '')))}"
    chosen = ", ".join(f"L{a} H{b}" for a, b in heads)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
{_STYLE}</head><body>
<h1>{title}</h1>
<p class="kv"><span>{table['step'].nunique()} steps ({int(np.min(table['step']))} to {int(np.max(table['step']))})</span>
<span>{len(table[['layer', 'head']].drop_duplicates())} heads</span></p>
<h2>Trajectories</h2>
<p>The heads whose selection score moves most ({esc(chosen)}), each diagnostic with its 95 % bootstrap interval
over the texts (bands). Every step is diagnosed on the same texts with the same seed.</p>
{img}
<h2>Verdicts per step</h2>{_table(counts)}
<p style="font-size:.8em;color:#777">attnspec track; the long table is track.csv (docs/compare.md)</p>
</body></html>
"""


def write_comparison_report(comparison, path) -> "object":
    """Write :func:`render_comparison` to ``path`` atomically (:func:`attnspec.atomicio.write_text`).

    Parameters
    ----------
    comparison : attnspec.compare.Comparison
    path : str or pathlib.Path

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> from attnspec.comparing import Comparison
    >>> c = Comparison(pd.DataFrame({"layer": [0], "head": [0], "changed": [False]}), {"n_changed": 0})
    >>> write_comparison_report(c, tempfile.mkdtemp() + "/c.html").name
    'c.html'
    """
    from ..atomicio import write_text
    return write_text(path, render_comparison(comparison))


def write_tracking_report(table, path, summary: dict | None = None) -> "object":
    """Write :func:`render_tracking` to ``path`` atomically.

    Parameters
    ----------
    table : pandas.DataFrame
    path : str or pathlib.Path
    summary : dict, optional

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> t = pd.DataFrame({"step": [0, 10], "layer": 0, "head": 0, "score_scale": [1.0, 2.0]})
    >>> write_tracking_report(t, tempfile.mkdtemp() + "/t.html").name
    't.html'
    """
    from ..atomicio import write_text
    return write_text(path, render_tracking(table, summary))
