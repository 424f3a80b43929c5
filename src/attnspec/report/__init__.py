"""Self-contained HTML report of a :class:`~attnspec.Diagnosis`.

One HTML file, no external resources: heat maps are HTML tables coloured with matplotlib colour maps
(values in tooltips), the spectra figure is an inline PNG (base64, matplotlib Agg), styles are inline,
there is no JavaScript. Sections: summary and notes; layer x head heat maps of each score (dependent heads
marked with their partner); per-head 95 % bootstrap intervals of the selection score and of ``beta_hat``
(the verdicts are tests against them); how to read each diagnostic, with its measured reliability on planted ground truth
(``docs/validity.md``); per layer, the centered output spectrum overlaid on its Gaussian-equivalent
reference and on the free sum of its heads; the most selective heads and the most dependent pairs (with
their ``dependence`` verdicts); the layers table; what each score means.
"""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from ..diagnostics.result.columns import COLUMNS, HEATMAPS
from ..diagnostics.result.display import layer_head_grid
from ..figures import png_data_uri
from ..figures.diagnosis import interval_figure, layer_spectra_figure

__all__ = ["write_report", "render_report", "HEATMAPS", "DESCRIPTIONS"]

DESCRIPTIONS = COLUMNS["heads"]   # the column vocabulary of attnspec.diagnostics.columns
#: Note shown when every layer is bidirectional full attention (the theory's own setting).
_THEORY_NOTE = ("<li>All layers are bidirectional full attention: the model of docs/theory.md "
                "(section <i>Model and normalization</i>) applies as stated.</li>")

#: The report's inline styles.
_STYLE = """<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;line-height:1.4}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em} h3{font-size:1em;margin:.8em 0 .2em}
.tbl{border-collapse:collapse;font-size:0.8em} .tbl td,.tbl th{padding:2px 6px;border-bottom:1px solid #eee;text-align:right}
img{max-width:100%} dt{font-weight:bold;margin-top:.5em} code{background:#f4f4f4;padding:0 3px}
.kv span{display:inline-block;margin-right:1.5em}
#heatmaps{display:flex;flex-wrap:wrap;gap:1.2em} .hm{margin:0} .hm figcaption{font-size:.85em;margin-bottom:.2em}
.hm table{border-collapse:collapse;font-size:.7em} .hm td{width:1.6em;height:1.3em;text-align:center;padding:0}
.hm th{font-weight:normal;color:#666;padding:0 3px} .hm td.na{background:#eee} .hm th.corner{font-size:.85em}
.cbar{height:.6em;margin-top:.3em} .cbar-range{display:flex;justify-content:space-between;font-size:.7em;color:#555}
</style>"""


def _hex(rgba) -> str:
    return "#%02x%02x%02x" % tuple(int(round(255 * c)) for c in rgba[:3])


def _heatmap(h, col: str, cmap_name: str, title: str, nL: int, nH: int) -> str:
    """One layer x head heat map as an HTML table: cell colour from ``cmap_name`` (symmetric about 0
    for diverging maps), exact value in the cell's tooltip, a colour bar with the range below."""
    from matplotlib import colormaps
    cmap = colormaps[cmap_name]
    M, lo, hi = layer_head_grid(h, col, symmetric=cmap_name == "RdBu_r", shape=(nL, nH))
    span = hi - lo if hi > lo else 1.0
    marks = {}
    if col == "selection_score" and "selection" in h:
        marks = {(int(r.layer), int(r.head)): {"diffuse": "&times;", "sparse": "&#9675;"}.get(r.selection, "")
                 for r in h[["layer", "head", "selection"]].itertuples()}
    if col == "cka_excess" and "dependence" in h:
        marks = {(int(r.layer), int(r.head)): f"{int(r.dependence_partner)}" if r.dependence == "dependent" else ""
                 for r in h[["layer", "head", "dependence", "dependence_partner"]].itertuples()}
    head_row = "".join(f"<th>{j}</th>" for j in range(nH))
    rows = []
    for i in range(nL):
        cells = []
        for j in range(nH):
            v = M[i, j]
            if not np.isfinite(v):
                cells.append('<td class="na" title="n/a"></td>')
                continue
            c = cmap((v - lo) / span)
            ink = "#000" if 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 0.5 else "#fff"
            cells.append(f'<td style="background:{_hex(c)};color:{ink}" title="layer {i}, head {j}: {col} = {v:.4g}">'
                         f"{marks.get((i, j), '')}</td>")
        rows.append(f"<tr><th>{i}</th>{''.join(cells)}</tr>")
    stops = ",".join(_hex(cmap(t)) for t in np.linspace(0, 1, 11))
    return (f'<figure class="hm"><figcaption>{html.escape(title)}</figcaption>'
            f'<table><tr><th class="corner">layer \\ head</th>{head_row}</tr>{"".join(rows)}</table>'
            f'<div class="cbar" style="background:linear-gradient(to right,{stops})"></div>'
            f'<div class="cbar-range"><span>{lo:.3g}</span><span>{hi:.3g}</span></div></figure>')


def _heatmaps(diag) -> str:
    """Layer x head heat maps of the columns of :data:`HEATMAPS` present in ``diag.heads``, the role atlas after the
    two selection maps."""
    h = diag.heads
    nL = int(h["layer"].max()) + 1
    nH = int(h["head"].max()) + 1
    maps = [_heatmap(h, col, cmap, title, nL, nH) for col, cmap, title in HEATMAPS if col in h]
    if "roles" in h:
        maps.insert(min(2, len(maps)), _role_atlas(h, nL, nH))
    return "".join(maps)


#: Short names of the rules in the role atlas.
_SHORT = {"same token": "dup", "induction": "ind", "sink": "sink"}


def _short(rule: str) -> str:
    """``'offset -1'`` -> ``'-1'``, ``'offset 2'`` -> ``'+2'``, ``'same token'`` -> ``'dup'``."""
    if rule.startswith("offset "):
        d = int(rule.split()[1])
        return f"{d:+d}" if d else "0"
    return _SHORT.get(rule, rule)


def _role_atlas(h, nL: int, nH: int) -> str:
    """Layers x heads, each cell the head's roles (heads.csv ``roles``) in short names, shaded by how many."""
    roles = {(int(r.layer), int(r.head)): [x for x in str(r.roles).split("; ") if x and x != "nan"]
             for r in h[["layer", "head", "roles"]].itertuples()}
    shade = ["#ffffff", "#fde0c5", "#facba6", "#f8b58b", "#f59e72"]
    head_row = "".join(f"<th>{j}</th>" for j in range(nH))
    rows = []
    for i in range(nL):
        cells = []
        for j in range(nH):
            if (i, j) not in roles:
                cells.append('<td class="na" title="n/a"></td>')
                continue
            rs = roles[(i, j)]
            tip = html.escape(f"layer {i}, head {j}: " + ("; ".join(rs) or "no role"))
            cells.append(f'<td style="background:{shade[min(len(rs), len(shade) - 1)]};width:auto;padding:0 3px;'
                         f'white-space:nowrap" title="{tip}">{html.escape(" ".join(_short(x) for x in rs))}</td>')
        rows.append(f"<tr><th>{i}</th>{''.join(cells)}</tr>")
    return ('<figure class="hm" id="roles"><figcaption>role atlas: the rules each head follows (selective in roles.csv; '
            '-1 previous token, +1 next, 0 itself, dup same token, ind induction, sink excluded keys)</figcaption>'
            f'<table><tr><th class="corner">layer \\ head</th>{head_row}</tr>{"".join(rows)}</table></figure>')


def _spectra(diag) -> str:
    """Per-layer spectra figure (:func:`attnspec.figures.diagnosis.layer_spectra_figure`) as an inline PNG."""
    fig = layer_spectra_figure(diag.spectra)
    return "" if fig is None else png_data_uri(fig)


#: How to read each diagnostic: (title, its columns, a short paragraph with the validity benchmark's figures).
#: The figures are from docs/validity.md: tiny random BERT models with planted heads, 6 seeds, AUC at the
#: strongest planting and 64 texts unless stated.
HOW_TO_READ = [
    ("Identification (Gaussian equivalence)",
     ("beta_hat", "alpha_hat", "r2", "spec_w1_rel", "beta_null", "beta_corrected", "score_scale"),
     "Each head is fitted by its Gaussian equivalent, softmax attention replaced by (11^T + beta_hat S + "
     "alpha_hat Z)/l: beta_hat is the linear-mixing coefficient, r2 the share of l A - 1 it explains and "
     "spec_w1_rel the distance of the head's output spectrum from its equivalent's. On short texts beta_hat "
     "underestimates hot heads even for random heads (planted beta 1 / 2 / 3 read 0.93 / 1.50 / 1.76 on 64 texts: "
     "-7 % / -25 % / -41 %), so compare it with beta_null (the same fit on a random head at the head's score scale "
     "and these lengths), not with score_scale. beta_corrected removes that bias: its interval covers the planted "
     "temperature 97, 97, 94 and 95 times in 100 at beta 0.5, 1, 2 and 3."),
    ("Shared-target selection",
     ("selection_score", "selection", "entropy_ratio", "confidence"),
     "selection_score detects heads whose attention goes to the same few keys for every query (shared targets: [CLS], [SEP], "
     "punctuation, attention sinks): AUC 1.00 on planted class-token heads. It does not detect per-query patterns "
     "(previous/next token, the token's own repeats): a head whose every query picks its own key is 'sparse' here "
     "(hot, no shared target), and per-query selection is the verdict to read for it. 'selective' requires the "
     "whole 95 % interval above log 2; 'undetermined' means the texts do not decide (add texts)."),
    ("Per-query selection",
     ("query_selection_score", "query_selection", "query_selection_kind", "query_selection_rule"),
     "query_selection_score detects heads whose every query attends a key fixed by a rule: an offset (previous token, "
     "the token itself, the next one) or the content (the same token, the token after an earlier occurrence of the "
     "query's token: induction). It is the excess of the head's attention on the rule's keys over what the "
     "Gaussian-equivalent null puts there, exactly |S|/n at every temperature, so a hot random head scores about 0: "
     "AUC 1.00 on planted offset, identity and induction heads, no selective head among random ones. "
     "'selective' requires the lower end of the 95 % interval at 0.1 or more. It does not see shared targets "
     "(the sinks are left to selection_score) nor rules outside offsets -8..8 and the two content rules."),
    ("Dependence",
     ("cka_excess", "cka_excess_background", "dependence", "dependence_partner"),
     "cka_excess detects pairs of heads that compute the same thing (shared or copied Q/K/V): AUC 1.00 for pairs at "
     "correlation 0.75 and above, 0.90 at 0.5, where a correlation of the attention maps already reaches 1.00. "
     "Almost every pair of a real layer has a positive excess (heads read the same inputs), so a pair is "
     "'dependent' only when the lower end of its interval exceeds the median excess of the layer's other pairs by "
     "0.1 (bidirectional) or 0.6 (causal): planted copies at correlation 1 pass (BERT 12 of 12, GPT-2 16 of 16), at "
     "0.75 half of them in BERT and 3 of 16 in GPT-2, no background pair (0 of 3,456) and no head of a randomly "
     "initialized model. It does not detect dependence shared by most of a layer's pairs."),
    ("Removal",
     ("removal_spec_shift", "removal_spec_shift_ge", "removal_effect", "removal_first_order", "michel_importance"),
     "removal_spec_shift is how much the layer's output spectrum moves without the head, beside the shift the "
     "Gaussian equivalent of the remaining heads predicts: AUC 1.00 for heads that carry the layer's signal at full "
     "planting, 0.78 at half, where the exact removal effect reaches 0.99 and Michel importance 0.97. It describes "
     "the spectrum, not the function (on MiniLM it agrees with exact removal at Spearman 0.22 across layers): rank "
     "heads by removal_effect (exact ablation: the loss of a causal LM or the pooled embedding of an encoder, "
     "with _se and _lo/_hi over texts) or removal_first_order."),
    ("Intervals and verdicts",
     ("selection_score_lo", "selection_score_hi", "removal_effect_se"),
     "Every _lo / _hi pair is a 95 % percentile interval from a Poisson bootstrap over texts (200 replicates by "
     "default, n_boot); the model runs once. Intervals describe the spread over the corpus' texts and hold the "
     "fitted Gaussian equivalents and null heads fixed. Every label is a test against an interval, and is "
     "'undetermined' below min_tokens real tokens (400 by default)."),
]


def _how_to_read(s: dict, shown: set[str]) -> str:
    """One short paragraph per diagnostic, its columns linked to their meaning below (and named in docs/columns.md)."""
    esc = html.escape

    def col(k: str) -> str:
        return f'<a href="#col-{esc(k)}"><code>{esc(k)}</code></a>' if k in shown else f"<code>{esc(k)}</code>"

    paras = "".join(f"<h3>{esc(title)}</h3><p>{esc(text)} Columns: {', '.join(col(k) for k in cols)} "
                    f'(<a href="#scores">what the scores mean</a>; docs/columns.md in the attnspec repository).</p>'
                    for title, cols, text in HOW_TO_READ)
    rb = s.get("random_head_beta_hat") or {}
    bias = "; ".join(f"score scale {k.removeprefix('score_scale_').replace('_to_', ' to ')}: "
                     f"{100 * v['median_relative_bias']:+.0f} % ({v['heads']} heads)" for k, v in rb.items())
    line = (f"<p>Random-head <code>beta_hat</code> at these text lengths (median of beta_null / score_scale - 1): "
            f"{esc(bias)}.</p>") if bias else ""
    return paras + line


def _intervals(diag) -> str:
    fig = interval_figure(diag.heads, float(diag.summary.get("selection_threshold", np.log(2))))
    return "" if fig is None else f'<img id="intervals" alt="per-head intervals" src="{png_data_uri(fig)}">'


def _n_dependent_pairs(diag) -> str:
    p = diag.pairs
    return str(int((p["dependence"] == "dependent").sum())) if "dependence" in p else "n/a"


def _dependent_pairs(diag, n: int = 10) -> str:
    """The ``n`` pairs with the largest ``cka_excess_lo - cka_excess_background`` (all verdicts), as a table."""
    p = diag.pairs
    if "dependence" not in p or not len(p):
        return "<p>No pairs.</p>"
    lo = p["cka_excess_lo"].where(p["cka_excess_lo"].notna(), p["cka_excess"])
    top = p.assign(over_background=lo - p["cka_excess_background"]).sort_values(
        "over_background", ascending=False, na_position="last").head(n)
    cols = [c for c in ("layer", "head_a", "head_b", "dependence", "cka", "cka_excess", "cka_excess_lo",
                        "cka_excess_hi", "cka_excess_background", "over_background", "shared_kv") if c in top]
    return _table(top[cols])


def _table(df, digits: int = 3) -> str:
    return df.to_html(index=False, float_format=lambda x: f"{x:.{digits}g}", border=0, classes="tbl")


def render_report(diag) -> str:
    """The report as one self-contained HTML page (sections in the module docstring).

    Parameters
    ----------
    diag : Diagnosis
        A result of :func:`attnspec.diagnose`.

    Returns
    -------
    str
        The HTML document (no external resource, no JavaScript; figures are inline PNGs).

    Examples
    --------
    >>> import torch, transformers, attnspec
    >>> from attnspec.models import load_model
    >>> tok, _ = load_model("minilm")[1], torch.manual_seed(0)
    >>> cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
    ...                               vocab_size=tok.vocab_size)                     # a random one-layer BERT
    >>> diag = attnspec.diagnose(transformers.BertModel(cfg).eval(), tok, ["The cat sat on the mat.", "A short text."],
    ...                          min_tokens=0, n_boot=20)
    >>> page = render_report(diag)
    >>> page.startswith("<!DOCTYPE html>"), page.count("<img"), "<h2>Heat maps (layer x head)</h2>" in page
    (True, 2, True)
    """
    s = diag.summary
    esc = html.escape
    notes = "".join(f"<li>{esc(n)}</li>" for n in s.get("notes", []))
    sp = "".join(f"<li><code>{esc(k)}</code>: {v:.3f}</li>" for k, v in s.get("spearman", {}).items())
    shown = [("heads", k) for k in diag.heads.columns] + [("layers", k) for k in diag.layers.columns
                                                          if k not in diag.heads.columns]
    desc = "".join(f'<dt id="col-{esc(k)}"><code>{esc(k)}</code></dt><dd>{esc(COLUMNS[t][k])}</dd>'
                   for t, k in shown if k in COLUMNS[t])
    described = {k for t, k in shown if k in COLUMNS[t]}
    hm = _heatmaps(diag)
    spec = _spectra(diag)
    top = diag.heads.sort_values("selection_score", ascending=False).head(10)
    cols = [c for c in ("layer", "head", "selection", "selection_score", "selection_score_lo", "selection_score_hi",
                        "beta_hat", "beta_hat_lo", "beta_hat_hi", "beta_null", "score_scale", "r2", "entropy_ratio",
                        "confidence", "dependence", "dependence_partner", "removal_effect", "removal_effect_lo",
                        "removal_effect_hi", "michel_importance") if c in top]
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in s.get("timings_s", {}).items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>attnspec diagnosis: {esc(str(s.get('model')))}</title>
{_STYLE}</head><body>
<h1>attnspec diagnosis: {esc(str(s.get('model')))}</h1>
<p class="kv"><span>family: <b>{esc(str(s.get('family')))}</b> ({esc(str(s.get('kind')))})</span>
<span>{s.get('n_layers')} layers, {s.get('n_heads')} heads</span>
<span>{s.get('n_texts')} texts, {s.get('n_tokens')} tokens (longest {s.get('max_tokens_per_text')})</span>
<span>shared-target selection: selective <b>{s.get('n_selective')}</b>, diffuse <b>{s.get('n_diffuse')}</b>,
sparse <b>{s.get('n_sparse')}</b>, undetermined <b>{s.get('n_undetermined')}</b></span>
<span>per-query selection: selective <b>{s.get('n_query_selective', 'n/a')}</b>, not selective
<b>{s.get('n_query_not_selective', 'n/a')}</b>, undetermined <b>{s.get('n_query_undetermined', 'n/a')}</b>
(verdicts need {s.get('min_tokens_for_label')} tokens and a decisive 95 % interval)</span>
<span>dependent heads: <b>{s.get('n_dependent_heads', 'n/a')}</b>, dependent pairs: <b>{_n_dependent_pairs(diag)}</b>
of {len(diag.pairs)}</span>
<span>heads with a role: <b>{s.get('roles', {}).get('n_heads_with_roles', 'n/a')}</b> (roles.csv; the role atlas
below)</span></p>
<p>Texts: {esc(str(s.get('corpus', s.get('texts'))))}. Time: {esc(timing)}.</p>
<h2>Notes</h2><ul>{notes or _THEORY_NOTE}</ul>
<h2>Heat maps (layer x head)</h2>
<p>Hover a cell for its value. On the selection-score map, crosses mark heads flagged diffuse, circles heads
labelled sparse. The role atlas names every rule a head follows (roles.csv, under a family-wise error control over
each head's rules). On the CKA map, a number marks a dependent head and names its partner.</p>
<div id="heatmaps">{hm}</div>
<h2>Uncertainty per head</h2>
<p>Selection score and beta_hat of every head with their 95 % bootstrap intervals over texts; colour: the verdict
(red selective, blue diffuse, purple sparse, grey undetermined). Black dashes: score scale; orange crosses: what
beta_hat gives for a random head at that scale on these texts (beta_null).</p>
{_intervals(diag)}
<h2>How to read this</h2>{_how_to_read(s, described)}
<h2>Layer spectra against the Gaussian-equivalent reference</h2>
<p>Centered output spectrum of each layer (blue), of the layer with every head replaced by its fitted Gaussian
equivalent (orange, filled) and of the free sum of its heads (green, dashed); both axes logarithmic.</p>
<img id="spectra" alt="layer spectra" src="{spec}">
<h2>Head removal: rank agreement (Spearman)</h2><ul>{sp or '<li>not computed</li>'}</ul>
<h2>Most selective heads</h2>
<p>Both kinds side by side: shared targets (every query the same few keys) and per-query rules (each query its own
key, fixed by position or content).</p>
<h3>Shared-target selection</h3>{_table(top[cols])}
<h3>Per-query selection</h3>{_query_top(diag)}
<h2>Most dependent pairs</h2>
<p>The pairs whose CKA excess clears the layer background by most (verdict: <code>dependence</code>; rule in the
note on intervals above).</p>{_dependent_pairs(diag)}
<h2>Layers</h2>{_table(diag.layers)}
<h2 id="scores">What the scores mean</h2><dl>{desc}</dl>
<p style="font-size:.8em;color:#777">attnspec report; normalizations in the docstrings of attnspec.diagnostics.*</p>
</body></html>
"""


def _query_top(diag) -> str:
    """The ten heads of largest ``query_selection_score`` with their rule and verdict (empty without the columns)."""
    h = diag.heads
    if "query_selection_score" not in h:
        return "<p>not computed</p>"
    top = h.sort_values("query_selection_score", ascending=False).head(10)
    cols = [c for c in ("layer", "head", "query_selection", "query_selection_kind", "query_selection_rule",
                        "query_selection_score", "query_selection_score_lo", "query_selection_score_hi", "selection",
                        "score_scale", "removal_effect") if c in top]
    return _table(top[cols])


def write_report(diag, path: str | Path) -> Path:
    """Write :func:`render_report` to ``path`` (UTF-8), creating its folder: through a temporary file in that
    folder renamed into place (:func:`attnspec.atomicio.write_text`), so the report is never half-written and a
    symlink at ``path`` is replaced, not written through.

    Parameters
    ----------
    diag : Diagnosis
        A result of :func:`attnspec.diagnose`.
    path : str or pathlib.Path
        The HTML file to write (replaced when it exists).

    Returns
    -------
    pathlib.Path
        ``path``.

    Examples
    --------
    >>> import tempfile, attnspec
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> diag = attnspec.diagnose(*tiny_causal_lm(), min_tokens=0, n_boot=20)     # a random 2-layer GPT-2
    >>> out = write_report(diag, tempfile.mkdtemp() + "/reports/tiny.html")     # parent directories created
    >>> out.name, out.read_text(encoding="utf-8") == render_report(diag)
    ('tiny.html', True)
    """
    from ..atomicio import write_text
    return write_text(path, render_report(diag))
