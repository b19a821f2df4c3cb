"""An overwrite recorded cancelled whose target destroys did not run (issue 37, final review of
0efd947/dfb2e94).

An abort (or a stale attempt giving up) first commits a map version recording the overwrite
cancelled, then destroys its targets. A crash in between leaves the targets built and live, named
by no map. Two consequences:

- once OVERWRITES_KEPT later outcomes pushed the cancel out of the map's record, a late retry of
  the aborted plan found the overwrite "fresh" (no shard id at or above its targets': nothing
  committed since), found its targets built, sealed and swapped them in: the aborted overwrite
  replaced the table. Past the bound a retry now cannot tell "cancelled" from "still running"
  either, so it raises OverwriteTooOld (hole, fixed).
- nothing but a retry or an abort of the same plan ever destroyed those targets: ``Table.resume()``
  and the table GC left them, a whole copy of the new contents, for ever (a driver killed in
  between leaves no one to retry). The map now keeps each overwrite's reserved ids
  (``ShardMap.reservations``) until its targets are swapped in or, cancelled, destroyed: resume
  and the table GC destroy the targets of a cancelled one, then drop its reservation (fixed)."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta

import pytest

from slatedb_core.errors import (
    DatabaseDestroyed,
    InjectedFault,
    OverwriteTooOld,
    ShardMapConflict,
)
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import IngestPlan
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import (
    CANCELLED,
    OVERWRITES_KEPT,
    OverwriteOutcome,
    ShardMap,
    ShardMapStore,
)
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS, fill
from tests.table.ingest_steps import stage_value

OLD = {b"a": b"old", b"x": b"old"}


def _target_alive(store: ObjectStore, db_path: str) -> bool:
    try:
        stored = ManifestStore(store, db_path).try_read_latest()
    except DatabaseDestroyed:
        return False
    return stored is not None and stored.manifest.destroyed_at_s is None


def _aborted_with_live_targets(
    mem: ObjectStore,
) -> tuple[IngestPlan, dict[int, list[tuple[str, int]]]]:
    """A two-shard table holding OLD, and an overwrite of it whose commit failed before its seal
    (its targets built) and whose abort recorded it cancelled, then crashed before destroying
    any target."""
    with Table.create("t", mem, [b"m"], options=OPTS) as t:
        fill(t, OLD, flush=True)
    faulty = FaultyStore(mem)
    plan = plan_overwrite("t", mem)
    staged = stage_value(mem, plan, b"new")
    faulty.fail_next("put_if_absent", "t/shardmap/*", times=1000)  # every seal attempt fails
    with pytest.raises(InjectedFault):
        commit_overwrite(faulty, plan, "run", staged)
    faulty.clear_rules()
    for target in plan.shards:  # the abort dies after its map commit, before any destroy
        for op in ("put", "put_if_absent", "delete"):
            faulty.fail_next(op, target.db_path + "/*", times=1000)
    with pytest.raises(InjectedFault):
        abort_overwrite(faulty, plan)
    m = ShardMapStore(mem, "t").read_latest()
    recorded = m.overwrite_outcome(plan.shards[0].shard_id)
    assert recorded is not None and recorded.outcome == CANCELLED
    assert all(_target_alive(mem, s.db_path) for s in plan.shards)
    return plan, staged


def _push_out_outcomes(mem: ObjectStore) -> None:
    """OVERWRITES_KEPT later outcomes (as if that many overwrites were planned and aborted
    since), which push every earlier one out of the map's record; no shard changes."""
    base = ShardMapStore(mem, "t").read_latest().next_shard_id

    def many(cur: ShardMap) -> ShardMap:
        later = tuple(
            OverwriteOutcome(f"j{i}", base + i, CANCELLED) for i in range(OVERWRITES_KEPT)
        )
        return dataclasses.replace(
            cur,
            created_at=time.time(),
            next_shard_id=base + OVERWRITES_KEPT,
            overwrites=(*cur.overwrites, *later),
        )

    ShardMapStore(mem, "t").update(many)


def test_an_aborted_overwrite_pushed_out_of_the_record_is_never_committed_by_a_late_retry(
    mem: ObjectStore,
) -> None:
    plan, staged = _aborted_with_live_targets(mem)
    _push_out_outcomes(mem)
    with pytest.raises(OverwriteTooOld):
        commit_overwrite(mem, plan, "late", staged)
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == OLD
        assert all(s.shard_id not in {p.shard_id for p in plan.shards} for s in t.shards)


def test_resume_destroys_the_targets_a_crashed_cancel_left(mem: ObjectStore) -> None:
    plan, staged = _aborted_with_live_targets(mem)
    with Table.open("t", mem, OPTS) as t:
        t.resume()
        assert not any(_target_alive(mem, s.db_path) for s in plan.shards)
        assert ShardMapStore(mem, "t").read_latest().reservations == ()
        t.resume()  # nothing left to do
        t.refresh()
        assert dict(t.scan()) == OLD
    with pytest.raises(ShardMapConflict):  # still cancelled: a late retry commits nothing
        commit_overwrite(mem, plan, "late", staged)
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == OLD


def test_the_table_gc_destroys_the_targets_a_crashed_cancel_left(mem: ObjectStore) -> None:
    """A cancelled overwrite is final: the GC needs no age to destroy what it left (the default
    ``ingest_min_age`` of 7 days does not hold it back)."""
    plan, _ = _aborted_with_live_targets(mem)
    with Table.open("t", mem, OPTS) as t:
        stats = t.collect_garbage(min_age=timedelta(0))
        assert stats.overwrite_targets == len(plan.shards)
        assert dict(t.scan()) == OLD
    assert not any(_target_alive(mem, s.db_path) for s in plan.shards)
    assert ShardMapStore(mem, "t").read_latest().reservations == ()
