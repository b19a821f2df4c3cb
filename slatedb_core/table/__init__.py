"""Sharded tables: a shard map of contiguous key ranges, one database per range
(docs/projection-and-union.md).

``from slatedb_core.table import Table, Shard, ShardMap, TableOptions, TableSnapshot``. The map
format and its sequenced store: :mod:`.shardmap`; the table, its routing and writers:
:mod:`.table`; reads across shards: :mod:`.reads`; split and merge: :mod:`.rescale`; snapshots:
:mod:`.snapshot`, named ones: :mod:`.named_snapshots`; batch ingest (staged SSTs, the
exactly-once per-shard commit): :mod:`.staged`, :mod:`.ingest`.
"""

from __future__ import annotations

from slatedb_core.table.gc import TableGcStats
from slatedb_core.table.ingest_txn import AppVersion, check_txn, table_app_versions
from slatedb_core.table.options import TableOptions
from slatedb_core.table.routing import route
from slatedb_core.table.shardmap import (
    PendingOp,
    Shard,
    ShardMap,
    ShardMapStore,
    ValueEncoding,
)
from slatedb_core.table.snapshot import TableSnapshot
from slatedb_core.table.table import Table

__all__ = [
    "AppVersion",
    "PendingOp",
    "Shard",
    "ShardMap",
    "ShardMapStore",
    "Table",
    "TableGcStats",
    "TableOptions",
    "TableSnapshot",
    "ValueEncoding",
    "check_txn",
    "route",
    "table_app_versions",
]
