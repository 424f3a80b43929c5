"""Paired comparison of two diagnoses made on the same texts and seed.

attnspec's bootstrap weights are seeded by ``(seed, text position)`` (:mod:`attnspec.diagnostics.statistics.bootstrap`),
so two diagnoses of two models on the same texts with the same seed re-weight every text identically in replicate
``b``. The difference of their replicates, ``X_B*_b - X_A*_b``, is then the replicate of the difference
``X_B - X_A`` on the same resampled corpus: a *paired* bootstrap, whose interval leaves out the spread that the two
models share (which texts are easy, long or odd), and is far narrower than the interval of the difference of two
independent diagnoses.

:func:`compare` checks that the two diagnoses are comparable (same seed, same replicates, same texts and corpus
size; refused otherwise with one line), matches the heads by ``(layer, head)`` (the heads the geometry shares, said
in the summary) and builds, for each diagnostic ``X`` with replicates (:data:`DIAGNOSTICS`), the columns ``X_a``,
``X_b``, ``X_diff`` (B minus A), and its 95 % percentile interval ``X_diff_lo`` / ``X_diff_hi``. A head has
``changed`` when some diagnostic's paired interval excludes 0 by more than that diagnostic's practical margin
(:data:`MARGINS`): ``X_diff_lo > m`` or ``X_diff_hi < -m``; ``changed_in`` names those diagnostics.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..diagnostics.result.diagnosis import Diagnosis
from ..diagnostics.statistics.bootstrap import LEVEL, interval
from ..jsonio import jsonable

__all__ = ["Comparison", "ComparisonError", "compare", "paired_columns", "DIAGNOSTICS", "MARGINS", "OUTPUT_FILES"]

#: Diagnostics compared (when both diagnoses carry their replicates), in the order of the table.
DIAGNOSTICS = ("score_scale", "beta_corrected", "beta_hat", "selection_score", "spec_w1_rel",
               "query_selection_score", "cka_excess", "removal_spec_shift", "removal_effect",
               "removal_first_order", "removal_estimate")

#: Practical margin of each diagnostic: a head has changed in ``X`` when the paired interval of ``X_diff``
#: excludes 0 by more than this (in the units of the column). ``score_scale`` and ``beta_corrected``: a tenth of
#: an inverse temperature; ``selection_score``: 0.1 in log units (a seventh of its threshold, log 2);
#: ``spec_w1_rel``: 0.05 and ``removal_spec_shift``: 0.02 of a mean eigenvalue; ``query_selection_score``: 0.05
#: (half its verdict margin); ``cka_excess``: 0.05; ``removal_effect``: a quarter of the median ``|removal_effect|``
#: of A's heads (``('median', 0.25)``: its units, nats per token or 1 - cos, and its size differ from model to
#: model). ``beta_hat`` (biased on short texts) and ``removal_first_order`` / ``removal_estimate`` are reported but
#: do not decide ``changed`` (margin None). The margins were chosen on MiniLM (docs/compare.md): a head whose
#: output projection is zeroed, or whose queries are scaled by 3, changes, and at most 2 of the other 71 heads do.
MARGINS = {"score_scale": 0.1, "beta_corrected": 0.1, "beta_hat": None, "selection_score": 0.1,
           "spec_w1_rel": 0.05, "query_selection_score": 0.05, "cka_excess": 0.05, "removal_spec_shift": 0.02,
           "removal_effect": ("median", 0.25), "removal_first_order": None, "removal_estimate": None}

#: Files :meth:`Comparison.save` writes.
OUTPUT_FILES = ("heads.csv", "report.html", "summary.json")


class ComparisonError(ValueError):
    """Two diagnoses that cannot be compared pairwise (different texts, seeds or replicates, no replicates, no
    common head); the message is one line.

    Examples
    --------
    >>> str(ComparisonError("a and b differ"))
    'a and b differ'
    """


@dataclass
class Comparison:
    """Per-head differences between two diagnoses, with paired bootstrap intervals (module docstring).

    Attributes
    ----------
    heads : pandas.DataFrame
        One row per head both diagnoses have: ``layer``, ``head``, for each compared diagnostic ``X``: ``X_a``,
        ``X_b``, ``X_diff`` (b - a), ``X_diff_lo``, ``X_diff_hi``; then ``changed`` and ``changed_in``
        (comma-separated names, ``''`` when unchanged).
    summary : dict
        The two diagnoses (model, texts, seed, replicates), the margins, the number of heads changed (in all and
        per diagnostic), matched and unmatched heads, notes.
    a, b : Diagnosis
        The diagnoses compared (the report draws their layer spectra).
    replicates : dict
        ``{X: (n_boot, n_heads)}`` the paired replicates of ``X_diff``.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> heads = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score_scale": [1.0, 2.0]})
    >>> meta = {"seed": 0, "n_boot": 50, "text_ids": np.arange(8), "n_texts": 8, "n_tokens": 100, "max_tokens": 20}
    >>> rng = np.random.default_rng(0)
    >>> ra = {"score_scale": (np.array([1.0, 2.0]) + 0.3 * rng.standard_normal((50, 1))).astype(np.float32)}
    >>> a = Diagnosis(heads, pd.DataFrame(), summary={"model": "a"}, replicates=ra, replicate_meta=meta)
    >>> hb = heads.assign(score_scale=[1.0, 2.5])
    >>> b = Diagnosis(hb, pd.DataFrame(), summary={"model": "b"}, replicates={"score_scale": ra["score_scale"] + [0, .5]},
    ...               replicate_meta=meta)
    >>> c = compare(a, b)
    >>> c
    Comparison(a vs b: 2 heads, 1 changed)
    >>> c.heads[["head", "score_scale_diff", "score_scale_diff_lo", "changed", "changed_in"]].round(3).values.tolist()
    [[0, 0.0, 0.0, False, ''], [1, 0.5, 0.5, True, 'score_scale']]
    """

    heads: pd.DataFrame
    summary: dict = field(default_factory=dict)
    a: Diagnosis | None = field(default=None, repr=False)
    b: Diagnosis | None = field(default=None, repr=False)
    replicates: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        s = self.summary
        return f"Comparison({s.get('a', {}).get('model')} vs {s.get('b', {}).get('model')}: " \
               f"{len(self.heads)} heads, {s.get('n_changed')} changed)"

    def _repr_html_(self) -> str:
        """The notebook display (:func:`attnspec.report.notebook.comparison_html`); the figure:
        :func:`attnspec.figures.difference_figure` of :attr:`heads`."""
        from ..report.notebook import comparison_html
        return comparison_html(self)

    def changed(self) -> pd.DataFrame:
        """The rows of the heads that changed, the most changed first (by the largest margin-scaled distance of an
        interval from 0).

        Returns
        -------
        pandas.DataFrame

        Examples
        --------
        >>> c = Comparison(pd.DataFrame({"layer": [0, 0], "head": [0, 1], "changed": [False, True],
        ...                              "changed_in": ["", "score_scale"], "change_size": [0.0, 3.0]}))
        >>> c.changed()["head"].tolist()
        [1]
        """
        h = self.heads
        return h[h["changed"]].sort_values("change_size", ascending=False)

    def summary_json(self) -> str:
        """:attr:`summary` as an indented JSON document."""
        return json.dumps(jsonable(self.summary), indent=2)

    def save(self, directory: str | Path, report: bool = True) -> list[Path]:
        """Write ``heads.csv``, ``report.html`` (unless ``report=False``) and ``summary.json`` (last) into
        ``directory``, each through a temporary file renamed into place once all are written.

        Parameters
        ----------
        directory : str or pathlib.Path
            Created if missing.
        report : bool
            Also write the HTML report (:func:`attnspec.report.compare.render_comparison`).

        Returns
        -------
        list of pathlib.Path

        Examples
        --------
        >>> import tempfile
        >>> c = Comparison(pd.DataFrame({"layer": [0], "head": [0], "changed": [False]}), {"n_changed": 0})
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     [p.name for p in c.save(tmp, report=False)]
        ['heads.csv', 'summary.json']
        """
        from ..atomicio import StagedFiles
        with StagedFiles(directory, last="summary.json", stale=OUTPUT_FILES) as st:
            self.heads.to_csv(st.path("heads.csv"), index=False)
            if report:
                from ..report.compare import render_comparison
                st.path("report.html").write_text(render_comparison(self), encoding="utf-8")
            st.path("summary.json").write_text(self.summary_json(), encoding="utf-8")
            names = list(st.items)
        return [Path(directory) / n for n in names]


def _as_diagnosis(x, name: str) -> tuple[Diagnosis, str]:
    """The diagnosis ``x`` (a folder read with every file checked, :mod:`.folders`) and why its replicates were not
    read (``''``)."""
    if isinstance(x, Diagnosis):
        return x, ""
    if isinstance(x, (str, Path)):
        from .folders import read_diagnosis
        try:
            return read_diagnosis(x, name)
        except FileNotFoundError as err:
            raise ComparisonError(f"{name}: {err}") from None
    raise TypeError(f"{name} must be a Diagnosis or a diagnosis output folder, got {type(x).__name__}")


def _check(a: Diagnosis, b: Diagnosis, why: tuple = ("", "")) -> None:
    """One-line refusal when the replicates of ``a`` and ``b`` are not paired (``why``: why a folder's replicates
    were not read)."""
    for name, d, reason in (("a", a, why[0]), ("b", b, why[1])):
        if not d.replicates:
            raise ComparisonError(
                f"{name} ({d.summary.get('model')}) has no bootstrap replicates: "
                + (f"{reason}; rerun attnspec diagnose into that folder" if reason else
                   "diagnose with at least 8 texts and n_boot >= 10 (a folder needs the replicates.npz that attnspec "
                   "writes beside heads.csv)"))
    ma, mb = a.replicate_meta, b.replicate_meta
    for key, what in (("seed", "seeds"), ("n_boot", "numbers of bootstrap replicates")):
        if int(ma.get(key, -1)) != int(mb.get(key, -2)):
            raise ComparisonError(f"different {what}: a {ma.get(key)}, b {mb.get(key)} (diagnose both with the "
                                  "same --seed and --n-boot)")
    ref = lambda m: int(m.get("reference_seed", m.get("seed", -1)))   # noqa: E731  (older files: the seed keyed both)
    if ref(ma) != ref(mb):
        raise ComparisonError(f"different reference seeds: a {ref(ma)}, b {ref(mb)} (the null heads and equivalents "
                              "differ; diagnose both with the same --reference-seed)")
    ta, tb = np.asarray(ma.get("text_ids", [])), np.asarray(mb.get("text_ids", []))
    if ta.shape != tb.shape or not np.array_equal(ta, tb):
        raise ComparisonError(f"different texts: a has {ta.size} text positions, b {tb.size} (diagnose both on "
                              "the same texts)")
    la, lb = ma.get("text_lengths"), mb.get("text_lengths")
    if la is not None and lb is not None and not np.array_equal(np.asarray(la), np.asarray(lb)):
        k = int(np.flatnonzero(np.asarray(la) != np.asarray(lb))[0]) if np.shape(la) == np.shape(lb) else 0
        raise ComparisonError(f"different texts: text {int(ta[k]) if k < ta.size else k} has "
                              f"{np.asarray(la)[k] if k < np.size(la) else '?'} tokens in a and "
                              f"{np.asarray(lb)[k] if k < np.size(lb) else '?'} in b (diagnose both on the same "
                              "texts with the same tokenizer)")
    for key in ("n_texts", "n_tokens", "max_tokens"):
        if key in ma and key in mb and int(ma[key]) != int(mb[key]):
            raise ComparisonError(f"different texts: {key} a {int(ma[key])}, b {int(mb[key])} (the same texts and "
                                  "tokenizer give the same token counts)")


def paired_columns(ra: np.ndarray, rb: np.ndarray, xa: np.ndarray, xb: np.ndarray, margin: float | None,
                   level: float = LEVEL) -> dict[str, np.ndarray]:
    """The difference ``xb - xa`` of one diagnostic, its paired percentile interval, and whether the interval
    clears 0 by more than ``margin``.

    Parameters
    ----------
    ra, rb : numpy.ndarray
        ``(n_boot, n)`` replicates of ``a`` and ``b`` on the same weights.
    xa, xb : numpy.ndarray
        ``(n,)`` point values.
    margin : float or None
        Practical margin (None: never changed).
    level : float
        Two-sided level of the interval.

    Returns
    -------
    dict
        ``diff``, ``lo``, ``hi``, ``changed`` (bool), ``size`` (how far the interval lies beyond the margin, in
        margins; 0 when not changed).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> common = rng.standard_normal((200, 1))          # the spread both models share
    >>> ra, rb = 1 + common, 1.2 + common + 0.01 * rng.standard_normal((200, 1))
    >>> p = paired_columns(ra, rb, np.array([1.0]), np.array([1.2]), margin=0.1)
    >>> round(float(p["lo"][0]), 2), round(float(p["hi"][0]), 2), bool(p["changed"][0])
    (0.18, 0.22, True)
    """
    diff = np.asarray(xb, float) - np.asarray(xa, float)
    lo, hi = interval(np.asarray(rb, np.float64) - np.asarray(ra, np.float64), level)
    if margin is None:
        changed = np.zeros(diff.shape, bool)
        size = np.zeros(diff.shape)
    else:
        m = max(float(margin), 1e-300)
        with np.errstate(invalid="ignore"):
            beyond = np.fmax(lo - margin, -hi - margin)
            changed = np.isfinite(beyond) & (beyond > 0)
            size = np.where(changed, beyond / m, 0.0)
    return {"diff": diff, "lo": lo, "hi": hi, "changed": changed, "size": size}


#: A relative margin (``('median', f)``) is taken over A's live heads: those not ``dead`` whose ``|X|`` exceeds this
#: fraction of the largest (a pruned head's removal effect is 0 up to rounding, 1e-17: a median over mostly pruned
#: heads would be a margin of rounding noise).
LIVE_FRACTION = 1e-6
#: A margin is at least this fraction of the largest ``|X|`` of A's heads: the replicates are float32 (7 digits),
#: and a difference below that is their rounding.
RESOLUTION = 1e-5


#: A head whose output energy is at most this fraction of the model's loudest head's is silent (a pruned head
#: perturbed by rounding: its output spectrum is the rounding's, and its spectral diagnostics are noise).
SILENT_SHARE = 1e-12
#: Diagnostics of the shape of a head's output spectrum: they do not decide ``changed`` for a head silent in both.
OUTPUT_DIAGNOSTICS = ("selection_score", "spec_w1_rel", "cka_excess", "removal_spec_shift")


def _silent(d: Diagnosis, heads: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """Heads (the ``rows`` of ``heads``) that are dead or carry at most :data:`SILENT_SHARE` of the output energy
    of the model's loudest head (its share of its layer's energy times the layer's value power; the share alone
    without the layers table)."""
    out = np.zeros(len(rows), bool)
    if "dead" in heads:
        out |= heads["dead"].fillna(False).to_numpy(bool)[rows]
    if "energy_share" in heads:
        power = heads["energy_share"].to_numpy(float)
        lay = d.layers
        if len(lay) and {"layer", "value_power"} <= set(lay):
            per_layer = lay.drop_duplicates("layer").set_index("layer")["value_power"]
            power = power * heads["layer"].map(per_layer).to_numpy(float)
        finite = power[np.isfinite(power)]
        top = float(finite.max()) if finite.size else 0.0
        with np.errstate(invalid="ignore"):
            out |= np.isfinite(power[rows]) & (power[rows] <= SILENT_SHARE * top)
    return out


def relative_margin(xa: np.ndarray, fraction: float, dead: np.ndarray | None = None) -> tuple[float | None, str]:
    """``fraction`` times the median ``|X|`` of A's live heads (:data:`LIVE_FRACTION`), at least
    :data:`RESOLUTION` of the largest; ``(None, why)`` when no head is live.

    Parameters
    ----------
    xa : numpy.ndarray
        A's point values of the diagnostic.
    fraction : float
    dead : numpy.ndarray of bool, optional
        A's heads with zero output (the ``dead`` column), left out.

    Returns
    -------
    (float or None, str)

    Examples
    --------
    Six pruned heads (rounding-size effects) and two live ones: the margin is a quarter of the live heads' median,
    not of the rounding noise.

    >>> x = np.array([1.2e-4, -1.9e-17, -1.9e-17, 2e-17, 6.2e-5, -1.9e-17, 0.0, 0.0])
    >>> m, why = relative_margin(x, 0.25)
    >>> round(m, 9), why
    (2.275e-05, '')
    >>> relative_margin(np.zeros(4), 0.25)
    (None, 'no head of a has a nonzero value (every head pruned?); a margin relative to its heads would be 0')
    """
    ax = np.abs(np.asarray(xa, float))
    keep = np.isfinite(ax)
    if dead is not None:
        keep &= ~np.asarray(dead, bool)
    top = float(ax[keep].max()) if keep.any() else 0.0
    live = ax[keep & (ax > LIVE_FRACTION * top)] if top > 0 else ax[:0]
    if not live.size:
        return None, "no head of a has a nonzero value (every head pruned?); a margin relative to its heads would be 0"
    return max(float(fraction * np.median(live)), RESOLUTION * top), ""


def check_margins(margins) -> dict:
    """The user's ``margins`` checked: a dict from diagnostics of :data:`DIAGNOSTICS` to None, a finite number
    >= 0 or ``('median', f)`` with ``f > 0``; a ``TypeError``/``ValueError`` naming the entry otherwise.

    Examples
    --------
    >>> check_margins({"score_scale": 0.2, "removal_effect": ("median", 0.5)})
    {'score_scale': 0.2, 'removal_effect': ('median', 0.5)}
    >>> check_margins({"scale": 0.2})
    Traceback (most recent call last):
    ValueError: margins: unknown diagnostic 'scale' (known: score_scale, beta_corrected, ...)
    """
    if margins is None:
        return {}
    if not isinstance(margins, dict):
        raise TypeError(f"margins must be a dict {{diagnostic: margin}}, got {type(margins).__name__}")
    out = {}
    for k, v in margins.items():
        if k not in DIAGNOSTICS:
            raise ValueError(f"margins: unknown diagnostic {k!r} (known: {', '.join(DIAGNOSTICS[:2])}, ...)")
        if isinstance(v, (tuple, list)) and len(v) == 2 and v[0] == "median" and _number(v[1]) and v[1] > 0:
            out[k] = ("median", float(v[1]))
        elif v is None or (_number(v) and v >= 0):
            out[k] = None if v is None else float(v)
        else:
            raise ValueError(f"margins[{k!r}] must be None, a finite number >= 0 or ('median', f) with f > 0, "
                             f"got {v!r}")
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and bool(np.isfinite(v))


def compare(a, b, margins: dict | None = None, level: float = LEVEL) -> Comparison:
    """Per-head paired differences ``b - a`` between two diagnoses of the same texts and seed.

    Parameters
    ----------
    a, b : Diagnosis or str or pathlib.Path
        Diagnoses (:func:`attnspec.diagnose`) or their output folders (``attnspec diagnose --out``,
        :meth:`Diagnosis.to_csv`), made on the same texts with the same seed and ``n_boot`` (at least 8 texts and
        10 replicates: the replicates are what is paired).
    margins : dict, optional
        Practical margins overriding :data:`MARGINS` (``{column: float or None}``).
    level : float
        Two-sided level of the intervals (0.95).

    Returns
    -------
    Comparison

    Raises
    ------
    ComparisonError
        Different seeds, replicates or texts; a diagnosis without replicates; no head in common.

    Examples
    --------
    A random one-layer BERT against itself on 8 texts: every difference and every interval is exactly 0, nothing
    changed.

    >>> import attnspec, torch, transformers
    >>> from attnspec.data import builtin_texts
    >>> from attnspec.models import load_model
    >>> tok, _ = load_model("minilm")[1], torch.manual_seed(0)
    >>> cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
    ...                               vocab_size=tok.vocab_size)
    >>> d = attnspec.diagnose(transformers.BertModel(cfg).eval(), tok, builtin_texts(8), n_boot=20, removal="none")
    >>> c = compare(d, d)
    >>> c.summary["n_changed"], float(c.heads["score_scale_diff_hi"].abs().max())
    (0, 0.0)
    """
    user_margins = check_margins(margins)
    if not _number(level) or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    (da, why_a), (db, why_b) = _as_diagnosis(a, "a"), _as_diagnosis(b, "b")
    _check(da, db, (why_a, why_b))
    m = dict(MARGINS)
    m.update(user_margins)
    key = ["layer", "head"]
    ha, hb = da.heads.reset_index(drop=True), db.heads.reset_index(drop=True)
    ia = pd.Series(np.arange(len(ha)), index=pd.MultiIndex.from_frame(ha[key].astype(int)))
    ib = pd.Series(np.arange(len(hb)), index=pd.MultiIndex.from_frame(hb[key].astype(int)))
    common = ia.index.intersection(ib.index, sort=False)
    if len(common) == 0:
        raise ComparisonError("no head in common: a and b have different layers and heads")
    common = common.sort_values()
    pa, pb = ia.loc[common].to_numpy(), ib.loc[common].to_numpy()
    out = pd.DataFrame({"layer": common.get_level_values(0), "head": common.get_level_values(1)})
    changed = np.zeros(len(out), bool)
    size = np.zeros(len(out))
    which: list[list[str]] = [[] for _ in range(len(out))]
    per_diag: dict[str, int] = {}
    notes: list[str] = []
    silent = _silent(da, ha, pa) & _silent(db, hb, pb)
    if silent.any():
        notes.append(f"{int(silent.sum())} heads silent in both (dead, or an output energy below "
                     f"{SILENT_SHARE:g} of the loudest head's): their output-spectrum diagnostics "
                     f"({', '.join(OUTPUT_DIAGNOSTICS)}) do not decide changed")
    reps: dict[str, np.ndarray] = {}
    compared = []
    resolved: dict[str, float | None] = {}
    for col in DIAGNOSTICS:
        if col not in da.replicates or col not in db.replicates or col not in ha or col not in hb:
            continue
        ra, rb = da.replicates[col][:, pa], db.replicates[col][:, pb]
        xa, xb = ha[col].to_numpy(float)[pa], hb[col].to_numpy(float)[pb]
        margin = m.get(col)
        if isinstance(margin, (tuple, list)):          # ('median', f): f times the median |X| of a's live heads
            margin, why = relative_margin(xa, float(margin[1]), ha["dead"].to_numpy(bool)[pa] if "dead" in ha else None)
            if why:
                notes.append(f"{col} does not decide changed: {why}")
        resolved[col] = margin
        p = paired_columns(ra, rb, xa, xb, margin, level)
        if col in OUTPUT_DIAGNOSTICS and silent.any():      # rounding-size outputs: no spectrum to compare
            p["changed"] = p["changed"] & ~silent
            p["size"] = np.where(silent, 0.0, p["size"])
        out[f"{col}_a"], out[f"{col}_b"] = xa, xb
        out[f"{col}_diff"], out[f"{col}_diff_lo"], out[f"{col}_diff_hi"] = p["diff"], p["lo"], p["hi"]
        reps[col] = np.asarray(rb, np.float64) - np.asarray(ra, np.float64)
        compared.append(col)
        per_diag[col] = int(p["changed"].sum())
        changed |= p["changed"]
        size = np.fmax(size, p["size"])
        for i in np.flatnonzero(p["changed"]):
            which[i].append(col)
    out["changed"] = changed
    out["changed_in"] = [",".join(w) for w in which]
    out["change_size"] = size
    only_a = [list(map(int, k)) for k in ia.index.difference(common)]
    only_b = [list(map(int, k)) for k in ib.index.difference(common)]
    if only_a or only_b:
        notes.append(f"geometry differs: {len(common)} heads matched by (layer, head); {len(only_a)} only in a, "
                     f"{len(only_b)} only in b")
    missing = [c for c in DIAGNOSTICS if c not in compared and (c in da.replicates or c in db.replicates)]
    if missing:
        notes.append("not compared (replicates in one diagnosis only): " + ", ".join(missing))
    meta = da.replicate_meta

    def about(d: Diagnosis) -> dict:
        s = d.summary
        return {k: s.get(k) for k in ("model", "family", "kind", "n_layers", "n_heads", "n_texts", "n_tokens")}
    summary = {"a": about(da), "b": about(db), "seed": int(meta["seed"]), "n_boot": int(meta["n_boot"]),
               "n_texts": int(meta.get("n_texts", len(meta.get("text_ids", [])))), "interval_level": level,
               "difference": "b minus a",
               "changed_if": "some diagnostic's paired interval excludes 0 by more than its margin: "
                             "X_diff_lo > margin or X_diff_hi < -margin",
               "margins": resolved,
               "margin_rules": {c: (f"{m[c][1]} x median |{c}| of a" if isinstance(m.get(c), (tuple, list))
                                    else m.get(c)) for c in compared}, "compared": compared,
               "n_heads": int(len(out)), "n_changed": int(changed.sum()), "n_changed_by": per_diag,
               "heads_only_in_a": only_a, "heads_only_in_b": only_b, "notes": notes}
    return Comparison(heads=out, summary=summary, a=da, b=db, replicates=reps)
