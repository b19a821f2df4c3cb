"""slatedb_core: a key-value store on object storage following SlateDB's manifest protocol.

The public API is what this module re-exports; everything else is internal and may change:
the actors (:class:`Db`, :class:`DbReader`, :class:`Table`, :class:`Compactor`,
:class:`GarbageCollector`, :class:`FleetScanner`), their options and results, :func:`open_store`,
the change feed's types (:class:`Cursor`, :class:`TableCursor`, :class:`ChangeBatch`,
:class:`TableChangeBatch`, :class:`ChangesOptions`, ..., docs/changes.md; its errors
``ChangesCollected`` and ``CursorInvalid`` are in :mod:`~slatedb_core.errors` with the others),
and the public modules :mod:`~slatedb_core.admin`, :mod:`~slatedb_core.health`,
:mod:`~slatedb_core.fleet`, :mod:`~slatedb_core.layout` and :mod:`~slatedb_core.errors`. Every
error is in :mod:`slatedb_core.errors` (import the classes from there) and derives from
:class:`SlateDBError`, whose ``kind`` (:class:`ErrorKind`) says what to do. Tools for tests (the
fault-injecting store) are in :mod:`slatedb_core.testing`, outside this API.
"""

from __future__ import annotations

from typing import Final

from slatedb_core import admin, errors, fleet, health, layout
from slatedb_core.checkpoints import CheckpointCreateResult
from slatedb_core.compactor import CompactionStats, Compactor, run_compaction_once
from slatedb_core.errors import ErrorKind, SlateDBError
from slatedb_core.feed import ChangeBatch, ChangeFeed, ChangesOptions, Cursor, SnapshotPosition
from slatedb_core.feed import rows as _rows
from slatedb_core.feed.retention import ConsumerHold
from slatedb_core.fleet import DatabaseStatus, FleetScanner
from slatedb_core.gc import GarbageCollector, GcStats, run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.union import UnionSource
from slatedb_core.manifest.model import Checkpoint
from slatedb_core.options import (
    CheckpointOptions,
    CheckpointScope,
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader, ReaderStats
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Shard, Table, TableOptions, TableSnapshot, ValueEncoding
from slatedb_core.table.changes import TableChangeBatch, TableChangeFeed, TableCursor
from slatedb_core.writer import ttl as _ttl
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.types import BulkIngestStats

NO_EXPIRY: Final = _ttl.NO_EXPIRY
"""``ttl=NO_EXPIRY``: the row never expires, even in a database with a ``default_ttl``."""

CHANGE_SCHEMA: Final = _rows.CHANGE_SCHEMA
"""The Arrow schema of a batch of changes (``ChangeBatch.rows``, ``TableChangeBatch.rows``):
key, value (null for a delete), op, seq, create_ts, expire_ts, wal_id, snapshot
(docs/changes.md, "Rows")."""

__version__ = "0.1.0"
"""The version of this package (its ``pyproject.toml`` version)."""

__all__ = [
    "CHANGE_SCHEMA",
    "NO_EXPIRY",
    "BulkIngestStats",
    "ChangeBatch",
    "ChangeFeed",
    "ChangesOptions",
    "Checkpoint",
    "CheckpointCreateResult",
    "CheckpointOptions",
    "CheckpointScope",
    "CompactionStats",
    "Compactor",
    "CompactorOptions",
    "ConsumerHold",
    "Cursor",
    "DatabaseStatus",
    "Db",
    "DbOptions",
    "DbReader",
    "DbReaderOptions",
    "ErrorKind",
    "FleetScanner",
    "GarbageCollector",
    "GarbageCollectorOptions",
    "GcStats",
    "KeyRange",
    "ObjectStore",
    "ReaderMode",
    "ReaderStats",
    "Shard",
    "SlateDBError",
    "SnapshotPosition",
    "Table",
    "TableChangeBatch",
    "TableChangeFeed",
    "TableCursor",
    "TableOptions",
    "TableSnapshot",
    "UnionSource",
    "ValueEncoding",
    "WriteBatch",
    "__version__",
    "admin",
    "errors",
    "fleet",
    "health",
    "layout",
    "open_store",
    "run_compaction_once",
    "run_gc_once",
]
