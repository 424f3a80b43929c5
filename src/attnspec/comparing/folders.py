"""Diagnosis folders read back with every file checked: :func:`load_diagnosis`.

A folder written by ``attnspec diagnose --out`` or :meth:`attnspec.Diagnosis.to_csv` holds ``heads.csv``,
``summary.json``, and usually ``layers.csv``, ``pairs.csv``, ``roles.csv`` and ``replicates.npz``. Any of them can
be damaged (a copy cut short, a disk that filled, a file from another program under the same name); reading them
back must then end in one line naming the file and what is wrong with it (:class:`DiagnosisFileError`, a
``ValueError``), never a traceback of the parser nor a wrong blame (a truncated ``heads.csv`` used to be reported as
missing replicates). A ``replicates.npz`` that reads but belongs to other tables (an earlier run's, left beside new
tables) is ignored, as :meth:`attnspec.Diagnosis.load` does, and the reason is kept for the caller that needs the
replicates (:func:`attnspec.compare` says it).
"""
from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from ..diagnostics.result.diagnosis import REPLICATES, TABLES, Diagnosis, _belongs

__all__ = ["DiagnosisFileError", "load_diagnosis", "read_diagnosis"]


class DiagnosisFileError(ValueError):
    """A damaged or foreign file in a diagnosis folder; the message is one line naming the file.

    Examples
    --------
    >>> str(DiagnosisFileError("out/summary.json", "is not valid JSON"))
    'out/summary.json: is not valid JSON; rerun attnspec diagnose --out out to write the folder again'
    """

    def __init__(self, file, problem: str):
        self.file = Path(file)
        super().__init__(f"{file}: {problem}; rerun attnspec diagnose --out {self.file.parent} to write the folder "
                         "again")


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _summary(file: Path) -> dict:
    data = file.read_bytes()
    if not data.strip():
        raise DiagnosisFileError(file, "is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DiagnosisFileError(file, f"is not UTF-8 JSON (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise DiagnosisFileError(file, f"is not valid JSON ({_why(e)}): truncated or damaged") from None
    if not isinstance(doc, dict):
        raise DiagnosisFileError(file, f"holds a JSON {type(doc).__name__}, not the object attnspec writes")
    return doc


def _table(file: Path, required: bool) -> pd.DataFrame:
    data = file.read_bytes()
    if not data.strip():
        if required:
            raise DiagnosisFileError(file, "is empty")
        return pd.DataFrame()
    if not data.endswith(b"\n"):
        raise DiagnosisFileError(file, "is truncated (its last line ends without a newline)")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DiagnosisFileError(file, f"is not a UTF-8 CSV table (byte 0x{data[e.start]:02x} at offset "
                                       f"{e.start})") from None
    try:
        return pd.read_csv(file)
    except pd.errors.EmptyDataError:
        if required:
            raise DiagnosisFileError(file, "holds no table") from None
        return pd.DataFrame()
    except (pd.errors.ParserError, ValueError) as e:
        raise DiagnosisFileError(file, f"is not a CSV table attnspec wrote ({_why(e)})") from None


def _heads(file: Path, summary: dict) -> pd.DataFrame:
    heads = _table(file, required=True)
    missing = [c for c in ("layer", "head") if c not in heads]
    if missing:
        raise DiagnosisFileError(file, f"has no {' and '.join(repr(c) for c in missing)} column: not a heads table "
                                       "attnspec wrote")
    if not len(heads):
        raise DiagnosisFileError(file, "has no row")
    key = heads[["layer", "head"]]
    if key.isna().any().any() or not all(pd.api.types.is_integer_dtype(key[c]) for c in key):
        raise DiagnosisFileError(file, "has rows without integer 'layer' and 'head': damaged")
    n = summary.get("n_heads")
    if isinstance(n, int) and not isinstance(n, bool) and n != len(heads):
        raise DiagnosisFileError(file, f"has {len(heads)} rows, and summary.json counts {n} heads: truncated, or the "
                                       "two files come from different runs")
    return heads


def _arrays(file: Path) -> dict:
    try:
        with np.load(file, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zlib.error, NotImplementedError) as e:
        size = file.stat().st_size
        raise DiagnosisFileError(file, f"is not a replicates file attnspec wrote ({size} bytes; {_why(e)}): truncated "
                                       "or damaged (delete it to use the tables without replicates)") from None


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
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{name}: {d}: no such diagnosis output folder" if not d.exists() else
                                f"{name}: {d} is a file, not a diagnosis output folder")
    for file in ("heads.csv", "summary.json"):
        if not (d / file).is_file():
            raise FileNotFoundError(f"{d}: no {file} (not a diagnosis output folder)")
    summary = _summary(d / "summary.json")
    heads = _heads(d / "heads.csv", summary)
    tables = {"heads": heads}
    for t in TABLES:
        if t != "heads":
            f = d / f"{t}.csv"
            tables[t] = _table(f, required=False) if f.is_file() else pd.DataFrame()
    out = Diagnosis(**tables, summary=summary)
    why = ""
    npz = d / REPLICATES
    if npz.is_file():
        arrays = _arrays(npz)
        if _belongs(arrays, heads):
            try:
                out.replicates = {k[4:]: v for k, v in arrays.items() if k.startswith("rep/")}
                out.replicate_meta = {k[5:]: (v.item() if v.ndim == 0 else v) for k, v in arrays.items()
                                      if k.startswith("meta/")}
                spectra: dict = {}
                for k, v in arrays.items():
                    if k.startswith("spectrum/"):
                        _, layer, sname = k.split("/", 2)
                        spectra.setdefault(int(layer), {})[sname] = v.astype(np.float64)
                out.spectra = dict(sorted(spectra.items()))
            except (ValueError, TypeError) as e:
                raise DiagnosisFileError(npz, f"holds arrays attnspec does not write ({_why(e)})") from None
        else:
            why = (f"{npz} belongs to other tables than {d / 'heads.csv'} (other rows or point values: an earlier "
                   "run's file)")
    return out, why


def load_diagnosis(directory: str | Path, name: str = "diagnosis") -> Diagnosis:
    """Read a diagnosis folder like :meth:`attnspec.Diagnosis.load`, every file checked (module docstring).

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
    >>> d = Diagnosis(heads=pd.DataFrame({"layer": [0, 0], "head": [0, 1]}), layers=pd.DataFrame({"layer": [0]}),
    ...               summary={"model": "toy", "n_heads": 2})
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = d.to_csv(tmp)
    >>> load_diagnosis(tmp).heads.values.tolist()
    [[0, 0], [0, 1]]
    >>> _ = (tmp / "heads.csv").write_text("layer,head\\n0,0\\n")          # cut after its first row
    >>> load_diagnosis(tmp)
    Traceback (most recent call last):
    attnspec.comparing.folders.DiagnosisFileError: .../heads.csv: has 1 rows, and summary.json counts 2 heads: ...
    """
    return read_diagnosis(directory, name)[0]
