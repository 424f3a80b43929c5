"""The :class:`Diagnosis` result: DataFrames plus a JSON-able summary."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...atomicio import StagedFiles, write_text
from ...jsonio import jsonable
from .saved import CHECKED_COLUMNS, REPLICATES, TABLES, read_folder

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
    replicates : dict
        ``{column: (n_boot, n_heads) float32}``: the bootstrap replicates of the per-head diagnostics
        (:data:`.intervals.REPLICATE_COLUMNS`), columns in the row order of ``heads``; empty without intervals
        (fewer than 8 texts or 10 replicates). A paired comparison of two diagnoses (:mod:`attnspec.compare`)
        differences them. Written beside the tables as ``replicates.npz`` (with the layer spectra) and read back
        by :meth:`load`.
    replicate_meta : dict
        What keys the replicates' Poisson weights: ``seed``, ``n_boot``, ``text_ids``, and the corpus's
        ``n_texts``, ``n_tokens``, ``max_tokens``.

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

    With bootstrap replicates, ``replicates.npz`` is written too, and :meth:`load` reads everything back:

    >>> import numpy as np
    >>> d.replicates = {"beta_hat": np.ones((20, 2), np.float32)}
    >>> d.replicate_meta = {"seed": 0, "n_boot": 20, "text_ids": np.arange(8)}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     names = [p.name for p in d.to_csv(tmp)]
    ...     back = Diagnosis.load(tmp)
    >>> names[-2:], back.replicates["beta_hat"].shape, back.replicate_meta["seed"]
    (['replicates.npz', 'summary.json'], (20, 2), 0)
    """

    heads: pd.DataFrame
    layers: pd.DataFrame
    pairs: pd.DataFrame = field(default_factory=pd.DataFrame)
    roles: pd.DataFrame = field(default_factory=pd.DataFrame)
    spectra: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    replicates: dict = field(default_factory=dict, repr=False)
    replicate_meta: dict = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Diagnosis({s.get('model')}: {len(self.layers)} layers, {len(self.heads)} heads, "
                f"{s.get('n_selective')} selective / {s.get('n_diffuse')} diffuse, {s.get('n_texts')} texts)")

    def _repr_html_(self) -> str:
        """The notebook display: summary line, verdict counts, top heads with intervals, the selection map
        (:func:`.display.diagnosis_html`); figures: :func:`attnspec.figures.plot_diagnosis`."""
        from .display import diagnosis_html
        return diagnosis_html(self)

    def summary_json(self) -> str:
        """:attr:`summary` as an indented JSON document (numpy values converted)."""
        return json.dumps(jsonable(self.summary), indent=2)

    def write_tables(self, stage: StagedFiles, suffix: str) -> None:
        """Write ``heads``, ``layers``, ``pairs`` and (when there are any) ``roles`` as ``<name>.<suffix>`` (csv or
        parquet) into the temporary files of ``stage`` (:class:`attnspec.atomicio.StagedFiles`), renamed into place
        when it is committed."""
        for name in TABLES:
            if name != "roles" or len(self.roles):
                getattr(getattr(self, name), f"to_{suffix}")(stage.path(f"{name}.{suffix}"), index=False)
        if suffix == "csv" and self.replicates:
            with open(stage.path(REPLICATES), "wb") as fh:
                np.savez_compressed(fh, **self._npz())

    def _npz(self) -> dict[str, np.ndarray]:
        """The arrays of ``replicates.npz``: ``rep/<column>``, ``meta/<key>``, ``check/<column>`` (the tables'
        point values the replicates belong to) and ``spectrum/<layer>/<name>`` (pooled layer spectra)."""
        arrays = {f"rep/{k}": np.asarray(v, dtype=np.float32) for k, v in self.replicates.items()}
        arrays.update({f"meta/{k}": np.asarray(v) for k, v in self.replicate_meta.items()})
        for col in CHECKED_COLUMNS:
            if col in self.heads:
                arrays[f"check/{col}"] = self.heads[col].to_numpy(dtype=float)
        for layer, spectra in self.spectra.items():
            for name, x in spectra.items():
                arrays[f"spectrum/{layer}/{name}"] = np.asarray(x, dtype=np.float32)
        return arrays

    @classmethod
    def load(cls, directory: str | Path) -> "Diagnosis":
        """Read a diagnosis written by :meth:`to_csv` or ``attnspec diagnose --out``: the tables, the summary, and
        from ``replicates.npz`` (when present and written with these tables) the replicates and layer spectra; every
        file checked (:func:`.saved.read_folder`).

        Parameters
        ----------
        directory : str or pathlib.Path
            A folder with ``heads.csv`` and ``summary.json``.

        Returns
        -------
        Diagnosis

        Raises
        ------
        FileNotFoundError
            No such folder, or no ``heads.csv`` / ``summary.json`` in it.
        DiagnosisFileError
            (a ``ValueError``) A damaged or foreign file: one line naming it (an empty or truncated
            ``replicates.npz``, a ``summary.json`` that is not a JSON object, a ``heads.csv`` cut short or of
            another program, a damaged ``layers.csv``/``pairs.csv``/``roles.csv``; :mod:`.saved`). A
            ``replicates.npz`` of other tables (an earlier run's) is ignored: no replicates.

        Examples
        --------
        >>> import tempfile
        >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0], "head": [0], "selection": ["diffuse"]}),
        ...               layers=pd.DataFrame({"layer": [0]}), summary={"model": "toy"})
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = d.to_csv(tmp)
        ...     back = Diagnosis.load(tmp)
        >>> back.heads.to_dict("records"), back.summary, back.replicates
        ([{'layer': 0, 'head': 0, 'selection': 'diffuse'}], {'model': 'toy'}, {})
        """
        return cls(**read_folder(directory)[0])

    def to_csv(self, directory: str | Path) -> list[Path]:
        """Write ``heads.csv``, ``layers.csv``, ``pairs.csv``, ``replicates.npz`` (with bootstrap replicates) and
        ``summary.json`` into ``directory``; a ``replicates.npz`` of an earlier run is removed when this diagnosis
        has none.

        Each file is written to a temporary name in ``directory`` and renamed into place once all are written,
        ``summary.json`` last (:class:`attnspec.atomicio.StagedFiles`): a failure leaves the directory as it was."""
        with StagedFiles(directory, last="summary.json", stale=(REPLICATES, "roles.csv")) as st:
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
