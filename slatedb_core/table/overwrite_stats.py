"""The statistics rows of an overwrite's commit (docs/overwrite.md): one
:class:`~slatedb_core.table.ingest.ShardIngestStats` per target shard, as a table ingest reports
its shards."""

from __future__ import annotations

import time
from collections.abc import Sequence

from slatedb_core.errors import ObjectNotFound
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.ingest import WRITTEN, IngestPlan, ShardIngestStats
from slatedb_core.table.shardmap import Shard


def built_earlier(
    store: ObjectStore,
    target: Shard,
    sources: Sequence[tuple[str, int]],
    started: float,
    epoch: int,
    manifest_id: int,
) -> ShardIngestStats:
    """The row of a target an earlier (or a concurrent) attempt built: what its staged SSTs
    hold."""
    return shard_stats(
        target,
        WRITTEN,
        "built by an earlier attempt",
        started,
        epoch=epoch,
        manifest_id=manifest_id,
        **counts(store, [p for p, _ in sources]),
    )


def counts(store: ObjectStore, paths: Sequence[str]) -> dict[str, int]:
    """Rows, SSTs and bytes of the staged SSTs still there (as Db.ingest_ssts counts them);
    one that another attempt's cleanup deletes meanwhile counts as gone (statistics only)."""
    rows = ssts = size = 0
    for p in paths:
        try:
            info = SstReader.open(store, p).info
        except ObjectNotFound:
            continue
        if info.entry_count > 0:
            rows, ssts, size = rows + info.entry_count, ssts + 1, size + info.size_bytes
    return {"rows": rows, "ssts": ssts, "bytes": size}


def shard_stats(
    target: Shard,
    status: str,
    message: str,
    started: float,
    *,
    rows: int = 0,
    ssts: int = 0,
    bytes: int = 0,
    manifest_id: int = 0,
    epoch: int = 0,
) -> ShardIngestStats:
    return ShardIngestStats(
        shard_index=target.index,
        shard_id=target.shard_id,
        db_path=target.db_path,
        status=status,
        message=message,
        rows=rows,
        ssts=ssts,
        bytes=bytes,
        manifest_id=manifest_id,
        writer_epoch=epoch,
        partition=-1,
        attempt=0,
        duration_s=time.monotonic() - started,
    )


def stats_all(
    plan: IngestPlan, status: str, message: str, started: float
) -> list[ShardIngestStats]:
    return [shard_stats(t, status, message, started) for t in plan.shards]
