"""slatedb_core: a key-value store on object storage following SlateDB's manifest protocol.

The public API is what this module re-exports; everything else is internal and may change.
"""

from __future__ import annotations

from typing import Final

from slatedb_core import admin, errors, fleet, health, layout
from slatedb_core import health as inspect  # the name before health.py (kept for callers)
from slatedb_core.checkpoints import CheckpointCreateResult
from slatedb_core.compactor import CompactionStats, Compactor, run_compaction_once
from slatedb_core.errors import (
    BoundaryMissing,
    CheckpointNotFound,
    CommitRetriesExhausted,
    CorruptionError,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    DbClosed,
    Fenced,
    InvalidArgument,
    InvalidDeletion,
    ManifestVersionExists,
    MergeBlockedByBatch,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    ReaderClosed,
    ShardMapConflict,
    SlateDBError,
    SstMissing,
    StoreError,
    UnsupportedFeature,
)
from slatedb_core.fleet import DatabaseStatus, FleetScanner
from slatedb_core.gc import GarbageCollector, GcStats, run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.union import UnionSource
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore, StoredManifest
from slatedb_core.meta.versioned import RetryPolicy
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
from slatedb_core.store.faults import FaultRule, FaultyStore
from slatedb_core.store.objectstore import ObjectStore, RequestCounters
from slatedb_core.store.url import open_store
from slatedb_core.table import Shard, ShardMap, Table, TableOptions, TableSnapshot, ValueEncoding
from slatedb_core.writer import ttl as _ttl
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.types import BulkIngestStats

NO_EXPIRY: Final = _ttl.NO_EXPIRY
"""``ttl=NO_EXPIRY``: the row never expires, even in a database with a ``default_ttl``."""

__version__ = "0.1.0"
"""The version of this package (its ``pyproject.toml`` version)."""

__all__ = [
    "NO_EXPIRY",
    "BoundaryMissing",
    "BulkIngestStats",
    "Checkpoint",
    "CheckpointCreateResult",
    "CheckpointNotFound",
    "CheckpointOptions",
    "CheckpointScope",
    "CommitRetriesExhausted",
    "CompactionStats",
    "Compactor",
    "CompactorOptions",
    "CorruptionError",
    "DatabaseDestroyed",
    "DatabaseNotFound",
    "DatabaseNotInitialized",
    "DatabaseStatus",
    "Db",
    "DbClosed",
    "DbOptions",
    "DbReader",
    "DbReaderOptions",
    "FaultRule",
    "FaultyStore",
    "Fenced",
    "FencedManifest",
    "FleetScanner",
    "GarbageCollector",
    "GarbageCollectorOptions",
    "GcStats",
    "InvalidArgument",
    "InvalidDeletion",
    "KeyRange",
    "Manifest",
    "ManifestStore",
    "ManifestVersionExists",
    "MergeBlockedByBatch",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectVersionBehindBoundary",
    "ReaderClosed",
    "ReaderMode",
    "ReaderStats",
    "RequestCounters",
    "RetryPolicy",
    "Shard",
    "ShardMap",
    "ShardMapConflict",
    "SlateDBError",
    "SstMissing",
    "StoreError",
    "StoredManifest",
    "Table",
    "TableOptions",
    "TableSnapshot",
    "UnionSource",
    "UnsupportedFeature",
    "ValueEncoding",
    "WriteBatch",
    "__version__",
    "admin",
    "errors",
    "fleet",
    "health",
    "inspect",
    "layout",
    "open_store",
    "run_compaction_once",
    "run_gc_once",
]
