"""Overwrite and rescale runs that stall or race (docs/overwrite.md): step 1 looks before it opens a
writer and again after being fenced, a run whose fence meets a destroyed or retired source reports
the op's outcome, and racing attempts of one commit ingest each target once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import DatabaseDestroyed, Fenced, SlateDBError
from slatedb_core.gc.service import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN
from slatedb_core.table.overwrite import commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS
from tests.table.overwrite_steps import (
    NEW,
    assert_map_is_live,
    commit_concurrently,
    commit_in_thread,
    contents,
    old_table,
    release_and_expect_the_swap,
    stage,
)

GC_NOW = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))


@pytest.mark.parametrize("stall", ["01", "02"])
def test_a_stale_commit_attempt_does_not_rebuild_a_target_emptied_after_the_swap(
    mem: ObjectStore,
    stall: str,
) -> None:
    """Attempt B of a commit (a driver's retry) reads the map before any attempt sealed, then
    stalls creating target 0 (manifest 01: before step 1 looks at it) or opening its writer
    (manifest 02: after it looked, found it empty and the map fresh). Attempt A commits the
    whole overwrite. A user deletes every row of the new shard 0 and a compaction drops the
    tombstones: its manifest holds nothing. B then goes on: the target "holds no data", so B
    used to open a writer on the live shard (fencing its writer) and ingest the staged SSTs
    again: the deleted rows came back, and B reported WRITTEN. Fix: step 1 builds a target only
    if the map has the overwrite neither sealed nor committed, read before opening the writer
    and again after it fenced the target (docs/overwrite.md, step 1).

    Found by the session-26 review (was test_review_session26.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem):
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        target = plan.shards[0].db_path
        pp = faulty.pause("create", "put_if_absent", f"{target}/manifest/*{stall}.manifest")
        th, out = commit_in_thread(faulty, plan, staged)
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        shard0 = {k: v for k, v in NEW.items() if k < b"g"}
        with Table.open("t", mem, OPTS) as t, t.writer(0) as db:
            for k in shard0:
                db.delete(k)
            db.flush_memtable()
        run_compaction_once(target, mem, CompactorOptions(l0_trigger=1))
        m = ManifestStore(mem, target).read_latest().manifest
        assert not (m.l0 or m.compacted or m.transactions)  # the premise: nothing left
        release_and_expect_the_swap(pp, th, out)
        want = {k: v for k, v in NEW.items() if k not in shard0}
        assert contents(mem) == want
        assert_map_is_live(mem)
        with Table.open("t", mem, OPTS) as t, t.writer(0) as db:
            db.put(b"b0", b"after")  # the shard takes writes


@pytest.mark.parametrize("where", ["fence", "carry"])
def test_a_stalled_run_whose_sources_were_retired_and_collected_reports_the_swap(
    mem: ObjectStore, where: str
) -> None:
    """Attempt A of a commit seals, then stalls before fencing the first source ("fence") or
    after fencing them all, reading their records (step 4, "carry"). Attempt B runs the op to
    the end; the database GC (db_delete_grace 0) then deletes the retired sources, leaving their
    tombstones. A must report WRITTEN, the overwrite committed.

    Found by the session-26 review (was test_review_session26.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("job", 4))
        staged = stage(mem, plan, "r", NEW)
        sources = [s.db_path for s in t.shards]
        if where == "fence":
            pp = faulty.pause("p", "put_if_absent", f"{sources[0]}/manifest/*")
        else:  # once sealed, the first read of a target is step 4's, after every fence
            sealed = faulty.pause("seal", "put_if_absent", "t/shardmap/*", when="after")
        th, out = commit_in_thread(faulty, plan, staged)
        if where == "carry":
            assert sealed.wait_reached(30)
            pp = faulty.pause("p", "get", f"{plan.shards[0].db_path}/*")
            sealed.release()
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        for path in sources:
            run_gc_once(path, mem, GC_NOW)
            with pytest.raises(DatabaseDestroyed):
                ManifestStore(mem, path).read_latest()
        release_and_expect_the_swap(pp, th, out)
        assert contents(mem) == NEW
        assert_map_is_live(mem)


def test_a_pending_split_whose_source_someone_else_destroyed_is_not_reported_done(
    mem: ObjectStore,
) -> None:
    """Held: a split sealed, then its run died before cloning; an operator destroys the source
    shard's database (soft). Table.resume() meets the destroyed source,
    re-reads the map, finds the op still pending and raises DatabaseDestroyed: it does not
    report the split done, and the map keeps the op (nothing claims the split happened).

    Found by the session-26 review (was test_review_session26.py)."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as t0, t0.writer(0) as db:
        db.put(b"a", b"1")
    t = Table.open("t", faulty, OPTS)
    faulty.fail_next("put_if_absent", "t/shards/0000000003/manifest/*", times=50)
    with pytest.raises(SlateDBError):
        t.split(0, b"f")
    faulty.clear_rules()
    t.close()
    source = ShardMapStore(mem, "t").read_latest().shards[0].db_path
    destroy(source, mem, soft=True)
    with Table.open("t", mem, OPTS) as other:
        with pytest.raises(DatabaseDestroyed):
            other.resume()
        m = ShardMapStore(mem, "t").read_latest()
        assert m.pending and len(m.shards) == 2 and m.shards[0].db_path == source


def test_racing_attempts_of_one_commit_ingest_each_target_once(mem: ObjectStore) -> None:
    """Held: four attempts of one commit at once (step 1 retried after fences, looking before
    and after opening each target's writer). None reports a wrong outcome, and every target's L0
    holds its staged SSTs once (the ingest commits under the writer's fence, and a writer
    opened after another attempt's ingest sees its data).

    Found by the session-26 review (was test_review_session26.py)."""
    with old_table(mem):
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        outs = commit_concurrently(mem, plan, staged, 4)
        # runs of one pending op may fence each other out (docs/overwrite.md, "What is not
        # covered"): a failure, never a wrong outcome
        assert all(o == [WRITTEN] * 3 or isinstance(o, Fenced) for o in outs), outs
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        assert_map_is_live(mem)
        for target in plan.shards:
            m = ManifestStore(mem, target.db_path).read_latest().manifest
            assert len(m.l0) == len(staged.get(target.index, [])) and not m.compacted
        assert contents(mem) == NEW
