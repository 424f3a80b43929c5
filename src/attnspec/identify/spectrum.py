"""Observed spectra: reading them from files, and validating them before identification.

An input to :func:`attnspec.identify.identify` must be possible eigenvalues of a Gram matrix
``Y Y^T``: finite, non-negative up to round-off (``min >= -tol * max|x|``), not all zero, and enough
of them to fit a law (``MIN_EIGENVALUES``). :func:`read_spectrum` reads ``.npy``, text
(``.csv/.txt/.tsv/.dat``) and JSON files (a list, or an object with ``'<model>_eigenvalues'``,
``'eigenvalues'`` or ``'eigs'`` and optionally the ``'config'`` that produced them, as written by
``attnspec simulate --json``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["SpectrumError", "SpectrumFileError", "check_spectrum", "read_spectrum", "MIN_EIGENVALUES",
           "NEGATIVE_TOLERANCE", "TEXT_SUFFIXES"]

#: Fewest eigenvalues a fit accepts.
MIN_EIGENVALUES = 10
#: Eigenvalues down to ``-NEGATIVE_TOLERANCE * max|x|`` count as round-off of zero.
NEGATIVE_TOLERANCE = 1e-6


#: Suffixes read as text: numbers separated by commas, semicolons or whitespace, one header line allowed.
TEXT_SUFFIXES = (".csv", ".txt", ".tsv", ".dat")


class SpectrumError(ValueError):
    """The eigenvalues cannot be the spectrum of a Gram matrix (or are too few to fit).

    Examples
    --------
    >>> issubclass(SpectrumError, ValueError)
    True
    """


class SpectrumFileError(SpectrumError):
    """A spectrum file that cannot be read: ``path`` and ``reason`` (the message without the path).

    Examples
    --------
    >>> e = SpectrumFileError("eigs.bin", "unknown format")
    >>> str(e), e.reason
    ('eigs.bin: unknown format', 'unknown format')
    """

    def __init__(self, path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


def check_spectrum(eigs, min_size: int = MIN_EIGENVALUES, tol: float = NEGATIVE_TOLERANCE) -> np.ndarray:
    """``eigs`` as a flat float array, or :class:`SpectrumError` saying why it is not a Gram spectrum.

    Examples
    --------
    >>> check_spectrum(np.arange(1.0, 11.0)).shape
    (10,)
    >>> check_spectrum([1.0, -5.0] + [2.0] * 9)
    Traceback (most recent call last):
    ...
    attnspec.identify.spectrum.SpectrumError: 1 of 11 eigenvalues are negative (min -5, max 2); ...
    """
    try:
        x = np.asarray(eigs, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise SpectrumError(f"eigenvalues must be numbers ({e})") from None
    if x.size == 0:
        raise SpectrumError("no eigenvalues (empty spectrum)")
    bad = ~np.isfinite(x)
    if bad.any():
        kinds = sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in x[bad]})
        raise SpectrumError(f"{int(bad.sum())} of {x.size} eigenvalues are not finite ({', '.join(kinds)}); "
                            "eigenvalues must be finite numbers")
    if x.size < min_size:
        raise SpectrumError(f"{x.size} eigenvalues: need at least {min_size} to fit a law")
    scale = float(np.abs(x).max())
    if scale == 0.0:
        raise SpectrumError(f"all {x.size} eigenvalues are zero: no spectrum to fit")
    lo = float(x.min())
    if lo < -tol * scale:
        n_neg = int((x < -tol * scale).sum())
        raise SpectrumError(f"{n_neg} of {x.size} eigenvalues are negative (min {lo:.4g}, max {float(x.max()):.4g}); "
                            f"eigenvalues of a Gram matrix Y Y^T are >= 0 (round-off down to -{tol:g} x max|x| allowed)")
    return x


def _numbers(path: Path, values, where: str) -> np.ndarray:
    """``values`` as a 1-D float array: a flat list of real numbers (a vector of shape ``(n,)``, ``(n, 1)`` or
    ``(1, n)``); booleans, complex numbers and matrices are refused with the reason."""
    if isinstance(values, list) and any(isinstance(v, bool) for v in values):
        raise SpectrumFileError(path, f"{where} holds true/false: eigenvalues must be numbers")
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError):
        raise SpectrumFileError(path, f"{where} must be a flat list of numbers") from None
    if arr.dtype == bool:
        raise SpectrumFileError(path, f"{where} holds true/false: eigenvalues must be numbers")
    if np.iscomplexobj(arr):
        raise SpectrumFileError(path, f"{where} holds complex numbers: the eigenvalues of a symmetric matrix are "
                                      "real; give the real spectrum (e.g. numpy.linalg.eigvalsh)")
    if sum(d > 1 for d in arr.shape) > 1:
        raise SpectrumFileError(path, f"{where} is a {' x '.join(map(str, arr.shape))} array, not a list of "
                                      "eigenvalues (a matrix is not its spectrum: take numpy.linalg.eigvalsh "
                                      "of it first)")
    try:
        out = arr.astype(float).ravel()
    except (TypeError, ValueError, OverflowError):
        raise SpectrumFileError(path, f"{where} must be a flat list of numbers that fit a float") from None
    return out


def _from_json(path: Path, text: str, model: str) -> tuple[np.ndarray, dict | None]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:        # RecursionError: nested deeper than Python's parser goes
        raise SpectrumFileError(path, f"is not valid JSON ({type(e).__name__}: {e})") from None
    if isinstance(data, list):
        return _numbers(path, data, "its list"), None
    if not isinstance(data, dict):
        raise SpectrumFileError(path, "JSON must be a list of eigenvalues or an object holding one")
    for key in (f"{model}_eigenvalues", "eigenvalues", "eigs"):
        if key in data:
            cfg = data.get("config")
            if cfg is not None and not isinstance(cfg, dict):
                raise SpectrumFileError(path, "its 'config' must be an object (an MHSA configuration)")
            vals = data[key]
            return _numbers(path, [np.nan if v is None else v for v in vals] if isinstance(vals, list) else vals,
                            f"'{key}'"), cfg
    raise SpectrumFileError(path, f"has no '{model}_eigenvalues', 'eigenvalues' or 'eigs' array")


def _from_text(path: Path, text: str) -> np.ndarray:
    vals = []
    for i, line in enumerate(text.splitlines()):
        for tok in line.replace(",", " ").replace(";", " ").split():
            try:
                vals.append(float(tok))
            except ValueError:
                if i == 0 and not vals:
                    break  # a header line
                raise SpectrumFileError(path, f"line {i + 1}: {tok!r} is not a number") from None
    return np.asarray(vals, dtype=float)


def read_spectrum(path: str | Path, model: str = "softmax") -> tuple[np.ndarray, dict | None]:
    """Eigenvalues from a file (1-D, not yet validated: see :func:`check_spectrum`) and, for JSON input,
    the configuration dictionary it carries (else ``None``).

    ``model`` picks ``'<model>_eigenvalues'`` in a JSON object before ``'eigenvalues'`` and ``'eigs'``.
    Raises :class:`SpectrumFileError` for a missing, unreadable or malformed file or an unknown suffix.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "eigs.csv"
    >>> _ = f.write_text("eigenvalue\\n0.5, 1.5\\n2.5")
    >>> read_spectrum(f)
    (array([0.5, 1.5, 2.5]), None)
    """
    path = Path(path)
    if not path.is_file():
        raise SpectrumFileError(path, "no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SpectrumFileError(path, f"is not a readable .npy array ({e})") from None
        return _numbers(path, arr, "its array"), None
    if suffix not in (".json", *TEXT_SUFFIXES):
        raise SpectrumFileError(path, f"unknown format (suffix {path.suffix or 'none'!r}); give .npy, .json, "
                                      f"{', '.join(TEXT_SUFFIXES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpectrumFileError(path, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    return _from_json(path, text, model) if suffix == ".json" else (_from_text(path, text), None)
