"""Sharded tables: a shard map of contiguous key ranges, one database per range (issue 7).

``from slatedb_core.table import Table, Shard, ShardMap, TableOptions``. The map format and its
sequenced store: :mod:`.shardmap`; routing, reads and writers: :mod:`.table`; split and merge:
:mod:`.rescale`.
"""

from __future__ import annotations

from slatedb_core.table.gc import INGEST_DIR, TableGcStats, ingest_prefix
from slatedb_core.table.shardmap import PendingOp, Shard, ShardMap, ShardMapStore, route
from slatedb_core.table.snapshot import TableSnapshot
from slatedb_core.table.table import Table, TableOptions

__all__ = [
    "INGEST_DIR",
    "PendingOp",
    "Shard",
    "ShardMap",
    "ShardMapStore",
    "Table",
    "TableGcStats",
    "TableOptions",
    "TableSnapshot",
    "ingest_prefix",
    "route",
]
