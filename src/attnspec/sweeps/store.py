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
    claims(
        point_key  TEXT PRIMARY KEY,         -- a point some runner is computing (or failed on)
        owner      TEXT NOT NULL,            -- the runner: 'host:pid:uuid' (see new_owner_id)
        state      TEXT NOT NULL,            -- 'running' or 'failed'
        claimed_at REAL NOT NULL,
        heartbeat  REAL NOT NULL             -- refreshed by the running owner; time of failure if 'failed'
    )

Claims (concurrent runners). Several sweeps may run on one database at the same time (processes on
one or several hosts, each writing its own results). Before computing a point a runner *claims* it
(:meth:`ResultStore.claim`, one ``BEGIN IMMEDIATE`` transaction, so two runners never both get a
point): the claim succeeds if the point is not stored and nobody holds it, or holds it *stale* (the
owner process is dead - same host, pid gone or a zombie - or its heartbeat is older than
``stale_after`` seconds), or failed there before the claiming run began (a failed point is retried
by the next run, not by runs that were already going). Storing a point deletes its claim in the
same transaction as the insert; a failure turns it into ``state='failed'``; a runner that stops
deletes its remaining ``running`` claims. A runner killed with SIGKILL leaves its claims behind;
they are stale at once for runners on the same host, after ``stale_after`` for other hosts, so
nothing is lost. The table is additive: an older attnspec ignores it (without claiming, it may then
compute a point twice but still writes it once).

Durability: the database runs in WAL mode with ``synchronous=FULL``; each finished point is one
``INSERT ... ON CONFLICT(point_key) DO NOTHING`` in its own transaction, committed before the next
result is taken. A process killed at any moment (SIGKILL included) therefore leaves every committed
row intact and no partial row (SQLite's atomic commit), and the UNIQUE key makes a point be written
at most once. Only the client process writes; workers never open the database.
"""
from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from .. import __version__
from .spec import SweepPoint

__all__ = ["ResultStore", "StoredPoint", "code_version", "new_owner_id", "owner_alive", "SCHEMA_VERSION",
           "CLAIMED", "STORED", "HELD", "FAILED_ELSEWHERE", "DEFAULT_STALE_AFTER_S"]

SCHEMA_VERSION = 1

#: Outcomes of :meth:`ResultStore.claim`.
CLAIMED, STORED, HELD, FAILED_ELSEWHERE = "claimed", "stored", "held", "failed-elsewhere"

#: A claim whose heartbeat is older than this many seconds is stale (for owners on other hosts;
#: owners on this host are also checked by pid).
DEFAULT_STALE_AFTER_S = 120.0

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
CREATE TABLE IF NOT EXISTS claims(
    point_key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    claimed_at REAL NOT NULL,
    heartbeat REAL NOT NULL
);
"""


def new_owner_id() -> str:
    """A fresh runner identity ``host:pid:uuid`` (unique per call, also within one process).

    Examples
    --------
    >>> new_owner_id() != new_owner_id(), new_owner_id().count(":")
    (True, 2)
    """
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def owner_alive(owner: str) -> bool | None:
    """Whether the process of ``owner`` runs: ``True``/``False`` on this host, ``None`` (unknown) on another.

    Examples
    --------
    >>> owner_alive(new_owner_id()), owner_alive("elsewhere.example:1:abc")   # this process; another host
    (True, None)
    """
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return None
    try:   # a killed but not yet reaped process (zombie) answers kill(pid, 0) but is dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``attnspec.__version__``, plus ``+git:<describe>`` when the package sits in a git checkout.

    Examples
    --------
    >>> code_version().startswith(__version__)
    True
    """
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
    """A row of ``points``, decoded.

    Examples
    --------
    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(StoredPoint)][:5]       # what ResultStore.get and .rows return
    ['key', 'sweep', 'config', 'seed', 'draws']
    """

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

    Examples
    --------
    >>> import tempfile
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.sweeps.spec import SweepPoint
    >>> p = SweepPoint(MHSAConfig.uniform(16, 16))
    >>> with ResultStore(tempfile.mkdtemp() + "/s.sqlite") as store:
    ...     first = store.put(p, {"m1": 1.7}, started_at=0.0, finished_at=2.0, worker="local")
    ...     again = store.put(p, {"m1": 9.9}, started_at=0.0, finished_at=2.0)      # one row per key
    ...     row = store.get(p.key)
    >>> first, again, row.results, row.elapsed_s
    (True, False, {'m1': 1.7}, 2.0)
    """

    def __init__(self, path: str | Path, timeout: float = 60.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
        self._wal(timeout)
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

    def _wal(self, timeout: float) -> None:
        """Switch to WAL. A second process opening a new database at the same moment can make the switch
        fail with 'database is locked' before SQLite's busy handler waits, so it is retried until ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > end:
                    raise
                time.sleep(0.05)

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

    def claims(self) -> list[dict]:
        """All claims (running and failed), oldest first."""
        cols = ("point_key", "owner", "state", "claimed_at", "heartbeat")
        return [dict(zip(cols, r)) for r in
                self._conn.execute(f"SELECT {', '.join(cols)} FROM claims ORDER BY claimed_at, point_key")]

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
            c.execute("DELETE FROM claims WHERE point_key = ?", (point.key,))   # stored: nobody needs to hold it
            return cur.rowcount == 1

    def record_failure(self, key: str, error: str, sweep: str = "sweep", owner: str | None = None) -> None:
        """Log a failed evaluation; with ``owner``, also mark that runner's claim on ``key`` as failed."""
        now = time.time()
        with self._tx() as c:
            c.execute("INSERT INTO failures(point_key, sweep, error, at) VALUES (?,?,?,?)", (key, sweep, error, now))
            if owner is not None:
                c.execute("UPDATE claims SET state = 'failed', heartbeat = ? WHERE point_key = ? AND owner = ?",
                          (now, key, owner))

    # ------------------------------------------------------------------ claims
    def claim(self, key: str, owner: str, *, run_started_at: float = 0.0,
              stale_after: float = DEFAULT_STALE_AFTER_S) -> str:
        """Try to take point ``key`` for runner ``owner``, atomically (one ``BEGIN IMMEDIATE``).

        Returns :data:`CLAIMED` (compute it), :data:`STORED` (its result is in the store),
        :data:`HELD` (a live runner is computing it) or :data:`FAILED_ELSEWHERE` (another runner
        failed on it at or after ``run_started_at``, the start of the claiming run). A claim that
        is stale (see the module docstring) or a failure from before ``run_started_at`` is taken over.
        """
        now = time.time()
        with self._tx() as c:
            if c.execute("SELECT 1 FROM points WHERE point_key = ?", (key,)).fetchone() is not None:
                return STORED
            row = c.execute("SELECT owner, state, heartbeat FROM claims WHERE point_key = ?", (key,)).fetchone()
            if row is None:
                c.execute("INSERT INTO claims(point_key, owner, state, claimed_at, heartbeat) "
                          "VALUES (?, ?, 'running', ?, ?)", (key, owner, now, now))
                return CLAIMED
            other, state, beat = row
            if other != owner:
                if state == "failed":
                    if beat >= run_started_at:
                        return FAILED_ELSEWHERE
                elif not self._stale(other, beat, now, stale_after):
                    return HELD
            c.execute("UPDATE claims SET owner = ?, state = 'running', claimed_at = ?, heartbeat = ? "
                      "WHERE point_key = ?", (owner, now, now, key))
            return CLAIMED

    @staticmethod
    def _stale(owner: str, heartbeat: float, now: float, stale_after: float) -> bool:
        alive = owner_alive(owner)
        return alive is False or now - heartbeat > stale_after

    def heartbeat(self, owner: str) -> int:
        """Refresh the heartbeat of every running claim of ``owner``; the number of claims."""
        with self._tx() as c:
            return c.execute("UPDATE claims SET heartbeat = ? WHERE owner = ? AND state = 'running'",
                             (time.time(), owner)).rowcount

    def release(self, owner: str, keys: Iterable[str] | None = None) -> int:
        """Delete the running claims of ``owner`` (only those on ``keys`` if given); how many."""
        with self._tx() as c:
            if keys is None:
                return c.execute("DELETE FROM claims WHERE owner = ? AND state = 'running'", (owner,)).rowcount
            return sum(c.execute("DELETE FROM claims WHERE owner = ? AND state = 'running' AND point_key = ?",
                                 (owner, k)).rowcount for k in keys)
