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
import os
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

_STEP = re.compile(r"(?:checkpoint-|step[-_]?)(\d+)$")


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


def _state_step(state: Path) -> int | None:
    """The ``global_step`` of a ``trainer_state.json``, or a one-line ``ValueError`` naming the file."""
    try:
        doc = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0]
        raise ValueError(f"{state}: is not a readable trainer_state.json ({why}); repair or remove it (the step is "
                         "then the checkpoint's position)") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{state}: holds a JSON {type(doc).__name__}, not the object a Trainer writes")
    if "global_step" not in doc:
        return None
    step = doc["global_step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{state}: global_step must be an integer >= 0, got {step!r}")
    return step


def _as_paths(paths) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, (list, tuple)):
        raise TypeError(f"checkpoints must be a path or a list of paths, got {type(paths).__name__}")
    bad = [x for x in paths if not isinstance(x, (str, os.PathLike))]
    if bad:
        raise TypeError(f"checkpoints must be paths (str or pathlib.Path), got {type(bad[0]).__name__}")
    if not paths:
        raise ValueError("checkpoints is empty: give checkpoint folders, or a training output folder")
    return [Path(x) for x in paths]


def find_checkpoints(paths, notes: list | None = None) -> list[tuple[int, Path]]:
    """The checkpoints to track, with their steps, in order of step.

    A path named ``checkpoint-N`` (or ``step-N``, ``stepN``, ``step_N``) is step ``N``; a folder that holds
    ``checkpoint-N`` folders (a ``transformers`` Trainer's output folder) stands for all of them; any other path
    gets the ``global_step`` of a ``trainer_state.json`` beside its weights, else its position in the list (said in
    ``notes``). Checkpoints given in another order than their steps' are tracked in step order (said in
    ``notes``).

    Parameters
    ----------
    paths : str or pathlib.Path or list of them
    notes : list, optional
        Receives a line for each such choice.

    Returns
    -------
    list of (int, pathlib.Path)

    Raises
    ------
    ValueError
        A path that does not exist, a damaged ``trainer_state.json`` (named), or two checkpoints with one step.
    TypeError
        Something else than paths.

    Examples
    --------
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for n in (500, 100, 1000):
    ...     (root / f"checkpoint-{n}").mkdir()
    >>> [(s, p.name) for s, p in find_checkpoints(root)]
    [(100, 'checkpoint-100'), (500, 'checkpoint-500'), (1000, 'checkpoint-1000')]
    >>> notes = []
    >>> [(s, p.name) for s, p in find_checkpoints([root / "checkpoint-500", root / "checkpoint-100"], notes)]
    [(100, 'checkpoint-100'), (500, 'checkpoint-500')]
    >>> notes
    ['checkpoints given out of step order (500, 100): tracked in step order']
    """
    notes = notes if notes is not None else []
    found: list[tuple[int, Path]] = []
    positional = []
    for i, p in enumerate(_as_paths(paths)):
        if not p.exists():
            raise ValueError(f"{p}: no such checkpoint (a folder of weights, or a folder of checkpoint-N folders)")
        m = _STEP.search(p.name)
        if m:
            found.append((int(m.group(1)), p))
            continue
        subs = [q for q in p.iterdir() if q.is_dir() and _STEP.search(q.name)] if p.is_dir() else []
        if subs:
            found.extend(sorted(((int(_STEP.search(q.name).group(1)), q) for q in subs), key=lambda t: t[0]))
            continue
        state = p / "trainer_state.json" if p.is_dir() else None
        step = _state_step(state) if state is not None and state.is_file() else None
        if step is None:
            step = i
            positional.append(p.name)
        found.append((step, p))
    if positional:
        notes.append(f"no step in the name or a trainer_state.json of {', '.join(positional)}: each one's step is its "
                     "position in the list of checkpoints")
    given = [s for s, _ in found]
    found.sort(key=lambda t: t[0])
    steps = [s for s, _ in found]
    if given != steps:
        notes.append(f"checkpoints given out of step order ({', '.join(map(str, given))}): tracked in step order")
    if len(set(steps)) != len(steps):
        dup = sorted({s for s in steps if steps.count(s) > 1})
        where = [str(q) for s, q in found if s == dup[0]]
        raise ValueError(f"two checkpoints have step {dup[0]} ({', '.join(where)}): give each checkpoint once")
    return found


def _texts_key(texts) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(str(t).encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def weights_key(model) -> str:
    """A digest of a model's weights: every tensor of its ``state_dict`` (name, dtype, shape and bytes), so that two
    checkpoints have the same key exactly when their weights are bit-identical.

    Examples
    --------
    >>> import torch
    >>> a = torch.nn.Linear(3, 2)
    >>> b = torch.nn.Linear(3, 2)
    >>> _ = b.load_state_dict(a.state_dict())
    >>> weights_key(a) == weights_key(b)
    True
    >>> with torch.no_grad():
    ...     b.weight[0, 0] += 1e-7
    >>> weights_key(a) == weights_key(b)
    False
    """
    import torch
    module = getattr(model, "model", model) if not isinstance(model, torch.nn.Module) else model
    h = hashlib.blake2b(digest_size=16)
    for name, t in sorted(module.state_dict().items()):
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        if t.device.type == "meta":
            continue
        flat = t.reshape(-1).contiguous().cpu()
        h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return h.hexdigest()


def _tokens_key(tokenizer, texts: list[str], max_length: int) -> str:
    """A digest of the texts' token ids as the tokenizer gives them (truncated at ``max_length``)."""
    h = hashlib.sha256()
    try:
        ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
    except Exception:  # noqa: BLE001 - not a callable tokenizer: the diagnosis says what is wrong with it
        return "unknown"
    for row in ids:
        h.update(np.asarray(row, np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


def _architecture(d: Diagnosis) -> str:
    s = d.summary
    return f"{s.get('family') or s.get('model')}, {s.get('n_layers')} layers, {s.get('n_heads')} heads"


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

    def _repr_html_(self) -> str:
        """The notebook display (:func:`attnspec.report.notebook.tracking_html`); the figure:
        :func:`attnspec.figures.trajectories_figure` of :attr:`table`."""
        from ..report.notebook import tracking_html
        return tracking_html(self)


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
        ``summary.json``; apart from the checkpoints, and held (a lock) while the run writes it: a second run into
        the same folder at the same time is refused. A checkpoint already diagnosed there from the same weights
        (bit for bit), the same token ids and the same options is read back (``settings.json`` keys each step).
    tokenizer : optional
        One tokenizer for every checkpoint (then the checkpoints need none of their own; it is checked against each
        model's vocabulary); default: each checkpoint's own.
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
        ``summary['notes']``: steps that are positions in the list, checkpoints given out of step order,
        checkpoints with bit-identical weights, of different architectures, or whose tokenizers differ.

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type or value (named), before any checkpoint is loaded.

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
    from ..diagnostics import DiagnoseOptions
    from ..diagnostics.checks import check_texts
    given = _as_paths(checkpoints)
    opts = DiagnoseOptions.of(options, **kwargs)
    if texts is not None:
        texts = check_texts(texts)
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a folder path (str or pathlib.Path) or None, got {type(out).__name__}")
    if not isinstance(report, bool):
        raise TypeError(f"report must be True or False, got {report!r}")
    for name, f in (("load", load), ("log", log)):
        if f is not None and not callable(f):
            raise TypeError(f"{name} must be a callable or None, got {type(f).__name__}")
    notes: list[str] = []
    found = find_checkpoints(given, notes)
    outdir = Path(out) if out is not None else None
    if outdir is None:
        return _track(found, texts, None, tokenizer, load, opts, report, log, notes)
    _check_apart(outdir, [(None, p) for p in given] + found)
    from ..atomicio import DirectoryLock
    with DirectoryLock(outdir):       # a second run into the same folder is refused (DirectoryBusy), never mixed
        return _track(found, texts, outdir, tokenizer, load, opts, report, log, notes)


def _check_apart(outdir: Path, found: list) -> None:
    """``out`` is not, nor lies inside, a checkpoint, and no checkpoint lies where the diagnoses are written."""
    o = Path(os.path.realpath(outdir))
    for _, p in found:
        c = Path(os.path.realpath(p))
        if o == c or c in o.parents:
            raise ValueError(f"out {outdir} {'is' if o == c else 'lies inside'} the checkpoint {p}: an output folder "
                             "must be apart from the checkpoints; choose another folder")
        if c == o / "diagnoses" or (o / "diagnoses") in c.parents:
            raise ValueError(f"out {outdir}: its diagnoses/ folder holds the checkpoint {p}; choose another folder")


def _settings(opts, texts: list[str]) -> dict:
    """What a resumed result must have been computed with, besides the weights and the tokens."""
    fields = jsonable({k: getattr(opts, k) for k in opts.__dataclass_fields__})
    return {"texts": _texts_key(texts), "n_texts_given": len(texts),
            **{k: v for k, v in fields.items() if k not in ("progress", "model_name", "client")}}


def _read_back(where: Path, key: dict):
    """The diagnosis saved in ``where`` when it was computed from ``key`` (weights, tokens, texts, options), else
    None (a missing, damaged or other run's folder is diagnosed again)."""
    from .folders import load_diagnosis
    try:
        saved = json.loads((where / "settings.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if saved != jsonable(key):
        return None
    try:
        return load_diagnosis(where)
    except (OSError, ValueError):
        return None


def _save(d: Diagnosis, where: Path, key: dict) -> None:
    """The diagnosis and its key (``settings.json``) committed together (:class:`attnspec.atomicio.StagedFiles`):
    a folder never holds one run's tables with another's key."""
    from ..atomicio import StagedFiles
    from ..diagnostics.result.diagnosis import REPLICATES
    with StagedFiles(where, last="summary.json", stale=(REPLICATES, "roles.csv", "settings.json")) as st:
        d.write_tables(st, "csv")
        st.path("settings.json").write_text(json.dumps(jsonable(key), indent=1, sort_keys=True), encoding="utf-8")
        st.path("summary.json").write_text(d.summary_json(), encoding="utf-8")


def _load_one(path: Path, tokenizer, load):
    """``(model, tokenizer)`` of a checkpoint: the given tokenizer when there is one (the checkpoint then needs
    none, and the given one is checked against the model's vocabulary), else the checkpoint's own."""
    if load is not None:
        model, tok = load(path)
    else:
        from ..models import load_model
        model, tok = load_model(path, tokenizer=tokenizer is None)
    if tokenizer is not None:
        from ..models.loading import check_tokenizer
        check_tokenizer(tokenizer, model, path)
        tok = tokenizer
    return model, tok


def _track(found, texts, outdir, tokenizer, load, opts, report, log, notes) -> Tracking:
    from ..data import builtin_texts
    from ..diagnostics import diagnose
    if texts is None:
        texts = builtin_texts(opts.n_texts) if getattr(opts, "n_texts", None) else builtin_texts()
    texts = list(texts)
    settings = _settings(opts, texts)
    diagnoses: dict[int, Diagnosis] = {}
    weights: dict[int, str] = {}
    tokens: dict[int, str] = {}
    resumed = []
    rows = []
    for step, path in found:
        model, tok = _load_one(path, tokenizer, load)
        weights[step] = weights_key(model)
        tokens[step] = _tokens_key(tok, texts, opts.max_length)
        key = {**settings, "weights": weights[step], "tokens": tokens[step]}
        where = outdir / "diagnoses" / f"step-{step}" if outdir is not None else None
        d = _read_back(where, key) if where is not None else None
        if d is not None:
            resumed.append(step)
        else:
            d = diagnose(model, tok, texts, options=opts)
            if where is not None:
                _save(d, where, key)
        del model
        if log is not None:
            log(f"step {step}: {path.name}" + (" (read back)" if step in resumed else ""))
        diagnoses[step] = d
        rows.append(track_rows(d, step, path.name))
    notes += _run_notes(found, diagnoses, weights, tokens, tokenizer is not None)
    table = pd.concat(rows, ignore_index=True)
    summary = {"checkpoints": {int(s): str(p) for s, p in found}, "settings": settings, "resumed": resumed,
               "model": next(iter(diagnoses.values())).summary.get("model"),
               "weights": {int(s): w for s, w in weights.items()}, "notes": notes,
               "scalars": {int(s): summary_scalars(d) for s, d in diagnoses.items()}}
    if outdir is not None:
        write_track(table, outdir, summary, report=report)
    summary["steps"] = [int(s) for s, _ in found]
    return Tracking(table=table, diagnoses=diagnoses, summary=summary)


def _run_notes(found, diagnoses: dict, weights: dict, tokens: dict, one_tokenizer: bool) -> list[str]:
    """Notes on the run as a whole: checkpoints with bit-identical weights, checkpoints of different architectures,
    tokenizers that tokenize the texts differently."""
    notes = []
    name = {s: p.name for s, p in found}
    groups: dict[str, list[int]] = {}
    for s, w in weights.items():
        groups.setdefault(w, []).append(s)
    for steps in groups.values():
        if len(steps) > 1:
            notes.append(f"steps {', '.join(map(str, steps))} ({', '.join(name[s] for s in steps)}) have bit-identical "
                         "weights: their rows are one model's")
    arch = {s: _architecture(d) for s, d in diagnoses.items()}
    if len(set(arch.values())) > 1:
        notes.append("the checkpoints hold different architectures (" + "; ".join(f"step {s}: {a}" for s, a in arch.items())
                     + "): their rows are not one model's trajectory")
    if not one_tokenizer and len({t for t in tokens.values() if t != "unknown"}) > 1:
        notes.append("the checkpoints' own tokenizers tokenize the texts differently (steps "
                     + ", ".join(f"{s}: {t[:8]}" for s, t in tokens.items()) + "): pass one tokenizer= to track them "
                     "on the same tokens")
    return notes
