"""Diagnosis folders read back with every file checked: :func:`load_diagnosis` and :func:`read_diagnosis`.

The checks are those of :meth:`attnspec.Diagnosis.load` (:mod:`attnspec.diagnostics.result.saved`): any damaged or
foreign file of the folder (``heads.csv``, ``summary.json``, ``layers.csv``, ``pairs.csv``, ``roles.csv``,
``replicates.npz``) ends in one line naming the file (:class:`DiagnosisFileError`, a ``ValueError``). A
``replicates.npz`` that reads but belongs to other tables (an earlier run's, left beside new tables) is ignored, as
:meth:`attnspec.Diagnosis.load` does; :func:`read_diagnosis` also returns why, for the caller that needs the
replicates (:func:`attnspec.compare` says it).
"""
from __future__ import annotations

from pathlib import Path

from ..diagnostics.result.diagnosis import Diagnosis
from ..diagnostics.result.saved import DiagnosisFileError, read_folder

__all__ = ["DiagnosisFileError", "load_diagnosis", "read_diagnosis"]


def read_diagnosis(directory: str | Path, name: str = "diagnosis") -> tuple[Diagnosis, str]:
    """:func:`load_diagnosis`, and why the folder's replicates were not read (``''`` when they were, or when
    there is no ``replicates.npz``).

    Parameters
    ----------
    directory : str or pathlib.Path
    name : str
        What the folder is to the caller (``'a'``, ``'b'``), for a missing folder.

    Returns
    -------
    (Diagnosis, str)

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np, pandas as pd
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0], "head": [0], "score_scale": [1.0]}), layers=pd.DataFrame(),
    ...               summary={"model": "toy"}, replicates={"score_scale": np.ones((20, 1), np.float32)},
    ...               replicate_meta={"seed": 0, "n_boot": 20})
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = d.to_csv(tmp)
    >>> read_diagnosis(tmp)[0].replicates["score_scale"].shape, read_diagnosis(tmp)[1]
    ((20, 1), '')
    >>> _ = d.heads.assign(score_scale=2.0).to_csv(tmp / "heads.csv", index=False)    # other tables, same npz
    >>> read_diagnosis(tmp)[1]
    "...replicates.npz belongs to other tables than ...heads.csv (other rows or point values: an earlier run's file)"
    """
    fields, why = read_folder(directory, name)
    return Diagnosis(**fields), why


def load_diagnosis(directory: str | Path, name: str = "diagnosis") -> Diagnosis:
    """Read a diagnosis folder as :meth:`attnspec.Diagnosis.load` does, every file checked (module docstring).

    Parameters
    ----------
    directory : str or pathlib.Path
        A folder with ``heads.csv`` and ``summary.json``.
    name : str
        What the folder is to the caller, in the message of a missing folder.

    Returns
    -------
    Diagnosis

    Raises
    ------
    FileNotFoundError
        No such folder, or no ``heads.csv`` / ``summary.json`` in it.
    DiagnosisFileError
        A damaged or foreign file, named.

    Examples
    --------
    >>> import tempfile
    >>> import pandas as pd
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0, 0], "head": [0, 1]}), layers=pd.DataFrame({"layer": [0]}),
    ...               summary={"model": "toy", "n_heads": 2})
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = d.to_csv(tmp)
    >>> load_diagnosis(tmp).heads.values.tolist()
    [[0, 0], [0, 1]]
    >>> _ = (tmp / "heads.csv").write_text("layer,head\\n0,0\\n")          # cut after its first row
    >>> load_diagnosis(tmp)
    Traceback (most recent call last):
    attnspec.diagnostics.result.saved.DiagnosisFileError: .../heads.csv: has 1 rows, and summary.json counts 2 heads: ...
    """
    return read_diagnosis(directory, name)[0]
