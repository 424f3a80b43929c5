"""Diagnoses over training: one per checkpoint on the same texts and seed, in one long table.

:func:`track` diagnoses every checkpoint (a folder of weights, or a training output folder with ``checkpoint-N``
folders) on the same texts with the same options, saves each diagnosis under ``OUT/diagnoses/step-N/`` (tables,
summary, replicates) and writes ``OUT/track.csv``: one row per (step, layer, head) with the columns of
:data:`TRACK_COLUMNS` (point values, interval ends, verdicts). A checkpoint whose diagnosis is already in ``OUT``
(with the same settings) is read back, not recomputed, so an interrupted run resumes. The
:class:`attnspec.callbacks.AttnspecCallback` appends the same rows (:func:`track_rows`) while a model trains.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..diagnostics.result.diagnosis import Diagnosis
from ..jsonio import jsonable

__all__ = ["TRACK_COLUMNS", "SCALARS", "Tracking", "track", "track_rows", "summary_scalars", "find_checkpoints",
           "write_track"]

#: Per-head columns of the long table (those the diagnosis has), after ``step``, ``checkpoint``, ``layer``,
#: ``head``.
TRACK_COLUMNS = ("score_scale", "score_scale_lo", "score_scale_hi", "beta_corrected", "beta_corrected_lo",
                 "beta_corrected_hi", "selection_score", "selection_score_lo", "selection_score_hi", "selection",
                 "query_selection_score", "query_selection_score_lo", "query_selection_score_hi",
                 "query_selection_rule", "query_selection", "spec_w1_rel", "spec_w1_rel_lo", "spec_w1_rel_hi",
                 "cka_excess", "cka_excess_lo", "cka_excess_hi", "dependence", "entropy", "confidence",
                 "removal_effect", "removal_effect_lo", "removal_effect_hi", "removal_first_order",
                 "removal_first_order_lo", "removal_first_order_hi", "dead")

#: Summary counts logged as scalars (:func:`summary_scalars`), each under ``attnspec/<name>``.
SCALARS = ("n_selective", "n_diffuse", "n_sparse", "n_undetermined", "n_query_selective", "n_dependent_heads")

_STEP = re.compile(r"checkpoint-(\d+)$")


def track_rows(diag: Diagnosis, step: int, checkpoint: str = "") -> pd.DataFrame:
    """The rows of the long table for one diagnosis: ``step``, ``checkpoint``, ``layer``, ``head`` and the columns
    of :data:`TRACK_COLUMNS` it has.

    Parameters
    ----------
    diag : Diagnosis
    step : int
        Training step (or epoch) of the diagnosed weights.
    checkpoint : str
        Where the weights came from (a folder name; ``''`` for a model in memory).

    Returns
    -------
    pandas.DataFrame

    Examples
    --------
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score_scale": [1.0, 2.0], "x": [0, 0]}),
    ...               layers=pd.DataFrame())
    >>> track_rows(d, 100, "checkpoint-100").values.tolist()
    [[100, 'checkpoint-100', 0, 0, 1.0], [100, 'checkpoint-100', 0, 1, 2.0]]
    """
    h = diag.heads
    cols = ["layer", "head"] + [c for c in TRACK_COLUMNS if c in h]
    out = h[cols].copy().reset_index(drop=True)
    out.insert(0, "checkpoint", checkpoint)
    out.insert(0, "step", int(step))
    return out


def summary_scalars(diag: Diagnosis) -> dict[str, float]:
    """Scalars summarizing a diagnosis, for a training log: the verdict counts of :data:`SCALARS` and the means over
    heads of ``score_scale``, ``selection_score``, ``query_selection_score`` and ``removal_effect`` (those present),
    each named ``attnspec/<name>``.

    Parameters
    ----------
    diag : Diagnosis

    Returns
    -------
    dict of str to float

    Examples
    --------
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0, 0], "head": [0, 1], "score_scale": [1.0, 2.0]}),
    ...               layers=pd.DataFrame(), summary={"n_selective": 1})
    >>> summary_scalars(d)
    {'attnspec/n_selective': 1.0, 'attnspec/score_scale_mean': 1.5}
    """
    out = {f"attnspec/{k}": float(diag.summary[k]) for k in SCALARS if k in diag.summary}
    for col in ("score_scale", "selection_score", "query_selection_score", "removal_effect"):
        if col in diag.heads:
            out[f"attnspec/{col}_mean"] = float(np.nanmean(diag.heads[col].to_numpy(float)))
    return out


def write_track(table: pd.DataFrame, directory: str | Path, summary: dict | None = None, report: bool = True
                ) -> list[Path]:
    """Write ``track.csv``, ``trajectories.png`` and ``report.html`` (unless ``report=False``) and ``summary.json``
    (last) into ``directory``, each through a temporary file renamed into place once all are written.

    Parameters
    ----------
    table : pandas.DataFrame
        The long table (:func:`track_rows` of every step).
    directory : str or pathlib.Path
    summary : dict, optional
        Written as ``summary.json`` (with the steps and the number of rows added).
    report : bool
        Also draw the trajectories and write the HTML page (:func:`attnspec.report.compare.render_tracking`).

    Returns
    -------
    list of pathlib.Path

    Examples
    --------
    >>> import tempfile
    >>> t = pd.DataFrame({"step": [0, 10], "checkpoint": ["", ""], "layer": [0, 0], "head": [0, 0],
    ...                   "score_scale": [1.0, 1.5]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     [p.name for p in write_track(t, tmp, report=False)]
    ['track.csv', 'summary.json']
    """
    from ..atomicio import StagedFiles
    table = table.sort_values(["step", "layer", "head"], kind="stable").reset_index(drop=True)
    s = dict(summary or {})
    s.update({"steps": sorted(int(x) for x in table["step"].unique()) if len(table) else [], "n_rows": int(len(table))})
    with StagedFiles(directory, last="summary.json", stale=("trajectories.png", "report.html")) as st:
        table.to_csv(st.path("track.csv"), index=False)
        if report and len(table):
            from ..figures import pyplot
            from ..figures.compare import trajectories_figure
            from ..report.compare import render_tracking
            fig = trajectories_figure(table)
            if fig is not None:
                fig.savefig(st.path("trajectories.png"), format="png", dpi=120)
                pyplot().close(fig)
            st.path("report.html").write_text(render_tracking(table, s), encoding="utf-8")
        st.path("summary.json").write_text(json.dumps(jsonable(s), indent=2), encoding="utf-8")
        names = list(st.items)
    return [Path(directory) / n for n in names]


def find_checkpoints(paths) -> list[tuple[int, Path]]:
    """The checkpoints to track, with their steps, in order of step.

    A path named ``checkpoint-N`` is step ``N``; a folder that holds ``checkpoint-N`` folders (a ``transformers``
    Trainer's output folder) stands for all of them; any other path gets its position in the list as step, unless a
    ``trainer_state.json`` beside its weights names a ``global_step``.

    Parameters
    ----------
    paths : str or pathlib.Path or list of them

    Returns
    -------
    list of (int, pathlib.Path)

    Raises
    ------
    ValueError
        A path that does not exist, or two checkpoints with the same step.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for n in (500, 100, 1000):
    ...     (root / f"checkpoint-{n}").mkdir()
    >>> [(s, p.name) for s, p in find_checkpoints(root)]
    [(100, 'checkpoint-100'), (500, 'checkpoint-500'), (1000, 'checkpoint-1000')]
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    found: list[tuple[int, Path]] = []
    for i, p in enumerate(Path(x) for x in paths):
        if not p.exists():
            raise ValueError(f"{p}: no such checkpoint (a folder of weights, or a folder of checkpoint-N folders)")
        m = _STEP.search(p.name)
        if m:
            found.append((int(m.group(1)), p))
            continue
        subs = [q for q in p.iterdir() if q.is_dir() and _STEP.search(q.name)] if p.is_dir() else []
        if subs:
            found.extend((int(_STEP.search(q.name).group(1)), q) for q in subs)
            continue
        state = p / "trainer_state.json" if p.is_dir() else None
        step = i
        if state is not None and state.is_file():
            step = int(json.loads(state.read_text()).get("global_step", i))
        found.append((step, p))
    found.sort(key=lambda t: t[0])
    steps = [s for s, _ in found]
    if len(set(steps)) != len(steps):
        dup = sorted({s for s in steps if steps.count(s) > 1})
        raise ValueError(f"two checkpoints have step {dup[0]}: give each checkpoint once")
    return found


def _texts_key(texts) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(str(t).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


@dataclass
class Tracking:
    """Diagnoses of checkpoints (:func:`track`).

    Attributes
    ----------
    table : pandas.DataFrame
        The long table: ``step``, ``checkpoint``, ``layer``, ``head`` and :data:`TRACK_COLUMNS`.
    diagnoses : dict
        ``{step: Diagnosis}``.
    summary : dict
        Steps, checkpoints, settings, which steps were read back (``resumed``).

    Examples
    --------
    >>> t = Tracking(pd.DataFrame({"step": [0, 0, 10, 10], "head": [0, 1, 0, 1]}), summary={"steps": [0, 10]})
    >>> t
    Tracking(2 steps, 4 rows)
    """

    table: pd.DataFrame
    diagnoses: dict = field(default_factory=dict, repr=False)
    summary: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Tracking({self.table['step'].nunique() if len(self.table) else 0} steps, {len(self.table)} rows)"


def track(checkpoints, texts=None, out: str | Path | None = None, tokenizer=None, load=None, options=None,
          report: bool = True, log=None, **kwargs) -> Tracking:
    """Diagnose every checkpoint on the same texts and seed; one long table (module docstring).

    Parameters
    ----------
    checkpoints : path or list
        Checkpoint folders, or a training output folder with ``checkpoint-N`` folders (:func:`find_checkpoints`).
    texts : list of str, optional
        The texts (default: the built-in corpus, as :func:`attnspec.diagnose`).
    out : str or pathlib.Path, optional
        Output folder: ``diagnoses/step-N/`` per checkpoint, ``track.csv``, ``trajectories.png``, ``report.html``,
        ``summary.json``. With ``out``, a checkpoint already diagnosed there with the same settings is read back.
    tokenizer : optional
        The tokenizer when the checkpoints carry none (else each checkpoint's own).
    load : callable, optional
        ``load(path) -> (model, tokenizer)`` (default :func:`attnspec.models.load_model`).
    options : DiagnoseOptions, optional
        The diagnosis options (or keyword arguments of :func:`attnspec.diagnose`).
    report : bool
        Write the trajectories figure and the HTML page into ``out``.
    log : callable, optional
        Called with one line per checkpoint.

    Returns
    -------
    Tracking

    Examples
    --------
    Two random tiny BERTs saved as Trainer checkpoints, tracked on 8 built-in texts; the second run reads both
    diagnoses back:

    >>> import tempfile, torch, transformers
    >>> from attnspec.data import builtin_texts
    >>> from attnspec.models import load_model
    >>> tok = load_model("minilm")[1]
    >>> root = Path(tempfile.mkdtemp())
    >>> cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
    ...                               num_attention_heads=2, intermediate_size=64)
    >>> for step in (10, 20):
    ...     _ = torch.manual_seed(step)
    ...     transformers.BertModel(cfg).save_pretrained(root / "run" / f"checkpoint-{step}")
    ...     _ = tok.save_pretrained(root / "run" / f"checkpoint-{step}")
    >>> kw = dict(texts=builtin_texts(8), out=root / "track", n_boot=20, removal="none", gradient=False, report=False)
    >>> t = track(root / "run", **kw)
    >>> t, t.table[["step", "layer", "head"]].values.tolist()
    (Tracking(2 steps, 4 rows), [[10, 0, 0], [10, 0, 1], [20, 0, 0], [20, 0, 1]])
    >>> again = track(root / "run", **kw)
    >>> again.summary["resumed"], bool((again.table.fillna(0) == t.table.fillna(0)).all().all())
    ([10, 20], True)
    """
    from ..data import builtin_texts
    from ..diagnostics import DiagnoseOptions, diagnose
    if load is None:
        from ..models import load_model as load
    found = find_checkpoints(checkpoints)
    if not found:
        raise ValueError(f"{checkpoints}: no checkpoint to track")
    opts = options.replace(**kwargs) if options is not None else DiagnoseOptions(**kwargs)
    if texts is None:
        texts = builtin_texts(opts.n_texts) if getattr(opts, "n_texts", None) else builtin_texts()
    texts = list(texts)
    settings = {"texts": _texts_key(texts), "n_texts": len(texts),
                **{k: v for k, v in jsonable({k: getattr(opts, k) for k in opts.__dataclass_fields__}).items()
                   if k not in ("progress", "model_name", "client")}}
    outdir = Path(out) if out is not None else None
    diagnoses: dict[int, Diagnosis] = {}
    resumed = []
    rows = []
    for step, path in found:
        where = outdir / "diagnoses" / f"step-{step}" if outdir is not None else None
        d = None
        if where is not None and (where / "summary.json").is_file() and (where / "settings.json").is_file():
            if json.loads((where / "settings.json").read_text()) == jsonable(settings):
                d = Diagnosis.load(where)
                resumed.append(step)
        if d is None:
            model, tok = load(path)
            d = diagnose(model, tokenizer if tokenizer is not None else tok, texts, options=opts)
            del model
            if where is not None:
                d.to_csv(where)
                from ..atomicio import write_text
                write_text(where / "settings.json", json.dumps(jsonable(settings), indent=1, sort_keys=True))
        if log is not None:
            log(f"step {step}: {path.name}" + (" (read back)" if step in resumed else ""))
        diagnoses[step] = d
        rows.append(track_rows(d, step, path.name))
    table = pd.concat(rows, ignore_index=True)
    summary = {"checkpoints": {int(s): str(p) for s, p in found}, "settings": settings, "resumed": resumed,
               "model": next(iter(diagnoses.values())).summary.get("model"),
               "scalars": {int(s): summary_scalars(d) for s, d in diagnoses.items()}}
    if outdir is not None:
        write_track(table, outdir, summary, report=report)
    summary["steps"] = [int(s) for s, _ in found]
    return Tracking(table=table, diagnoses=diagnoses, summary=summary)
