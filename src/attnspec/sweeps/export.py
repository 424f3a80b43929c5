"""Exporting stored sweep results: a flat pandas DataFrame, Parquet, and per-point lookups.

:func:`to_frame` flattens each stored row into one record: identification columns (``key``,
``sweep``, ``seed``, ``draws``, ``code_version``, ``elapsed_s``, ``worker``), the configuration
(``cfg.<field>``, per-head widths as lists plus ``heads``, ``gamma``, ``psi`` (mean), ``phi``
(mean), ``omega``), the tags (``tag.<name>``) and the scalar results, dotted
(``softmax.m1`` .. ``softmax.m4``, ``surrogate.max``, ``law.right_edge``,
``dist.law~softmax.w1``, ...). Vectors (the stored quantiles, per-head ratios) stay out of the frame; they are in
the stored rows (:meth:`ResultStore.get`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from .spec import SweepPoint
from .store import ResultStore, StoredPoint

__all__ = ["row_record", "to_frame", "to_parquet", "points_frame"]


def _flatten(prefix: str, obj, out: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list):
        return  # vectors (quantiles, per-head ratios) are not frame columns
    else:
        out[prefix] = obj


def row_record(row: StoredPoint, tags: dict | None = None) -> dict:
    """One flat record for a stored row (``tags`` override the stored ones).

    Examples
    --------
    >>> import tempfile; from attnspec.config import MHSAConfig; from attnspec.sweeps import expand_grid, run_sweep
    >>> db, pts = tempfile.mkdtemp() + "/s.sqlite", expand_grid(MHSAConfig.uniform(16, 16), {"beta": [0.5, 1.0]})
    >>> _ = run_sweep(pts, db, n_workers=0, progress=False)
    >>> from attnspec.sweeps.store import ResultStore
    >>> with ResultStore(db) as store:
    ...     rec = row_record(store.get(pts[1].key))
    >>> rec["cfg.beta"], rec["heads"], round(rec["surrogate.m1"], 1)
    (1.0, 1, 1.6)
    """
    r = row.results
    rec = {"key": row.key, "sweep": row.sweep, "seed": row.seed, "draws": row.draws,
           "evaluations": ",".join(row.evaluations), "code_version": row.code_version,
           "elapsed_s": row.elapsed_s, "worker": row.worker, "finished_at": row.finished_at}
    for k, v in row.config.items():
        rec[f"cfg.{k}"] = tuple(v) if isinstance(v, list) else v
    c = r.get("config", {})
    rec.update({"heads": c.get("heads"), "gamma": c.get("gamma"), "psi": float(np.mean(c.get("psi", [np.nan]))),
                "phi": float(np.mean(c.get("phi", [np.nan]))), "omega": c.get("omega")})
    for k, v in (tags if tags is not None else row.tags).items():
        rec[f"tag.{k}"] = v
    for model in ("softmax", "surrogate", "law"):
        block = r.get(model)
        if not block:
            continue
        for j, m in enumerate(block.get("moments") or []):
            rec[f"{model}.m{j + 1}"] = np.nan if m is None else m
        for k in ("atom_at_zero", "max", "right_edge", "source", "n"):
            if k in block:
                rec[f"{model}.{k}"] = block[k]
    for pair, d in r.get("distances", {}).items():
        _flatten(f"dist.{pair}", d, rec)
    _flatten("timing", r.get("timing", {}), rec)
    return rec


def to_frame(db: str | Path, sweep: str | None = None) -> pd.DataFrame:
    """All rows of the store (or those first computed by ``sweep``) as a flat DataFrame.

    Examples
    --------
    >>> import tempfile; from attnspec.config import MHSAConfig; from attnspec.sweeps import expand_grid, run_sweep
    >>> db, pts = tempfile.mkdtemp() + "/s.sqlite", expand_grid(MHSAConfig.uniform(16, 16), {"beta": [0.5, 1.0]})
    >>> _ = run_sweep(pts, db, n_workers=0, progress=False)
    >>> to_frame(db)[["cfg.beta", "surrogate.n"]].sort_values("cfg.beta").values.tolist()
    [[0.5, 16.0], [1.0, 16.0]]
    """
    with ResultStore(db) as store:
        return pd.DataFrame([row_record(r) for r in store.rows(sweep)])


def points_frame(points: Sequence[SweepPoint], db: str | Path) -> pd.DataFrame:
    """Rows for exactly ``points``, in their order, with *their* tags (points not stored yet are absent).

    Examples
    --------
    >>> import tempfile; from attnspec.config import MHSAConfig; from attnspec.sweeps import expand_grid, run_sweep
    >>> db, pts = tempfile.mkdtemp() + "/s.sqlite", expand_grid(MHSAConfig.uniform(16, 16), {"beta": [0.5, 1.0]})
    >>> _ = run_sweep(pts, db, n_workers=0, progress=False)
    >>> points_frame(pts[::-1], db)["tag.beta"].tolist()  # in the order given, with the points' tags
    [1.0, 0.5]
    """
    recs = []
    with ResultStore(db) as store:
        for p in points:
            row = store.get(p.key)
            if row is not None:
                recs.append(row_record(row, tags=p.tags))
    return pd.DataFrame(recs)


def to_parquet(db: str | Path, path: str | Path, sweep: str | None = None) -> Path:
    """Write :func:`to_frame` to Parquet (tuple columns as strings).

    Examples
    --------
    >>> import tempfile; from attnspec.config import MHSAConfig; from attnspec.sweeps import expand_grid, run_sweep
    >>> db, pts = tempfile.mkdtemp() + "/s.sqlite", expand_grid(MHSAConfig.uniform(16, 16), {"beta": [0.5, 1.0]})
    >>> _ = run_sweep(pts, db, n_workers=0, progress=False)
    >>> to_parquet(db, db + ".parquet").suffix
    '.parquet'
    """
    df = to_frame(db, sweep)
    for col in df.columns:
        if df[col].map(lambda v: isinstance(v, tuple)).any():
            df[col] = df[col].map(lambda v: ",".join(map(str, v)) if isinstance(v, tuple) else v)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
    return path
