"""The figures of a table's shards read from their manifests and SST metadata, never a scan
(``slatedb table stats``; issue 40, item 4).

Per shard: the latest manifest's id and writer epoch, SSTs and their bytes, L0 SSTs, sorted runs,
the WAL backlog (:mod:`slatedb_core.health`), and an *approximate* row count: the entries the
SSTs record (``SstInfo.entry_count``, ours; for an SST SlateDB wrote, the puts, deletes and
merges of its stats block, one ranged read of its footer), pro-rated to the database's key range
when it is a projection sharing its parent's SSTs (as :func:`~slatedb_core.health.range_bytes`
pro-rates bytes). Every version, tombstone and merge operand counts until compaction drops it,
and rows still only in the WAL do not count: the exact figure is ``Table.count`` (a scan).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from slatedb_core.errors import ObjectNotFound
from slatedb_core.health import DatabaseHealth, inspect_database, range_bytes
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.model import CompactedSst, Manifest
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import Shard

__all__ = ["ShardStats", "approximate_rows", "shard_stats", "table_stats"]

_FOOTER_READS = 16
"""Concurrent footer reads of SSTs whose manifest entry records no entry count."""


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard's figures at its database's latest manifest."""

    shard: Shard
    health: DatabaseHealth
    approximate_rows: int
    """SST entries in the shard's key range (see the module docstring): an upper bound on its
    live keys once the WAL is flushed."""
    unreadable_ssts: int
    """SSTs whose entry count could be learnt from neither the manifest nor the SST (gone)."""


def _entries(store: ObjectStore, db_path: str, manifest: Manifest, sst: CompactedSst) -> int:
    """The entries of ``sst``: the manifest's count (ours), else its stats block's; -1 if the
    object is gone."""
    if sst.info.entry_count:
        return sst.info.entry_count
    try:
        return SstReader.open(store, resolve_sst_path(db_path, manifest, sst)).entry_count
    except ObjectNotFound:
        return -1


def approximate_rows(store: ObjectStore, db_path: str, manifest: Manifest) -> tuple[int, int]:
    """(approximate rows, SSTs unreadable) of a database's manifest: see the module docstring.
    One request per SST SlateDB wrote (its footer), none for ours."""
    unknown = [s for s in manifest.ssts if not s.info.entry_count]
    if unknown:
        with ThreadPoolExecutor(min(_FOOTER_READS, len(unknown))) as pool:
            found = dict(
                zip(
                    (s.id for s in unknown),
                    pool.map(lambda s: _entries(store, db_path, manifest, s), unknown),
                    strict=True,
                )
            )
    else:
        found = {}
    bounded = KeyRange.of(manifest.key_range) != KeyRange()
    rows = 0.0
    for sst in manifest.ssts:
        entries = sst.info.entry_count or found[sst.id]
        if entries <= 0:
            continue
        n = float(entries)
        if bounded:  # the share of the SST inside the range, by the bytes estimate's proration
            whole = max(1, sst.info.estimated_size)
            n = n * range_bytes(dataclasses.replace(manifest, ssts=(sst,))) / whole
        rows += n
    return round(rows), sum(1 for v in found.values() if v < 0)


def shard_stats(store: ObjectStore, shard: Shard) -> ShardStats:
    """The figures of ``shard``'s database at its latest manifest (reads only)."""
    stored, health = inspect_database(store, shard.db_path)
    rows, unreadable = approximate_rows(store, shard.db_path, stored.manifest)
    return ShardStats(shard, health, rows, unreadable)


def table_stats(store: ObjectStore, shards: Sequence[Shard], workers: int = 4) -> list[ShardStats]:
    """:func:`shard_stats` of every shard, in order, ``workers`` shards at a time."""
    if len(shards) < 2 or workers < 2:
        return [shard_stats(store, s) for s in shards]
    with ThreadPoolExecutor(min(workers, len(shards))) as pool:
        return list(pool.map(lambda s: shard_stats(store, s), shards))
