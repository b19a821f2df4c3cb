"""A sharded table's own garbage, besides its shard databases (collected by the database GC,
docs/gc-and-boundaries.md): shard-map versions (:meth:`ShardMapStore.collect
<slatedb_core.table.shardmap.ShardMapStore.collect>`), old versions of named snapshots' records
(:func:`slatedb_core.table.named_snapshots.collect_snapshot_records`) and what batch ingest jobs
leave under the table's root (:func:`slatedb_core.table.ingest.collect_leftovers`), and the target
databases of overwrites that were cancelled, or whose driver died before their seal
(:func:`collect_overwrite_leftovers`, docs/overwrite.md, "Leftovers")."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.gc.staged import STAGED_MIN_AGE_S
from slatedb_core.layout import INGEST_DIR, SHARDMAP_DIR, SNAPSHOTS_DIR, join
from slatedb_core.options import check_duration
from slatedb_core.table.ingest import collect_leftovers
from slatedb_core.table.named_snapshots import collect_snapshot_records, sweep_snapshot_leftovers
from slatedb_core.table.rescale import destroy_cancelled_targets
from slatedb_core.table.shardmap import (
    CANCELLED,
    OverwriteOutcome,
    ShardMap,
    ShardMapStore,
    with_overwrite_outcome,
)

log = logging.getLogger(__name__)

__all__ = ["TableGcStats", "collect_overwrite_leftovers", "collect_table_garbage"]


@dataclass(frozen=True)
class TableGcStats:
    """What :meth:`Table.collect_garbage <slatedb_core.table.table.Table.collect_garbage>`
    deleted."""

    shard_maps: int = 0
    """Shard-map versions."""
    ingest_objects: int = 0
    """Leftovers of ingest jobs under ``<table>/_ingest/``."""
    ingest_bytes: int = 0
    snapshot_records: int = 0
    """Old versions of named snapshots' records."""
    snapshot_checkpoints: int = 0
    """Shard checkpoints that dead creators of named snapshots left (deleted from the shards'
    manifests, not objects: not counted in :attr:`deleted`)."""
    overwrite_targets: int = 0
    """Target databases of cancelled or abandoned overwrites, destroyed (databases, not
    objects: not counted in :attr:`deleted`)."""
    staged_files: int = 0
    """Staged files crashed local-disk creates left in the table's own folders (shard maps,
    ingest staging, snapshot records; :mod:`slatedb_core.gc.staged`): no objects, not counted
    in :attr:`deleted`. Each shard database's GC sweeps its own folder."""
    staged_bytes: int = 0

    @property
    def deleted(self) -> int:
        return self.shard_maps + self.ingest_objects + self.snapshot_records


def collect_table_garbage(
    maps: ShardMapStore, min_age: timedelta, ingest_min_age: timedelta
) -> TableGcStats:
    """Shard-map versions and named snapshots' record versions older than ``min_age`` (never a
    latest one), behind their GC boundaries; ingest leftovers older than ``ingest_min_age`` (see
    ``collect_leftovers``); named snapshots' leftover checkpoints (``sweep_snapshot_leftovers``,
    by their own SWEEP_MIN_AGE); the targets of cancelled overwrites, and of overwrites reserved
    more than ``ingest_min_age`` ago and never sealed (:func:`collect_overwrite_leftovers`);
    staged files of crashed local-disk creates in the table's own folders, untouched for
    ``min_age`` and at least an hour (:mod:`slatedb_core.gc.staged`)."""
    check_duration("min_age", min_age, allow_zero=True)
    check_duration("ingest_min_age", ingest_min_age, allow_zero=True)
    targets = collect_overwrite_leftovers(maps, ingest_min_age)
    deleted, freed = collect_leftovers(maps.store, maps.table_path, ingest_min_age)
    collected = maps.collect(min_age)
    records = collect_snapshot_records(maps.store, maps.table_path, min_age)
    swept = sweep_snapshot_leftovers(maps)
    older_than_s = max(min_age.total_seconds(), STAGED_MIN_AGE_S)
    staged_files = staged_bytes = 0
    for folder in (SHARDMAP_DIR, INGEST_DIR, SNAPSHOTS_DIR):
        files, size = maps.store.sweep_staged(
            join(maps.table_path, folder), older_than_s=older_than_s, now_s=time.time()
        )
        staged_files += files
        staged_bytes += size
    return TableGcStats(
        shard_maps=collected,
        ingest_objects=deleted,
        ingest_bytes=freed,
        snapshot_records=records,
        snapshot_checkpoints=swept,
        overwrite_targets=targets,
        staged_files=staged_files,
        staged_bytes=staged_bytes,
    )


def collect_overwrite_leftovers(maps: ShardMapStore, min_age: timedelta) -> int:
    """Destroy the target databases overwrites left outside the map; returns how many.

    1. Cancel, in one map commit, every overwrite whose reservation
       (:class:`~slatedb_core.table.shardmap.Reservation`) is older than ``min_age`` (the
       ingest retention), that no pending op names and that has no outcome: its driver died
       between its plan and its seal (or still runs, later than the retention allows). The
       commit records it cancelled, as ``abort_overwrite`` does, and only if no seal came
       first; a seal refuses an overwrite with an outcome, both checked atomically by the
       versioned map update, so no attempt ever seals or swaps in a target destroyed here. A
       job still running past the age fails at its seal (ShardMapConflict), as a running
       ingest job fails once its plan record is collected (``collect_leftovers``): keep the
       age above the longest job (the default 7 days).
    2. Destroy the targets of every cancelled overwrite the map still lists, then drop their
       reservations (:func:`~slatedb_core.table.rescale.destroy_cancelled_targets`): a cancel
       is final, so no age applies to those.

    A sealed overwrite (its replace pending) is ``Table.resume()``'s to finish, whatever its
    age: it is never cancelled here."""
    cutoff = time.time() - min_age.total_seconds()

    def cancel(cur: ShardMap) -> ShardMap | None:
        out = cur
        for r in cur.reservations:
            if r.cancelled or r.reserved_at > cutoff:
                continue
            named = {i for op in cur.pending for i, _ in op.targets}
            if named.intersection(r.shard_ids) or any(
                cur.by_id(i) is not None for i in r.shard_ids
            ):
                continue  # sealed: resume's; or swapped in (the swap drops it: cannot be)
            log.warning(
                "table %r: overwrite job %s, reserved %s and never sealed, is past the "
                "ingest retention: cancelled, its targets destroyed",
                maps.table_path,
                r.job_id,
                time.ctime(r.reserved_at),
            )
            out = with_overwrite_outcome(
                out, OverwriteOutcome(r.job_id, r.first_shard_id, CANCELLED)
            )
        return None if out is cur else dataclasses.replace(out, created_at=time.time())

    m = maps.update(cancel)
    _, destroyed = destroy_cancelled_targets(maps.store, maps, m)
    return destroyed
