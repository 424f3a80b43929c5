"""A saved diagnosis folder read back with every file checked: :func:`read_folder`, what
:meth:`attnspec.Diagnosis.load` and :func:`attnspec.comparing.load_diagnosis` read.

A folder written by ``attnspec diagnose --out`` or :meth:`attnspec.Diagnosis.to_csv` holds ``heads.csv``,
``summary.json``, and usually ``layers.csv``, ``pairs.csv``, ``roles.csv`` and ``replicates.npz``. Any of them can
be damaged (a copy cut short, a disk that filled, a file from another program under the same name); reading them
back ends in one line naming the file and what is wrong with it (:class:`DiagnosisFileError`, a ``ValueError``),
never a traceback of the parser nor a wrong blame (a truncated ``heads.csv`` is not reported as missing
replicates). A ``replicates.npz`` that reads but belongs to other tables (an earlier run's, left beside new tables)
is ignored, and the reason is returned for the caller that needs the replicates (:func:`attnspec.compare` says it).

This module knows the files, not the :class:`~.diagnosis.Diagnosis` object: it returns the object's fields.
"""
from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["DiagnosisFileError", "read_folder", "REPLICATES", "TABLES", "CHECKED_COLUMNS"]

#: The replicates file beside the tables (:meth:`Diagnosis.to_csv`, ``attnspec diagnose --out``).
REPLICATES = "replicates.npz"
#: The tables of a diagnosis, each written as ``<name>.csv`` (``roles`` only when it has rows).
TABLES = ("heads", "layers", "pairs", "roles")
#: Point columns stored with the replicates: they must equal the tables' for the file to be read back (a
#: ``replicates.npz`` left by an earlier run into the same folder is ignored).
CHECKED_COLUMNS = ("score_scale", "n_tokens")


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


def read_summary(file: Path) -> dict:
    """``summary.json`` as a dict: a non-empty UTF-8 JSON object."""
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


def read_table(file: Path, required: bool) -> pd.DataFrame:
    """A CSV table: UTF-8, ending in a newline (else cut short), parsed; empty allowed unless ``required``."""
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


def read_heads(file: Path, summary: dict) -> pd.DataFrame:
    """``heads.csv``: a table (:func:`read_table`) with integer ``layer`` and ``head`` columns and as many rows as
    ``summary`` counts heads (when it does)."""
    heads = read_table(file, required=True)
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


def read_arrays(file: Path) -> dict:
    """The arrays of ``replicates.npz`` (no pickles), or :class:`DiagnosisFileError`."""
    try:
        with np.load(file, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zlib.error, NotImplementedError) as e:
        size = file.stat().st_size
        raise DiagnosisFileError(file, f"is not a replicates file attnspec wrote ({size} bytes; {_why(e)}): truncated "
                                       "or damaged (delete it to use the tables without replicates)") from None


def replicates_belong(arrays: dict, heads: pd.DataFrame) -> bool:
    """Whether the arrays of a ``replicates.npz`` were written with ``heads`` (same rows, same point values of
    :data:`CHECKED_COLUMNS`)."""
    for col in CHECKED_COLUMNS:
        key = f"check/{col}"
        if key in arrays:
            if col not in heads or len(heads) != arrays[key].shape[0]:
                return False
            if not np.allclose(heads[col].to_numpy(dtype=float), arrays[key], rtol=1e-9, atol=0, equal_nan=True):
                return False
    return all(v.shape[-1] == len(heads) for k, v in arrays.items() if k.startswith("rep/"))


def _unpacked(file: Path, arrays: dict) -> dict:
    """``replicates``, ``replicate_meta`` and ``spectra`` from the arrays of ``file``."""
    try:
        spectra: dict = {}
        for k, v in arrays.items():
            if k.startswith("spectrum/"):
                _, layer, name = k.split("/", 2)
                spectra.setdefault(int(layer), {})[name] = v.astype(np.float64)
        return {"replicates": {k[4:]: v for k, v in arrays.items() if k.startswith("rep/")},
                "replicate_meta": {k[5:]: (v.item() if v.ndim == 0 else v) for k, v in arrays.items()
                                   if k.startswith("meta/")},
                "spectra": dict(sorted(spectra.items()))}
    except (ValueError, TypeError) as e:
        raise DiagnosisFileError(file, f"holds arrays attnspec does not write ({_why(e)})") from None


def read_folder(directory: str | Path, name: str = "diagnosis") -> tuple[dict, str]:
    """The fields of the :class:`~.diagnosis.Diagnosis` saved in ``directory``, every file checked, and why its
    ``replicates.npz`` was not read (``''`` when it was, or when there is none).

    Parameters
    ----------
    directory : str or pathlib.Path
        A folder with ``heads.csv`` and ``summary.json``.
    name : str
        What the folder is to the caller (``'a'``, ``'b'``), in the message of a missing folder.

    Returns
    -------
    (dict, str)
        ``heads``, ``layers``, ``pairs``, ``roles``, ``summary`` and, from a ``replicates.npz`` written with these
        tables, ``replicates``, ``replicate_meta`` and ``spectra``; the reason a ``replicates.npz`` of other tables
        (an earlier run's) was ignored.

    Raises
    ------
    FileNotFoundError
        No such folder, or no ``heads.csv`` / ``summary.json`` in it.
    DiagnosisFileError
        A damaged or foreign file, named (module docstring).

    Examples
    --------
    >>> import tempfile
    >>> tmp = Path(tempfile.mkdtemp())
    >>> _ = (tmp / "heads.csv").write_text("layer,head\\n0,0\\n0,1\\n")
    >>> _ = (tmp / "summary.json").write_text('{"model": "toy", "n_heads": 2}')
    >>> fields, why = read_folder(tmp)
    >>> fields["heads"].values.tolist(), fields["summary"], why
    ([[0, 0], [0, 1]], {'model': 'toy', 'n_heads': 2}, '')
    >>> _ = (tmp / "summary.json").write_text('{"model": "toy", ')                 # cut short
    >>> read_folder(tmp)
    Traceback (most recent call last):
    attnspec.diagnostics.result.saved.DiagnosisFileError: .../summary.json: is not valid JSON (...): truncated or ...
    """
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{name}: {d}: no such diagnosis output folder" if not d.exists() else
                                f"{name}: {d} is a file, not a diagnosis output folder")
    for file in ("heads.csv", "summary.json"):
        if not (d / file).is_file():
            raise FileNotFoundError(f"{d}: no {file} (not a diagnosis output folder)")
    summary = read_summary(d / "summary.json")
    fields: dict = {"heads": read_heads(d / "heads.csv", summary)}
    for t in TABLES:
        if t != "heads":
            f = d / f"{t}.csv"
            fields[t] = read_table(f, required=False) if f.is_file() else pd.DataFrame()
    fields["summary"] = summary
    why = ""
    npz = d / REPLICATES
    if npz.is_file():
        arrays = read_arrays(npz)
        if replicates_belong(arrays, fields["heads"]):
            fields.update(_unpacked(npz, arrays))
        else:
            why = (f"{npz} belongs to other tables than {d / 'heads.csv'} (other rows or point values: an earlier "
                   "run's file)")
    return fields, why
