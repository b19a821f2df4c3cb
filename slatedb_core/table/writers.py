"""Opening the writer of one shard of a sharded table: fence, *then* re-read the map.

Opening a shard's :class:`~slatedb_core.writer.db.Db` fences every earlier writer of that shard
(docs/manifest-and-fencing.md). Only then is the latest shard map read again, and a shard that is
gone or sealed by a split/merge is refused (:class:`~slatedb_core.errors.ShardMapConflict`)
before anything is written. That order is what makes rescaling safe: a rescale seals its source
shards before it fences them, so a writer either opened before the seal (and the rescale's fence
stops it) or sees the seal (see :mod:`slatedb_core.table.rescale`).
"""

from __future__ import annotations

from slatedb_core.errors import ShardMapConflict
from slatedb_core.options import DbOptions
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore
from slatedb_core.writer.db import Db

__all__ = ["check_live_shard", "open_shard_writer"]


def open_shard_writer(
    maps: ShardMapStore, shard: Shard, options: DbOptions
) -> tuple[Db, ShardMap]:
    """The fenced writer of ``shard`` and the latest map, read after fencing. ShardMapConflict,
    without writing anything, if that map no longer has the shard or a split/merge has sealed
    it: re-read the map and re-route."""
    check_live_shard(maps.read_latest(), shard)  # an early refusal; the check that counts: below
    db = Db.open(shard.db_path, maps.store, options)
    try:
        latest = maps.read_latest()
        check_live_shard(latest, shard)
    except BaseException:
        db.close()
        raise
    return db, latest


def check_live_shard(m: ShardMap, shard: Shard) -> None:
    """ShardMapConflict unless ``m`` has ``shard`` (same id, same database) and it is unsealed."""
    current = m.by_id(shard.shard_id)
    if current is None or current.db_path != shard.db_path:
        raise ShardMapConflict(
            f"shard {shard.shard_id} ({shard.db_path!r}) is no longer in shard map {m.id}; "
            "re-read the map and re-route"
        )
    if current.sealed:
        op = m.pending_for(shard.shard_id)
        what = "a rescale" if op is None else f"a {op.kind} ({op.op_id})"
        raise ShardMapConflict(
            f"shard {shard.shard_id} ({shard.db_path!r}) is sealed by {what} in shard map {m.id}; "
            "wait for it to finish (or Table.resume() a crashed one) and re-route"
        )
