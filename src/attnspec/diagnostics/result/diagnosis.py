"""The :class:`Diagnosis` result: DataFrames plus a JSON-able summary."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...atomicio import StagedFiles, write_text
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

    def write_tables(self, stage: StagedFiles, suffix: str) -> None:
        """Write ``heads``, ``layers`` and ``pairs`` as ``<name>.<suffix>`` (csv or parquet) into the temporary
        files of ``stage`` (:class:`attnspec.atomicio.StagedFiles`), renamed into place when it is committed."""
        for name in ("heads", "layers", "pairs"):
            getattr(getattr(self, name), f"to_{suffix}")(stage.path(f"{name}.{suffix}"), index=False)

    def to_csv(self, directory: str | Path) -> list[Path]:
        """Write ``heads.csv``, ``layers.csv``, ``pairs.csv`` and ``summary.json`` into ``directory``.

        Each file is written to a temporary name in ``directory`` and renamed into place once all are written,
        ``summary.json`` last (:class:`attnspec.atomicio.StagedFiles`): a failure leaves the directory as it was."""
        with StagedFiles(directory, last="summary.json") as st:
            self.write_tables(st, "csv")
            st.path("summary.json").write_text(self.summary_json())
            names = list(st.items)
        return [Path(directory) / n for n in names]

    def to_parquet(self, directory: str | Path) -> list[Path]:
        """Write ``heads.parquet``, ``layers.parquet``, ``pairs.parquet`` (needs pyarrow), each through a
        temporary file renamed into place."""
        with StagedFiles(directory) as st:
            self.write_tables(st, "parquet")
            names = list(st.items)
        return [Path(directory) / n for n in names]

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
            write_text(path, text)
        return text
