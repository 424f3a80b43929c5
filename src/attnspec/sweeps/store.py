"""The results store: one embedded SQLite database, one row per finished sweep point.

Schema (``SCHEMA_VERSION`` 1)::

    meta(name TEXT PRIMARY KEY, value TEXT)                 -- schema version, creation time
    points(
        id           INTEGER PRIMARY KEY,
        point_key    TEXT NOT NULL UNIQUE,   -- SHA-256 of the point's canonical JSON (SweepPoint.key)
        sweep        TEXT NOT NULL,          -- name of the sweep that first computed it
        config_json  TEXT NOT NULL,          -- MHSAConfig.to_dict() as JSON
        seed         INTEGER NOT NULL,
        draws        INTEGER NOT NULL,
        evaluations  TEXT NOT NULL,          -- JSON list, e.g. ["law","softmax","surrogate"]
        tags_json    TEXT NOT NULL,          -- free-form labels of the first sweep that computed it
        code_version TEXT NOT NULL,          -- attnspec.__version__ [+ git describe]
        results_json TEXT NOT NULL,          -- the evaluation's plain-JSON result
        started_at   REAL NOT NULL,          -- unix time on the worker
        finished_at  REAL NOT NULL,
        elapsed_s    REAL NOT NULL,          -- wall time of the evaluation on the worker
        worker       TEXT,                   -- Dask worker address (or 'local')
        stored_at    REAL NOT NULL           -- unix time of the commit on the client
    )
    failures(id INTEGER PRIMARY KEY, point_key TEXT, sweep TEXT, error TEXT, at REAL)

Durability: the database runs in WAL mode with ``synchronous=FULL``; each finished point is one
``INSERT ... ON CONFLICT(point_key) DO NOTHING`` in its own transaction, committed before the next
result is taken. A process killed at any moment (SIGKILL included) therefore leaves every committed
row intact and no partial row (SQLite's atomic commit), and the UNIQUE key makes a point be written
at most once. Only the client process writes; workers never open the database.
"""
from __future__ import annotations

import functools
import json
import sqlite3
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import __version__
from .spec import SweepPoint

__all__ = ["ResultStore", "StoredPoint", "code_version", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS points(
    id INTEGER PRIMARY KEY,
    point_key TEXT NOT NULL UNIQUE,
    sweep TEXT NOT NULL,
    config_json TEXT NOT NULL,
    seed INTEGER NOT NULL,
    draws INTEGER NOT NULL,
    evaluations TEXT NOT NULL,
    tags_json TEXT NOT NULL,
    code_version TEXT NOT NULL,
    results_json TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    elapsed_s REAL NOT NULL,
    worker TEXT,
    stored_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS failures(
    id INTEGER PRIMARY KEY, point_key TEXT NOT NULL, sweep TEXT NOT NULL, error TEXT NOT NULL, at REAL NOT NULL
);
"""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``attnspec.__version__``, plus ``+git:<describe>`` when the package sits in a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return f"{__version__}+git:{out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    return __version__


@dataclass(frozen=True)
class StoredPoint:
    """A row of ``points``, decoded."""

    key: str
    sweep: str
    config: dict
    seed: int
    draws: int
    evaluations: list
    tags: dict
    code_version: str
    results: dict
    started_at: float
    finished_at: float
    elapsed_s: float
    worker: str | None
    stored_at: float


class ResultStore:
    """SQLite store of finished sweep points (see the module docstring for schema and guarantees).

    Use as a context manager or call :meth:`close`. Opening creates the file and the schema.
    """

    def __init__(self, path: str | Path, timeout: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=%d" % int(timeout * 1000))
        with self._tx() as c:
            for stmt in filter(str.strip, _SCHEMA.split(";")):
                c.execute(stmt)
            c.execute("INSERT OR IGNORE INTO meta(name, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            c.execute("INSERT OR IGNORE INTO meta(name, value) VALUES ('created_at', ?)", (repr(time.time()),))
        found = self.meta().get("schema_version")
        if found != str(SCHEMA_VERSION):
            raise RuntimeError(f"{self.path}: results store schema version {found}, this attnspec writes {SCHEMA_VERSION}")

    # ------------------------------------------------------------------ plumbing
    class _Tx:
        def __init__(self, conn: sqlite3.Connection):
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type, exc, tb) -> None:
            self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")

    def _tx(self) -> "ResultStore._Tx":
        return ResultStore._Tx(self._conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT name, value FROM meta").fetchall())

    def finished_keys(self, keys: Iterable[str] | None = None) -> set[str]:
        """Keys already stored (restricted to ``keys`` if given)."""
        done = {k for (k,) in self._conn.execute("SELECT point_key FROM points")}
        return done if keys is None else done & set(keys)

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM points").fetchone()[0])

    def __contains__(self, key: str) -> bool:
        return self._conn.execute("SELECT 1 FROM points WHERE point_key = ?", (key,)).fetchone() is not None

    _COLS = ("point_key, sweep, config_json, seed, draws, evaluations, tags_json, code_version, results_json, "
             "started_at, finished_at, elapsed_s, worker, stored_at")

    @staticmethod
    def _decode(row: tuple) -> StoredPoint:
        (key, sweep, cfg, seed, draws, ev, tags, ver, res, t0, t1, el, worker, st) = row
        return StoredPoint(key, sweep, json.loads(cfg), seed, draws, json.loads(ev), json.loads(tags), ver,
                           json.loads(res), t0, t1, el, worker, st)

    def get(self, key: str) -> StoredPoint | None:
        row = self._conn.execute(f"SELECT {self._COLS} FROM points WHERE point_key = ?", (key,)).fetchone()
        return None if row is None else self._decode(row)

    def rows(self, sweep: str | None = None) -> Iterator[StoredPoint]:
        """All rows in insertion order (optionally only those first computed by ``sweep``)."""
        q = f"SELECT {self._COLS} FROM points" + (" WHERE sweep = ?" if sweep else "") + " ORDER BY id"
        for row in self._conn.execute(q, (sweep,) if sweep else ()):
            yield self._decode(row)

    def failures(self) -> list[dict]:
        return [dict(zip(("point_key", "sweep", "error", "at"), r))
                for r in self._conn.execute("SELECT point_key, sweep, error, at FROM failures ORDER BY id")]

    def integrity_check(self) -> str:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    # ------------------------------------------------------------------ writing
    def put(self, point: SweepPoint, results: dict[str, Any], *, sweep: str = "sweep", started_at: float,
            finished_at: float, worker: str | None = None, version: str | None = None) -> bool:
        """Store one finished point in its own transaction; ``False`` if its key was already there."""
        payload = json.dumps(results, allow_nan=False, separators=(",", ":"))
        with self._tx() as c:
            cur = c.execute(
                f"INSERT INTO points({self._COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT(point_key) DO NOTHING",
                (point.key, sweep, json.dumps(point.config.to_dict(), sort_keys=True), point.seed, point.draws,
                 json.dumps(list(point.evaluations)), json.dumps(point.tags, sort_keys=True, default=str),
                 version or code_version(), payload, float(started_at), float(finished_at),
                 float(finished_at) - float(started_at), worker, time.time()))
            return cur.rowcount == 1

    def record_failure(self, key: str, error: str, sweep: str = "sweep") -> None:
        with self._tx() as c:
            c.execute("INSERT INTO failures(point_key, sweep, error, at) VALUES (?,?,?,?)",
                      (key, sweep, error, time.time()))
