"""Transactional stores for two-phase CAS (SlateDB RFC 0001, "CAS on S3"): SQLite and PostgreSQL.

:class:`~slatedb_core.store.twophase.TwoPhaseStore` keeps two kinds of rows here:

* **intents** (pattern 5): ``(ns, dest) -> source, committed, size``. ``(ns, dest)`` is the primary
  key, so inserting an intent is the create-if-absent of ``dest``: exactly one writer's insert
  succeeds. The key is the object's absolute location (``ns`` a root such as ``s3://bucket``,
  ``dest`` the name from it: :mod:`slatedb_core.store.twophase_keys`), so one database serves
  several buckets and every URL that reaches an object uses one key for it.
* **cells** (pattern 2): small mutable objects that need compare-and-swap (GC boundary files),
  stored whole: ``(ns, path) -> data, etag, version``. A conditional update is one ``UPDATE ...
  WHERE etag = expected``.

Every operation is a single SQL statement in autocommit mode, so each is atomic on its own and
needs no client-side transaction: a unique insert, an update guarded by its ``WHERE`` clause, a
delete guarded by the source it expects. That is all the two-phase protocol asks of the store.

The store is chosen by URL (:func:`open_txn_store`):

* ``sqlite:///abs/path/file.db`` - one machine (several processes may share the file; WAL mode,
  ``synchronous=FULL``: an insert that returned is on disk);
* ``postgresql://user[:password]@host:port/dbname`` (or ``postgres://``) - many machines; needs
  the optional ``psycopg`` driver.

Tables are created if missing. Every statement is counted per kind (select/insert/update/delete)
in :attr:`TxnStore.counters`; driver errors are raised as :class:`~slatedb_core.errors.StoreError`
(retryable: the outcome of a write that raised may be unknown, exactly like an object-store PUT).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sqlite3
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from slatedb_core.errors import InvalidArgument, StoreError, UnsupportedOperation
from slatedb_core.store.objectstore import RequestCounters
from slatedb_core.store.pgurl import SCHEMES as PG_SCHEMES
from slatedb_core.store.pgurl import PgUrlError, pg_params, secrets_of
from slatedb_core.store.redact import redact_url

STATEMENTS = ("select", "insert", "update", "delete")
_PG_PORT = re.compile(r"[0-9]{1,5}")
INTENTS = "slatedb_intents"
CELLS = "slatedb_cells"
_POOL_IDLE = 8


@dataclass(frozen=True, slots=True)
class Intent:
    dest: str
    source: str
    committed: bool
    size: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class Cell:
    path: str
    data: bytes
    etag: str
    version: int
    modified_ms: int


@dataclass(frozen=True, slots=True)
class ListedRow:
    """A row that a listing of the object store must show: a pending intent or a cell."""

    path: str
    size: int
    modified_ms: int
    etag: str | None
    is_cell: bool


class StatementCounters(RequestCounters):
    """Statements per kind (select, insert, update, delete)."""

    def __init__(self) -> None:
        super().__init__()
        self._counts = dict.fromkeys(STATEMENTS, 0)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _etag() -> str:
    # Random, not the version number: a cell deleted and created again must never repeat an
    # e-tag a reader may still hold for a conditional GET.
    return uuid.uuid4().hex


class TxnStore(ABC):
    """The statements two-phase CAS needs; subclasses supply a connection and a dialect."""

    url: str
    counters: RequestCounters
    _ph = "?"  # placeholder
    _length = "length"

    def __init__(self) -> None:
        self.counters: RequestCounters = StatementCounters()
        self._pool: queue.LifoQueue[Any] = queue.LifoQueue()
        self._closed = False

    # ---- connections ---------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any: ...

    @abstractmethod
    def _is_transient(self, err: BaseException) -> bool:
        """True for driver errors after which the connection must be dropped."""

    @abstractmethod
    def _driver_errors(self) -> tuple[type[BaseException], ...]: ...

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        if self._closed:
            raise StoreError(f"transactional store {self.url} is closed", retryable=False)
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            conn = self._connect()
        healthy = True
        try:
            yield conn
        except BaseException as e:
            healthy = not self._is_transient(e)
            raise
        finally:
            if healthy and not self._closed and self._pool.qsize() < _POOL_IDLE:
                self._pool.put(conn)
            else:
                with contextlib.suppress(Exception):
                    conn.close()

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                conn = self._pool.get_nowait()
            except queue.Empty:
                return
            with contextlib.suppress(Exception):
                conn.close()

    def _sql(self, text: str) -> str:
        return text.replace("?", self._ph)

    def _run(self, kind: str, text: str, params: Sequence[Any]) -> tuple[list[Any], int]:
        """One statement; returns (rows, rowcount)."""
        self.counters.incr(kind)
        try:
            with self._conn() as conn:
                cur = conn.execute(self._sql(text), tuple(params))
                rows = list(cur.fetchall()) if cur.description is not None else []
                return rows, cur.rowcount
        except self._driver_errors() as e:
            raise StoreError(f"{self.url}: {kind} failed: {e}".strip(), retryable=True) from e

    def execute(self, kind: str, text: str, params: Sequence[Any]) -> tuple[list[Any], int]:
        """One statement with ``?`` placeholders (maintenance: the key migration of
        :mod:`slatedb_core.store.twophase_keys`); returns (rows, rowcount)."""
        return self._run(kind, text, params)

    # ---- intents (pattern 5) -------------------------------------------------------------
    def insert_intent(self, ns: str, dest: str, source: str, size: int) -> bool:
        """Create-if-absent of ``dest``: True if this insert took it, False if a row exists."""
        rows, _ = self._run(
            "insert",
            f"INSERT INTO {INTENTS} (ns, dest, source, committed, size, created_ms) "
            "VALUES (?, ?, ?, 0, ?, ?) ON CONFLICT (ns, dest) DO NOTHING RETURNING dest",
            (ns, dest, source, size, _now_ms()),
        )
        return bool(rows)

    def get_intent(self, ns: str, dest: str) -> Intent | None:
        rows, _ = self._run(
            "select",
            f"SELECT dest, source, committed, size, created_ms FROM {INTENTS} "
            "WHERE ns = ? AND dest = ?",
            (ns, dest),
        )
        return _intent(rows[0]) if rows else None

    def commit_intent(self, ns: str, dest: str, source: str) -> bool:
        """Mark committed (idempotent). False if the row is gone or names another source."""
        _, n = self._run(
            "update",
            f"UPDATE {INTENTS} SET committed = 1 WHERE ns = ? AND dest = ? AND source = ?",
            (ns, dest, source),
        )
        return n > 0

    def delete_intent(self, ns: str, dest: str, source: str) -> bool:
        """Delete the row of ``dest`` only if it still names ``source``."""
        _, n = self._run(
            "delete",
            f"DELETE FROM {INTENTS} WHERE ns = ? AND dest = ? AND source = ?",
            (ns, dest, source),
        )
        return n > 0

    def pending_intents(self, ns: str, lo: str = "", hi: str | None = None) -> list[Intent]:
        """Uncommitted intents with ``lo <= dest < hi``, by dest."""
        cond, params = _range("dest", lo, hi)
        rows, _ = self._run(
            "select",
            f"SELECT dest, source, committed, size, created_ms FROM {INTENTS} "
            f"WHERE ns = ? AND committed = 0{cond} ORDER BY dest",
            (ns, *params),
        )
        return [_intent(r) for r in rows]

    def delete_committed_intents(
        self, ns: str, lo: str, hi_inclusive: str, keep: Sequence[str] = ()
    ) -> int:
        """GC: delete committed intents with ``lo <= dest <= hi_inclusive`` except ``keep``."""
        text = f"DELETE FROM {INTENTS} WHERE ns = ? AND committed = 1 AND dest >= ? AND dest <= ?"
        params: list[Any] = [ns, lo, hi_inclusive]
        if keep:
            text += " AND dest NOT IN (" + ", ".join("?" for _ in keep) + ")"
            params.extend(keep)
        _, n = self._run("delete", text, params)
        return max(n, 0)

    def intent_sources(self, ns: str, lo: str, hi: str) -> set[str]:
        """Sources named by any intent with ``lo <= dest < hi`` (GC of orphaned temporaries)."""
        cond, params = _range("dest", lo, hi)
        rows, _ = self._run(
            "select", f"SELECT source FROM {INTENTS} WHERE ns = ?{cond}", (ns, *params)
        )
        return {r[0] for r in rows}

    # ---- cells (pattern 2) ---------------------------------------------------------------
    def get_cell(self, ns: str, path: str) -> Cell | None:
        rows, _ = self._run(
            "select",
            f"SELECT path, data, etag, version, modified_ms FROM {CELLS} WHERE ns = ? AND path = ?",
            (ns, path),
        )
        return _cell(rows[0]) if rows else None

    def create_cell(self, ns: str, path: str, data: bytes) -> Cell | None:
        """Create-if-absent; None if the cell exists."""
        etag, now = _etag(), _now_ms()
        rows, _ = self._run(
            "insert",
            f"INSERT INTO {CELLS} (ns, path, data, etag, version, modified_ms) "
            "VALUES (?, ?, ?, ?, 1, ?) ON CONFLICT (ns, path) DO NOTHING RETURNING version",
            (ns, path, data, etag, now),
        )
        return Cell(path, data, etag, 1, now) if rows else None

    def update_cell(
        self, ns: str, path: str, data: bytes, *, etag: str | None, version: int | None
    ) -> Cell | None:
        """Compare-and-swap on the e-tag and/or version; None if the cell changed or is gone."""
        if etag is None and version is None:
            raise InvalidArgument("a conditional update needs an e-tag or a version")
        new_etag, now = _etag(), _now_ms()
        text = (
            f"UPDATE {CELLS} SET data = ?, etag = ?, version = version + 1, modified_ms = ? "
            "WHERE ns = ? AND path = ?"
        )
        params: list[Any] = [data, new_etag, now, ns, path]
        if etag is not None:
            text += " AND etag = ?"
            params.append(etag)
        if version is not None:
            text += " AND version = ?"
            params.append(version)
        rows, _ = self._run("update", text + " RETURNING version", params)
        return Cell(path, data, new_etag, int(rows[0][0]), now) if rows else None

    def put_cell(self, ns: str, path: str, data: bytes) -> Cell:
        """Unconditional overwrite (or create)."""
        etag, now = _etag(), _now_ms()
        rows, _ = self._run(
            "insert",
            f"INSERT INTO {CELLS} (ns, path, data, etag, version, modified_ms) "
            "VALUES (?, ?, ?, ?, 1, ?) ON CONFLICT (ns, path) DO UPDATE SET "
            f"data = excluded.data, etag = excluded.etag, version = {CELLS}.version + 1, "
            "modified_ms = excluded.modified_ms RETURNING version",
            (ns, path, data, etag, now),
        )
        return Cell(path, data, etag, int(rows[0][0]), now)

    def delete_cell(self, ns: str, path: str) -> None:
        self._run("delete", f"DELETE FROM {CELLS} WHERE ns = ? AND path = ?", (ns, path))

    # ---- listing -------------------------------------------------------------------------
    def listed_rows(
        self, ns: str, lo: str, hi: str | None, start_after: str | None
    ) -> list[ListedRow]:
        """Pending intents and cells a listing of ``[lo, hi)`` after ``start_after`` must show:
        one statement."""
        c1, p1 = _range("dest", lo, hi, start_after)
        c2, p2 = _range("path", lo, hi, start_after)
        rows, _ = self._run(
            "select",
            f"SELECT dest, size, created_ms, NULL, 0 FROM {INTENTS} WHERE ns = ? AND committed = 0"
            f"{c1} UNION ALL SELECT path, {self._length}(data), modified_ms, etag, 1 FROM {CELLS} "
            f"WHERE ns = ?{c2}",
            (ns, *p1, ns, *p2),
        )
        return [ListedRow(r[0], int(r[1]), int(r[2]), r[3], bool(r[4])) for r in rows]


def _range(col: str, lo: str, hi: str | None, after: str | None = None) -> tuple[str, list[str]]:
    cond, params = "", []
    if lo:
        cond += f" AND {col} >= ?"
        params.append(lo)
    if hi is not None:
        cond += f" AND {col} < ?"
        params.append(hi)
    if after is not None:
        cond += f" AND {col} > ?"
        params.append(after)
    return cond, params


def _intent(r: Sequence[Any]) -> Intent:
    return Intent(r[0], r[1], bool(r[2]), int(r[3]), int(r[4]))


def _cell(r: Sequence[Any]) -> Cell:
    return Cell(r[0], bytes(r[1]), r[2], int(r[3]), int(r[4]))


# ---- SQLite ---------------------------------------------------------------------------------
class SqliteTxnStore(TxnStore):
    """A SQLite file: one machine, any number of processes (SQLite's own locking)."""

    def __init__(self, path: Path, *, url: str | None = None, busy_timeout_s: float = 30.0) -> None:
        super().__init__()
        self.path = path
        self.url = url or f"sqlite://{path}"
        self._timeout = busy_timeout_s
        path.parent.mkdir(parents=True, exist_ok=True)
        self._create_schema()

    def __repr__(self) -> str:
        return f"SqliteTxnStore({str(self.path)!r})"

    def _create_schema(self) -> None:
        """WAL mode and the tables, waiting up to ``busy_timeout_s`` for another connection's
        write lock. SQLite's busy handler covers the CREATEs but not the switch to WAL mode,
        which fails at once while another connection holds a write lock: retried here, with a
        short backoff, until the deadline; then a StoreError that says what to do."""
        deadline = time.monotonic() + self._timeout
        delay = 0.005
        while True:
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=max(0.0, deadline - time.monotonic()),
                    isolation_level=None,
                    check_same_thread=False,
                )
                try:
                    conn.execute("PRAGMA synchronous=FULL")
                    for statement in _SQLITE_SCHEMA:
                        conn.execute(statement)
                finally:
                    conn.close()
                return
            except sqlite3.Error as e:
                if not _sqlite_locked(e):
                    raise StoreError(f"cannot open {self.url}: {e}", retryable=False) from e
                if time.monotonic() + delay > deadline:
                    raise StoreError(
                        f"cannot open {self.url}: the database is locked by another connection "
                        f"and stayed locked for busy_timeout_s={self._timeout:g} s; let the "
                        "process holding the lock finish (or close it) and retry, or open the "
                        "store with a longer busy_timeout_s",
                    ) from e
                time.sleep(delay)
                delay = min(2 * delay, 0.1)

    def _connect(self) -> Any:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {self.url}: {e}") from e
        return conn

    def _is_transient(self, err: BaseException) -> bool:
        return isinstance(err, sqlite3.OperationalError)

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.Error,)


_SQLITE_SCHEMA = (
    "PRAGMA journal_mode=WAL",
    f"CREATE TABLE IF NOT EXISTS {INTENTS} (ns TEXT NOT NULL, dest TEXT NOT NULL, "
    "source TEXT NOT NULL, committed INTEGER NOT NULL DEFAULT 0, "
    "size INTEGER NOT NULL, created_ms INTEGER NOT NULL, PRIMARY KEY (ns, dest))",
    f"CREATE INDEX IF NOT EXISTS {INTENTS}_pending ON {INTENTS} (ns, dest) WHERE committed = 0",
    f"CREATE TABLE IF NOT EXISTS {CELLS} (ns TEXT NOT NULL, path TEXT NOT NULL, "
    "data BLOB NOT NULL, etag TEXT NOT NULL, version INTEGER NOT NULL, "
    "modified_ms INTEGER NOT NULL, PRIMARY KEY (ns, path))",
)


def _sqlite_locked(err: sqlite3.Error) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED (extended codes included): another connection's lock."""
    name = getattr(err, "sqlite_errorname", "")
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(err) or "busy" in str(err)


# ---- PostgreSQL -----------------------------------------------------------------------------
class PostgresTxnStore(TxnStore):
    """A PostgreSQL database: many machines. Connections are pooled per store, autocommit."""

    _ph = "%s"
    _length = "octet_length"

    def __init__(self, url: str, *, connect_timeout_s: int = 5) -> None:
        try:
            import psycopg
        except ImportError as e:  # pragma: no cover - the driver is a declared dependency
            raise UnsupportedOperation(
                "postgresql:// transactional stores need the psycopg driver "
                "(pip install 'psycopg[binary]')"
            ) from e
        self._psycopg = psycopg
        super().__init__()
        # libpq's own reading of the URL (slatedb_core.store.pgurl), handed back to it as
        # parameters: the password hidden in messages is the one used, and no part of it can
        # become a host name
        try:
            self._params: dict[str, Any] = pg_params(url)
        except PgUrlError as e:
            raise InvalidArgument(f"{e}: {redact_url(url)!r}") from None
        self._params.setdefault("connect_timeout", str(connect_timeout_s))
        self._secrets = secrets_of(self._params)
        p = self._params
        self.url = f"postgresql://{p.get('host', '')}:{p.get('port', '')}/{p.get('dbname', '')}"
        with self._conn() as conn, conn.transaction():
            # Two processes creating the tables at once would collide in pg_type: serialise.
            conn.execute("SELECT pg_advisory_xact_lock(7346021)")
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS {INTENTS} (ns TEXT COLLATE "C" NOT NULL, '
                'dest TEXT COLLATE "C" NOT NULL, source TEXT NOT NULL, '
                "committed SMALLINT NOT NULL DEFAULT 0, size BIGINT NOT NULL, "
                "created_ms BIGINT NOT NULL, PRIMARY KEY (ns, dest))"
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {INTENTS}_pending ON {INTENTS} (ns, dest) "
                "WHERE committed = 0"
            )
            conn.execute(
                f'CREATE TABLE IF NOT EXISTS {CELLS} (ns TEXT COLLATE "C" NOT NULL, '
                'path TEXT COLLATE "C" NOT NULL, data BYTEA NOT NULL, etag TEXT NOT NULL, '
                "version BIGINT NOT NULL, modified_ms BIGINT NOT NULL, PRIMARY KEY (ns, path))"
            )

    def __repr__(self) -> str:
        return f"PostgresTxnStore({self.url!r})"

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(autocommit=True, **self._params)
        except self._psycopg.Error as e:
            # not chained: a driver message may quote a parameter, and a traceback of the
            # cause would show it
            raise StoreError(
                f"cannot connect to {self.url}: {_scrub(str(e), self._secrets)}".strip()
            ) from None

    def _is_transient(self, err: BaseException) -> bool:
        return isinstance(err, self._psycopg.OperationalError | self._psycopg.InterfaceError)

    def _driver_errors(self) -> tuple[type[BaseException], ...]:
        return (self._psycopg.Error,)


def open_txn_store(url: str | os.PathLike[str]) -> TxnStore:
    """``sqlite:///abs/path.db`` or ``postgresql://user@host:port/db``."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument(
            f"transactional store URL must be sqlite:///abs/path or postgresql://..., got {redact_url(url)!r}"
        )
    url = url.strip()
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        try:
            parts = urlsplit(url)
        except ValueError:
            raise InvalidArgument(f"malformed sqlite URL: {redact_url(url)!r}") from None
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise InvalidArgument(
                f"sqlite URL must be sqlite:///absolute/path.db, got {redact_url(url)!r}"
            )
        path = unquote(parts.path)
        if not path.startswith("/") or path.endswith("/") or ":memory:" in path:
            raise InvalidArgument(
                f"sqlite URL needs an absolute file path (an in-memory database cannot be shared "
                f"between connections): {redact_url(url)!r}"
            )
        return SqliteTxnStore(Path(path), url=url)
    if scheme in PG_SCHEMES:
        # read as libpq reads it (slatedb_core.store.pgurl), never with urlsplit
        try:
            params = pg_params(url)
        except PgUrlError as e:
            raise InvalidArgument(f"postgresql URL refused: {e}: {redact_url(url)!r}") from None
        if (
            not _PG_PORT.fullmatch(params.get("port", "5432"))
            or int(params.get("port", "5432")) > 65535
        ):
            raise InvalidArgument(f"postgresql URL has a bad port: {redact_url(url)!r}")
        if not params.get("host") or not params.get("dbname"):
            raise InvalidArgument(
                f"postgresql URL needs a host and a database name: {redact_url(url)!r}"
            )
        return PostgresTxnStore(url)
    raise InvalidArgument(
        f"unsupported transactional store URL {redact_url(url)!r}: use sqlite:///abs/path.db or "
        "postgresql://user@host:port/db"
    )


def _scrub(message: str, secrets: set[str]) -> str:
    """A driver's ``message`` without any of ``secrets`` (:func:`secrets_of` the parameters)."""
    for secret in sorted(secrets, key=len, reverse=True):
        message = message.replace(secret, "***")
    return message
