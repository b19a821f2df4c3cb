"""Targets an overwrite built but never sealed (its driver died between its build and its seal, and
nobody retried or aborted it) are destroyed by the table GC once older than the ingest retention
(issue 37, final review of 0efd947/ad31f76: they stayed for ever, a whole copy of the new rows).

``plan_overwrite`` records the ids it reserves in the map (``ShardMap.reservations``). The table
GC cancels a reservation older than ``ingest_min_age`` that no pending op names, in one map commit
(recording the overwrite cancelled, as an abort does), then destroys its targets and drops the
reservation. The age protects a slow job that is still running, as it protects an ingest job's
staged SSTs; a job older than the age fails at its seal (ShardMapConflict: cancelled) and never
swaps in a target the GC destroyed, because the cancel is committed first and a seal requires no
outcome, atomically."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from slatedb_core.errors import CorruptionError, DatabaseDestroyed, ShardMapConflict
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, IngestPlan, ShardIngestStats
from slatedb_core.table.overwrite import commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import (
    CANCELLED,
    Reservation,
    ShardMapStore,
    decode_shard_map,
    encode_shard_map,
)
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS, fill, in_thread
from tests.table.ingest_steps import by_shard, overwrite_dies_at, stage

OLD = {b"a": b"old", b"x": b"old"}
NEW = {b"a": b"new", b"k": b"new", b"x": b"new"}
ZERO = timedelta(0)


def _alive(store: ObjectStore, db_path: str) -> bool:
    try:
        stored = ManifestStore(store, db_path).try_read_latest()
    except DatabaseDestroyed:
        return False
    return stored is not None and stored.manifest.destroyed_at_s is None


def _table(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        fill(t, OLD, flush=True)


def _built_unsealed(mem: ObjectStore) -> tuple[IngestPlan, dict[int, list[tuple[str, int]]]]:
    """An overwrite of the two-shard table whose driver built every target and died before its
    seal (every seal attempt fails), leaving no one to retry or abort it."""
    _table(mem)
    plan = plan_overwrite("t", mem)
    staged = by_shard(stage(mem, plan, NEW))
    overwrite_dies_at(mem, plan, staged, "t/shardmap/*")
    assert all(_alive(mem, s.db_path) for s in plan.shards)
    return plan, staged


def test_the_table_gc_destroys_targets_a_dead_driver_never_sealed_once_past_the_retention(
    mem: ObjectStore,
) -> None:
    plan, staged = _built_unsealed(mem)
    first = plan.shards[0].shard_id
    with Table.open("t", mem, OPTS) as t:
        t.resume()  # not resume's: the job may still be running
        assert t.collect_garbage(ZERO, ingest_min_age=timedelta(hours=1)).overwrite_targets == 0
        assert all(_alive(mem, s.db_path) for s in plan.shards)  # younger than the retention
        stats = t.collect_garbage(ZERO, ingest_min_age=ZERO)
        assert stats.overwrite_targets == len(plan.shards)
        assert dict(t.scan()) == OLD
    assert not any(_alive(mem, s.db_path) for s in plan.shards)
    m = ShardMapStore(mem, "t").read_latest()
    assert m.reservations == ()
    recorded = m.overwrite_outcome(first)
    assert recorded is not None and recorded.outcome == CANCELLED
    with pytest.raises(ShardMapConflict, match="cancelled"):  # a late retry commits nothing
        commit_overwrite(mem, plan, "late", staged)
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == OLD


def _gc_while_sealing(
    mem: ObjectStore, ingest_min_age: timedelta | None
) -> tuple[IngestPlan, int, list[ShardIngestStats] | BaseException]:
    """The table GC (at ``ingest_min_age``, None: its default retention) runs while an
    overwrite's commit is parked between its build and its seal: the plan, the targets the GC
    destroyed, and what the commit returned or raised."""
    _table(mem)
    plan = plan_overwrite("t", mem)
    staged = by_shard(stage(mem, plan, NEW))
    faulty = FaultyStore(mem)
    sealing = faulty.pause("sealing", "put_if_absent", "t/shardmap/*")
    th, out = in_thread(lambda: commit_overwrite(faulty, plan, "run", staged))
    try:
        assert sealing.wait_reached()
        with Table.open("t", mem, OPTS) as t:
            gc = (
                t.collect_garbage(ZERO)
                if ingest_min_age is None
                else t.collect_garbage(ZERO, ingest_min_age=ingest_min_age)
            )
    finally:
        sealing.release()
        th.join()
    return plan, gc.overwrite_targets, out[0]


def test_a_running_overwrite_younger_than_the_retention_is_left_alone_by_the_gc(
    mem: ObjectStore,
) -> None:
    """The GC runs while the job's commit is parked between its build and its seal."""
    _, destroyed, result = _gc_while_sealing(mem, None)
    assert destroyed == 0
    assert not isinstance(result, BaseException), result
    assert {s.status for s in result} == {WRITTEN}
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == NEW
    assert ShardMapStore(mem, "t").read_latest().reservations == ()  # the swap dropped it


def test_a_job_older_than_the_retention_fails_at_its_seal_and_never_swaps_a_destroyed_target(
    mem: ObjectStore,
) -> None:
    """The contract of a short retention, as for ingest jobs: the running job fails, nothing of
    it is applied."""
    plan, destroyed, result = _gc_while_sealing(mem, ZERO)
    assert destroyed == 2
    assert isinstance(result, ShardMapConflict), result
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == OLD
    assert not any(_alive(mem, s.db_path) for s in plan.shards)


def test_the_gc_never_touches_a_sealed_overwrite_whatever_the_age(mem: ObjectStore) -> None:
    """A sealed overwrite is resume's to finish: the GC leaves its targets, and resume then
    swaps them in."""
    _table(mem)
    plan = plan_overwrite("t", mem)
    staged = by_shard(stage(mem, plan, NEW))
    source0 = ShardMapStore(mem, "t").read_latest().shards[0].db_path
    overwrite_dies_at(mem, plan, staged, f"{source0}/manifest/*")  # the fence dies
    assert ShardMapStore(mem, "t").read_latest().pending
    with Table.open("t", mem, OPTS) as t:
        assert t.collect_garbage(ZERO, ingest_min_age=ZERO).overwrite_targets == 0
        assert all(_alive(mem, s.db_path) for s in plan.shards)
        t.resume()
        assert dict(t.scan()) == NEW


def test_the_map_codec_keeps_reservations_and_refuses_overlapping_ones(mem: ObjectStore) -> None:
    _table(mem)
    plan = plan_overwrite("t", mem, job_id="job")
    m = ShardMapStore(mem, "t").read_latest()
    assert m.reservations == (
        Reservation("job", plan.shards[0].shard_id, 2, m.reservations[0].reserved_at),
    )
    cancelled = dataclasses.replace(m.reservations[0], cancelled=True)
    data = encode_shard_map(dataclasses.replace(m, reservations=(cancelled,)), "t")
    back = decode_shard_map(data, map_id=m.id, table_path="t", name="x")
    assert back.reservations == (cancelled,)
    second = cancelled.first_shard_id + 1
    overlapping = dataclasses.replace(cancelled, job_id="other", first_shard_id=second, count=1)
    data = encode_shard_map(dataclasses.replace(m, reservations=(cancelled, overlapping)), "t")
    with pytest.raises(CorruptionError, match="reservation"):
        decode_shard_map(data, map_id=m.id, table_path="t", name="x")
