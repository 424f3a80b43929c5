"""The :class:`Diagnosis` result: DataFrames plus a JSON-able summary."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...jsonio import jsonable

__all__ = ["Diagnosis"]


@dataclass
class Diagnosis:
    """Result of :func:`attnspec.diagnose`.

    Attributes
    ----------
    heads : DataFrame
        One row per (layer, head); columns documented in :mod:`attnspec.diagnostics`.
    layers : DataFrame
        One row per layer.
    pairs : DataFrame
        One row per pair of heads of a layer (dependence).
    spectra : dict
        ``{layer: {'actual', 'gaussian_equivalent', 'free_sum'}}`` pooled layer spectra (arrays).
    summary : dict
        Model, data, settings, timings, Spearman correlations of the removal measures, notes.

    Examples
    --------
    Usually returned by :func:`attnspec.diagnose`; built by hand here, then written out:

    >>> import json, tempfile
    >>> import pandas as pd
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0, 0], "head": [0, 1], "beta_hat": [0.5, 2.0]}),
    ...               layers=pd.DataFrame({"layer": [0]}),
    ...               summary={"model": "toy", "n_selective": 1, "n_diffuse": 1, "n_texts": 3})
    >>> d
    Diagnosis(toy: 1 layers, 2 heads, 1 selective / 1 diffuse, 3 texts)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     [p.name for p in d.to_csv(tmp)]
    ['heads.csv', 'layers.csv', 'pairs.csv', 'summary.json']
    >>> json.loads(d.to_json())["heads"][1]
    {'layer': 0, 'head': 1, 'beta_hat': 2.0}
    """

    heads: pd.DataFrame
    layers: pd.DataFrame
    pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    spectra: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Diagnosis({s.get('model')}: {len(self.layers)} layers, {len(self.heads)} heads, "
                f"{s.get('n_selective')} selective / {s.get('n_diffuse')} diffuse, {s.get('n_texts')} texts)")

    def summary_json(self) -> str:
        """:attr:`summary` as an indented JSON document (numpy values converted)."""
        return json.dumps(jsonable(self.summary), indent=2)

    def _write_tables(self, directory: str | Path, suffix: str) -> list[Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        out = []
        for name in ("heads", "layers", "pairs"):
            p = d / f"{name}.{suffix}"
            getattr(getattr(self, name), f"to_{suffix}")(p, index=False)
            out.append(p)
        return out

    def to_csv(self, directory: str | Path) -> list[Path]:
        """Write ``heads.csv``, ``layers.csv``, ``pairs.csv`` and ``summary.json`` into ``directory``."""
        p = Path(directory) / "summary.json"
        out = self._write_tables(directory, "csv")
        p.write_text(self.summary_json())
        return out + [p]

    def to_parquet(self, directory: str | Path) -> list[Path]:
        """Write ``heads.parquet``, ``layers.parquet``, ``pairs.parquet`` (needs pyarrow)."""
        return self._write_tables(directory, "parquet")

    def to_json(self, path: str | Path | None = None) -> str:
        """Everything as one JSON document (records per table; spectra summarized by quantiles)."""
        q = np.linspace(0, 1, 21)
        doc = {"summary": self.summary,
               "heads": self.heads.to_dict(orient="records"), "layers": self.layers.to_dict(orient="records"),
               "pairs": self.pairs.to_dict(orient="records"),
               "spectra_quantiles": {str(k): {n: np.quantile(v, q) for n, v in d.items() if len(v)}
                                     for k, d in self.spectra.items()}}
        text = json.dumps(jsonable(doc), indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text
