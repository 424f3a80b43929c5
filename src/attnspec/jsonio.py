"""Plain JSON data and atomic JSON files, shared by every layer that writes results."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["jsonable", "write_json"]


def jsonable(obj: Any) -> Any:
    """Plain JSON data: mappings and sequences recursively, arrays to lists, numpy scalars to Python,
    non-finite floats to ``None`` (JSON has no inf/nan).

    Examples
    --------
    >>> import numpy as np
    >>> jsonable({"a": np.array([1.0, np.inf]), 2: np.int64(3)})
    {'a': [1.0, None], '2': 3}
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def write_json(path: str | Path, data: Any, indent: int = 1) -> Path:
    """Write JSON atomically (temporary file, then rename): never a half-written file.

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> p = write_json(pathlib.Path(tempfile.mkdtemp()) / "out.json", {"x": float("nan")})
    >>> json.loads(p.read_text())
    {'x': None}
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(jsonable(data), indent=indent, allow_nan=False))
    tmp.replace(path)
    return path
