"""Adversarial review of the write side of the Spark data source work (docs/overwrite.md,
docs/spark.md "Exactly-once batches"): table overwrite (plan, build, seal, fence, swap, retire)
under stalls, crashes, aborts, racing actors, GC at min_age 0 and damaged objects; exactly-once
batches under racing commits. Each test states the guarantee it checks; they all held unless the
docstring names a fix."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from slatedb_core.errors import ShardMapConflict, SlateDBError
from slatedb_core.manifest.model import AppVersion
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    REFUSED,
    SKIPPED,
    WRITTEN,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
    table_app_versions,
)
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS
from tests.table.overwrite_steps import (
    NEW,
    OLD,
    assert_map_is_live,
    batch,
    commit_concurrently,
    commit_in_thread,
    contents,
    gone,
    old_table,
    release_and_expect_the_swap,
    stage,
)


# ---- seqs: nothing the overwrite or a stream links shadows a later write ----------------------
def test_a_delete_after_an_overwrite_is_not_shadowed_by_the_linked_rows(mem: ObjectStore) -> None:
    """The targets' staged seqs (SEQ_GAP up) are linked as they are: a writer of the new shard
    must write above them, or a later delete/put would lose to the overwrite's row.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    with old_table(mem) as t:
        t.overwrite([batch(NEW)])
        with t.writer(0) as db:
            db.delete(b"c2")
            db.put(b"b7", b"after")
        t.refresh()
        assert t.get(b"c2") is None and t.get(b"b7") == b"after"
        with t.writer(0) as db:  # and once flushed, through a fresh writer
            db.flush_memtable()
    got = contents(mem)
    assert b"c2" not in got and got[b"b7"] == b"after"


# ---- crashes, aborts and retries around the seal -----------------------------------------------
@pytest.mark.parametrize("order", ["abort_then_resume", "resume_then_abort"])
def test_abort_and_resume_of_one_sealed_overwrite_never_leave_a_destroyed_shard(
    mem: ObjectStore,
    order: str,
) -> None:
    """A commit stopped after its seal; then abort (the Spark driver) and Table.resume (an
    operator) both act on it. Either the old contents stay (abort first: resume must not swap
    in the destroyed targets) or the new ones (resume first: abort keeps them).

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "r", staged)
        assert ShardMapStore(mem, "t").read_latest().pending
        if order == "abort_then_resume":
            abort_overwrite(mem, plan)
            t.resume()
            assert contents(mem) == OLD
        else:
            t.resume()
            abort_overwrite(mem, plan)
            assert contents(mem) == NEW
        assert_map_is_live(mem)
        assert not ShardMapStore(mem, "t").read_latest().pending


def test_abort_racing_a_resume_mid_swap_never_leaves_a_destroyed_shard(mem: ObjectStore) -> None:
    """resume() stalled right before its swap (the map commit) while abort drops the op and
    destroys the targets: the swap must then refuse, not commit destroyed targets.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "r", staged)
        faulty.clear_rules()
        pp = faulty.pause("swap", "put_if_absent", "t/shardmap/*")
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with Table.open("t", faulty, OPTS) as tf:
                    tf.resume()
            except BaseException as e:  # reported below
                errors.append(e)

        th = threading.Thread(target=run)
        th.start()
        assert pp.wait_reached(30)
        abort_overwrite(mem, plan)
        pp.release()
        th.join(60)
        assert not th.is_alive()
        assert [type(e) for e in errors] == [ShardMapConflict]
        assert contents(mem) == OLD
        assert_map_is_live(mem)


def test_concurrent_commits_of_one_overwrite_plan_never_report_a_wrong_outcome(
    mem: ObjectStore,
) -> None:
    """A driver retrying its commit while the first attempt still runs. They fence each other
    (a loser may fail with Fenced: the fence protocol of docs/overwrite.md, step 4, retries
    only TableOptions.fence_attempts times), but an attempt that returns reports the swap
    that happened, and resume() finishes whatever the failures left: one swap, no destroyed
    shard in the map.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("job", 4))
        staged = stage(mem, plan, "r", NEW)
        results = commit_concurrently(mem, plan, staged, 2)
        assert len(results) == 2
        for r in results:
            assert r == [WRITTEN] * 3 or isinstance(r, SlateDBError), results
        t.resume()
        assert contents(mem) == NEW
        assert_map_is_live(mem)
        assert set(table_app_versions(mem, "t", "job").values()) == {4}
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3


def test_a_commit_fenced_on_a_target_by_a_concurrent_attempt_reports_the_swap(
    mem: ObjectStore,
) -> None:
    """Attempt A parks just before ingesting into a target; attempt B (a retried commit) opens
    that target, which fences A, and finishes the whole overwrite. A must report what happened
    (WRITTEN), not fail. Fix: step 1 looks at the target again after being fenced on it; before
    it, two attempts fenced on different targets both failed before either sealed, and the
    table kept its old contents (seen once in CI in the racing test above).

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("job", 4))
        staged = stage(mem, plan, "r", NEW)
        target = plan.shards[0].db_path
        # the target's manifests: 1 created, 2 the writer's epoch, 3 the ingest
        pp = faulty.pause("ingest", "put_if_absent", f"{target}/manifest/*03.manifest")
        th, out = commit_in_thread(faulty, plan, staged)
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        release_and_expect_the_swap(pp, th, out)
        t.refresh()
        assert contents(mem) == NEW
        assert_map_is_live(mem)


def test_a_commit_whose_sources_a_concurrent_attempt_retired_reports_the_swap(
    mem: ObjectStore,
) -> None:
    """Attempt A seals, then parks before fencing the first source; attempt B finds the op
    pending, runs it to the end and soft-destroys the sources. A's fence then meets a destroyed
    source: that only happens once the op committed, so A reports WRITTEN. Fix: before it, A
    raised DatabaseDestroyed for an overwrite that had committed.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("job", 4))
        staged = stage(mem, plan, "r", NEW)
        source = t.shards[0].db_path
        pp = faulty.pause("fence", "put_if_absent", f"{source}/manifest/*")
        th, out = commit_in_thread(faulty, plan, staged)
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        assert gone(mem, source)
        release_and_expect_the_swap(pp, th, out)
        assert contents(mem) == NEW
        assert_map_is_live(mem)


def test_an_abort_while_the_commit_stalls_before_its_seal_cancels_the_commit(
    mem: ObjectStore,
) -> None:
    """FIXED. The commit built its targets and stalled before its seal; meanwhile the job was
    aborted (abort_overwrite from another process: the map shows nothing sealed, so it
    destroys the targets). The stalled commit then sealed, fenced and swapped the destroyed
    targets in, and reported WRITTEN: every shard of the table destroyed. Now the replace
    checks its targets after the fence and cancels; the commit raises ShardMapConflict and
    the table keeps its contents.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem):
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        pp = faulty.pause("seal", "put_if_absent", "t/shardmap/*")
        th, results = commit_in_thread(faulty, plan, staged)
        assert pp.wait_reached(30)
        abort_overwrite(mem, plan)
        pp.release()
        th.join(60)
        assert not th.is_alive()
        assert [type(r) for r in results] == [ShardMapConflict], results
        assert contents(mem) == OLD
        assert_map_is_live(mem)
        assert not ShardMapStore(mem, "t").read_latest().pending


def test_resume_cancels_a_pending_replace_whose_target_was_lost(mem: ObjectStore) -> None:
    """FIXED. A sealed overwrite (its driver died after the seal) whose target database was
    then lost (deleted by hand, a bucket lifecycle rule): resume() used to swap the missing
    database in (reads then fail: DatabaseNotFound). It cancels the replace instead.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        faulty.fail_next("put_if_absent", f"{t.shards[0].db_path}/manifest/*", times=50)
        with pytest.raises(SlateDBError):
            commit_overwrite(faulty, plan, "r", staged)
        lost = plan.shards[1].db_path
        for o in list(mem.list(lost + "/")):
            mem.delete(o.path)
        t.resume()
        assert contents(mem) == OLD
        assert_map_is_live(mem)
        with pytest.raises(SlateDBError):  # a retry of the cancelled commit: its targets are gone
            commit_overwrite(mem, plan, "r", staged)
        assert contents(mem) == OLD
        assert_map_is_live(mem)


def test_a_staged_sst_deleted_before_the_commit_fails_it_and_abort_restores(
    mem: ObjectStore,
) -> None:
    """A damaged stage (an SST gone before the commit): the commit fails before its seal (no
    target is swapped in with rows missing), and abort leaves the old contents, writable.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        mem.delete(staged[2][-1][0])
        with pytest.raises(SlateDBError):
            commit_overwrite(mem, plan, "r", staged)
        assert not ShardMapStore(mem, "t").read_latest().pending
        assert contents(mem) == OLD
        abort_overwrite(mem, plan)
        assert all(gone(mem, s.db_path) for s in plan.shards)
        # a commit of the aborted plan afterwards does not bring it back
        with pytest.raises(SlateDBError):
            commit_overwrite(mem, plan, "r", stage(mem, plan, "r2", NEW))
        assert contents(mem) == OLD
        assert_map_is_live(mem)
        t.refresh()
        with t.writer(2) as db:
            db.put(b"z9", b"x")


def test_gc_at_min_age_zero_during_an_overwrite(mem: ObjectStore) -> None:
    """GC with every age at zero between staging and commit, and again right after the swap:
    the commit either fails cleanly (its staged SSTs collected) or applies everything; a
    snapshot taken before the swap still reads the old contents.

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    zero = timedelta(0)
    with old_table(mem) as t:
        before = t.snapshot()
        with Table.open("t", mem, OPTS, snapshot=before) as old:
            seen = dict(old.scan())  # what the snapshot holds (no WAL-only writes: snapshot.py)
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        t.collect_garbage(min_age=zero, ingest_min_age=zero)
        try:
            commit_overwrite(mem, plan, "r", staged)
            assert contents(mem) == NEW
        except SlateDBError:
            abort_overwrite(mem, plan)
            assert contents(mem) == OLD
            plan = plan_overwrite("t", mem)
            commit_overwrite(mem, plan, "r2", stage(mem, plan, "r2", NEW))
        t.collect_garbage(min_age=zero, ingest_min_age=zero)
        assert contents(mem) == NEW
        assert_map_is_live(mem)
        with Table.open("t", mem, OPTS, snapshot=before) as old:
            assert dict(old.scan()) == seen
        t.release_snapshot(before)


# ---- racing writers: an append and an overwrite -----------------------------------------------
def test_an_append_planned_before_an_overwrite_is_refused_or_replaced_never_mixed(
    mem: ObjectStore,
) -> None:
    """An append job planned on the old map: committed before the seal its rows are replaced
    (the append comes before the overwrite); committed after the swap it is REFUSED. Its
    exactly-once record is carried into the targets whose sources it reached (issue 37, hole 1:
    each target only what its range had applied).

    Found by the adversarial review of the Spark write side (was test_review_write_side.py)."""
    with old_table(mem):
        early = plan_ingest("t", mem, txn=AppVersion("app", 1))
        late = plan_ingest("t", mem, txn=AppVersion("app", 2))
        ow = plan_overwrite("t", mem)
        ow_staged = stage(mem, ow, "o", NEW)
        for p, run in ((early, "e"), (late, "l")):
            d = attempt_dir(p, run, 0, 0)
            list(stage_ssts(mem, p, d, 0, [batch({b"a5": b"append"})], partition=0))
        ssts = [o.path for o in mem.list(f"t/_ingest/{early.job_id}/") if o.path.endswith(".sst")]
        st = commit_shard(mem, early, "e", early.shards[0], ssts)
        assert st.status == WRITTEN
        commit_overwrite(mem, ow, "o", ow_staged)
        ssts = [o.path for o in mem.list(f"t/_ingest/{late.job_id}/") if o.path.endswith(".sst")]
        st = commit_shard(mem, late, "l", late.shards[0], ssts)
        assert st.status == REFUSED
        assert contents(mem) == NEW
        # the early batch counts as applied where it was committed (before the overwrite)
        assert table_app_versions(mem, "t", "app") == {0: 1, 1: None, 2: None}
        again = plan_ingest("t", mem, txn=AppVersion("app", 1))
        d = attempt_dir(again, "x", 0, 0)
        staged = list(stage_ssts(mem, again, d, 0, [batch({b"a5": b"rerun"})], partition=0))
        st = commit_shard(mem, again, "x", again.shards[0], [s.path for s in staged])
        assert st.status == SKIPPED
        assert contents(mem) == NEW
