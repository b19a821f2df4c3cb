"""A stale attempt never fences the writer of a live shard; a refused ingest whose fencing read is
fenced itself retries it (issue 37, known problem 7c, and its follow-ups).

An overwrite's commit (or a run of its pending replace) opens a writer on a target to build it
or to carry the exactly-once records into it. Two attempts can run at once (a driver's retry, an
operator's ``Table.resume()``): the faster one swaps the targets in, and a user then opens a
writer on a new shard. The stale attempt decided to open before the swap; its ``Db.open`` used
to bump the target's writer epoch afterwards, so the user's next write raised ``Fenced``. The
open is now conditional on the manifest the attempt checked (``Db.open(if_manifest_id=...)``):
a writer opened since makes it fail without bumping anything, and the attempt looks again.

The interleavings are made deterministic with :class:`FaultyStore` pause points: the stale
attempt parks right before it writes its epoch bump (after every check it makes), the other
attempt and the user's writer run through the real store, then the stale attempt goes on."""

from __future__ import annotations

import threading
import time

import pytest

from slatedb_core.errors import PreconditionFailed, ShardMapConflict
from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, table_app_versions
from slatedb_core.table.ingest import REFUSED, WRITTEN, commit_shard, plan_ingest
from slatedb_core.table.overwrite import abort_overwrite, commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import ShardMap, ShardMapStore
from slatedb_core.testing import FaultyStore, PausePoint
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, fill, in_thread
from tests.table.ingest_steps import by_shard, overwrite_dies_at, stage

OLD = {b"k%03d" % i: b"old%03d" % i for i in range(20)}
NEW = {b"k%03d" % i: b"new%03d" % i for i in range(0, 20, 2)}
MID = b"k010"


def manifest_name(db_path: str, manifest_id: int) -> str:
    return f"{db_path}/manifest/{manifest_id:020}.manifest"


def test_a_stale_overwrite_attempt_building_a_target_fences_no_writer_of_the_new_shard(
    mem: ObjectStore,
) -> None:
    """Issue 37, 7c (a): attempt B of an overwrite commit has checked that target 0 is unbuilt
    and the overwrite unsealed, and is about to open the target; attempt A builds, seals and
    swaps in the targets, and a user opens the new shard's writer. B must not fence it."""
    with Table.create("t", mem, [], OPTS) as t:
        fill(t, OLD)
    plan = plan_overwrite("t", mem, job_id="job")
    staged = by_shard(stage(mem, plan, NEW))
    target0 = plan.shards[0].db_path
    faulty = FaultyStore(mem)
    # B creates the target (manifest 1), checks it, then its open bumps the epoch as manifest 2
    pause = faulty.pause("stale", "put_if_absent", manifest_name(target0, 2))
    th, out = in_thread(lambda: commit_overwrite(faulty, plan, "b", staged))
    try:
        assert pause.wait_reached()
        assert {s.status for s in commit_overwrite(mem, plan, "a", staged)} == {WRITTEN}
        with Table.open("t", mem, OPTS) as t:
            assert [s.db_path for s in t.shards] == [target0]
            writer = t.writer(0)
            writer.put(b"user1", b"u1")
    finally:
        pause.release()
        th.join()
    (result,) = out
    assert not isinstance(result, BaseException), result
    assert {s.status for s in result} == {WRITTEN}
    try:
        writer.put(b"user2", b"u2")  # Fenced before the fix
    finally:
        writer.close()
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == {**NEW, b"user1": b"u1", b"user2": b"u2"}


def test_a_second_run_of_a_replace_carrying_records_fences_no_writer_of_a_swapped_in_target(
    mem: ObjectStore,
) -> None:
    """Issue 37, 7c (b): the overwrite's first commit stopped after the seal; run R2 of its
    pending replace (``Table.resume()``) is about to open target 0 to carry the sources' records
    into it when run R1 finishes the replace and a user opens the new shard's writer. R2 must
    not fence it, and it reports the replace done."""
    with Table.create("t", mem, [MID], OPTS) as t:
        fill(t, OLD)
        source0 = t.shards[0].db_path
    earlier = plan_ingest("t", mem, txn=AppVersion("loader", 1))  # records to carry
    for shard in earlier.shards:
        commit_shard(mem, earlier, "run", shard, [])
    plan = plan_overwrite("t", mem)
    staged = by_shard(stage(mem, plan, NEW))
    overwrite_dies_at(mem, plan, staged, f"{source0}/manifest/*")  # at the fence
    target0 = plan.shards[0].db_path
    built = ManifestStore(mem, target0).read_latest().id
    faulty = FaultyStore(mem)
    with Table.open("t", faulty, OPTS) as stale:
        assert stale.shard_map.pending  # sealed, not swapped
        pause = faulty.pause("stale", "put_if_absent", manifest_name(target0, built + 1))
        th, out = in_thread(stale.resume)
        try:
            assert pause.wait_reached()
            with Table.open("t", mem, OPTS) as t:
                t.resume()
                assert [s.db_path for s in t.shards] == [s.db_path for s in plan.shards]
                writer = t.writer(0)
                writer.put(b"k001", b"user1")
        finally:
            pause.release()
            th.join()
    (result,) = out
    assert isinstance(result, ShardMap), result
    assert [s.db_path for s in result.shards] == [s.db_path for s in plan.shards]
    try:
        writer.put(b"k003", b"user2")  # Fenced before the fix
    finally:
        writer.close()
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == {**NEW, b"k001": b"user1", b"k003": b"user2"}
    assert table_app_versions(mem, "t", "loader") == {0: 1, 1: 1}


def test_a_refused_commit_whose_fencing_read_is_fenced_by_the_rescale_still_reports_refused(
    mem: ObjectStore,
) -> None:
    """Item 3 of the 7c follow-ups: an ingest planned before a merge commits shard 0 after the
    merge sealed it; to read its own checkpoint as of a fence, the refused commit opens shard
    0's writer, and the merge's fencing writer opens while that one sits between its epoch bump
    and its fence. The refused commit's open raised ``Fenced`` out of ``commit_shard``; it now
    retries (the shared open-with-Fenced-retry of slatedb_core.table.writers)."""
    with Table.create("t", mem, [MID], OPTS) as t:
        fill(t, OLD)
        source0 = t.shards[0].db_path
    plan = plan_ingest("t", mem, job_id="late")  # routes by the map before the merge
    shard0 = plan.shards[0]
    rescale_store, ingest_store = FaultyStore(mem), FaultyStore(mem)
    with Table.open("t", rescale_store, OPTS) as t:
        # the merge has sealed the map and waits before its fencing writer's epoch bump
        sealed = rescale_store.pause("sealed", "put_if_absent", f"{source0}/manifest/*")
        merge, merged = in_thread(lambda: t.merge(0))
        # the refused commit's writer waits between its epoch bump and its fence
        between = ingest_store.pause("between", "list", f"{source0}/wal*")
        try:
            assert sealed.wait_reached()
            late, stats = in_thread(lambda: commit_shard(ingest_store, plan, "run", shard0, []))
            assert between.wait_reached()
            sealed.release()
            merge.join()
        finally:
            sealed.release()
            between.release()
            merge.join()
        late.join()
    (result,) = merged
    assert isinstance(result, ShardMap), result
    assert len(result.shards) == 1
    (refused,) = stats
    assert not isinstance(refused, BaseException), refused  # Fenced before the fix
    assert refused.status == REFUSED and "ShardMapConflict" in refused.message
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == OLD


def test_a_conditional_open_on_a_manifest_that_changed_fences_no_writer(mem: ObjectStore) -> None:
    """The primitive under the fixes above: ``Db.open(if_manifest_id=n)`` bumps the writer epoch
    only on top of manifest ``n``; once a writer opened after ``n`` was read it fails, and that
    writer goes on writing."""
    with Db.open("db", mem) as first:
        first.put(b"a", b"1")
    checked = ManifestStore(mem, "db").read_latest().id
    with Db.open("db", mem) as live:
        with pytest.raises(PreconditionFailed):
            Db.open("db", mem, if_manifest_id=checked)
        live.put(b"b", b"2")  # not fenced
        assert ManifestStore(mem, "db").read_latest().id > checked
    current = ManifestStore(mem, "db").read_latest().id  # after the close, which commits too
    with Db.open("db", mem, if_manifest_id=current) as db:  # unchanged since read: opens
        assert db.get(b"a") == b"1" and db.get(b"b") == b"2"


def test_a_stale_overwrite_attempt_refused_by_a_pending_merge_destroys_no_swapped_in_target(
    mem: ObjectStore,
) -> None:
    """A sibling of 7c (a): attempt B of an overwrite commit read the map while a merge held the
    shards, so it gives up and destroys the targets; meanwhile the merge is refused (a batch
    reached one shard only), attempt A commits the overwrite and a user writes to a new shard.
    B must leave the targets alone (they are the table now) and report the overwrite
    committed."""
    with Table.create("t", mem, [MID], OPTS) as t:
        fill(t, OLD)
        source0 = t.shards[0].db_path
    half = plan_ingest("t", mem, txn=AppVersion("loader", 1))
    plan = plan_overwrite("t", mem, job_id="job")
    staged = by_shard(stage(mem, plan, NEW))
    target0 = plan.shards[0].db_path
    rescale_store, stale_store = FaultyStore(mem), FaultyStore(mem)
    with Table.open("t", rescale_store, OPTS) as t:
        sealing = rescale_store.pause("sealing", "put_if_absent", "t/shardmap/*")
        sealed = rescale_store.pause("sealed", "put_if_absent", f"{source0}/manifest/*")
        merge, merged = in_thread(lambda: t.merge(0))
        discarding = stale_store.pause("discarding", "get", f"{target0}/manifest/*")
        try:
            # the batch reaches shard 0 only after the merge compared the records unfenced
            # (they agreed) and before its seal: its look under the fence refuses it
            assert sealing.wait_reached()
            commit_shard(mem, half, "run", half.shards[0], [])
            sealing.release()
            assert sealed.wait_reached()
            th, out = in_thread(lambda: commit_overwrite(stale_store, plan, "b", staged))
            assert discarding.wait_reached()
            sealed.release()
            merge.join()
            assert {s.status for s in commit_overwrite(mem, plan, "a", staged)} == {WRITTEN}
            with Table.open("t", mem, OPTS) as live:
                writer = live.writer(0)
                writer.put(b"k001", b"user1")
        finally:
            sealing.release()
            sealed.release()
            discarding.release()
            merge.join()
        th.join()
    try:
        writer.put(b"k003", b"user2")  # DatabaseDestroyed before the fix
    finally:
        writer.close()
    with Table.open("t", mem, OPTS) as t:
        assert dict(t.scan()) == {**NEW, b"k001": b"user1", b"k003": b"user2"}
    (refused,) = merged
    assert isinstance(refused, BaseException) and "refused" in str(refused), refused
    (result,) = out
    assert not isinstance(result, BaseException), result  # ShardMapConflict before the fix
    assert {s.status for s in result} == {WRITTEN}


def _run_until_paused_or_done(pause: PausePoint, th: threading.Thread) -> None:
    """Wait until ``th`` parks at ``pause`` or ends (which run gets where first is the
    protocol's choice; the test only fixes the interleaving it allows)."""
    deadline = time.monotonic() + 30
    while th.is_alive() and not pause.wait_reached(0.02):
        assert time.monotonic() < deadline, "neither paused nor done"


def _assert_table_whole(store: ObjectStore, committed: bool) -> None:
    """The table reads the new rows if the overwrite committed, else the old ones, and takes a
    write on every shard (no shard is a destroyed database)."""
    with Table.open("t", store, OPTS) as t:
        assert dict(t.scan()) == (NEW if committed else OLD)
        for shard in t.shards:
            with t.writer(shard.index) as db:
                db.put(shard.key_range.start or b"k000", b"after")
                db.flush()


def test_an_abort_during_a_commit_between_its_live_check_and_its_swap_destroys_no_swapped_target(
    mem: ObjectStore,
) -> None:
    """Issue 37, review of cc661bd, hole D: the abort found the overwrite unsealed and is about
    to mark target 0 destroyed; attempt A seals, fences, checks every target live and is about
    to swap. Before the fix the abort destroyed target 0 and A swapped it in: the table's shard
    0 was a destroyed database. Now the abort first records the overwrite aborted in the map,
    which A's seal (or its swap, for an op the abort dropped) checks."""
    with Table.create("t", mem, [MID], OPTS) as t:
        fill(t, OLD)
    plan = plan_overwrite("t", mem, job_id="job")
    staged = by_shard(stage(mem, plan, NEW))
    overwrite_dies_at(mem, plan, staged, "t/shardmap/*", run="first")  # the seal: targets built
    target0 = plan.shards[0].db_path
    built = ManifestStore(mem, target0).read_latest().id
    latest = ShardMapStore(mem, "t").read_latest().id
    abort_store, commit_store = FaultyStore(mem), FaultyStore(mem)
    destroying = abort_store.pause("destroying", "put_if_absent", manifest_name(target0, built + 1))
    swapping = commit_store.pause(
        "swapping", "put_if_absent", f"t/shardmap/{latest + 2:020}.shardmap"
    )
    ab, aborted = in_thread(lambda: abort_overwrite(abort_store, plan))
    try:
        assert destroying.wait_reached()
        th, out = in_thread(lambda: commit_overwrite(commit_store, plan, "a", staged))
        _run_until_paused_or_done(swapping, th)
        destroying.release()
        ab.join()
    finally:
        destroying.release()
        swapping.release()
        ab.join()
    th.join()
    (result,) = out
    (abort_result,) = aborted
    committed = not isinstance(result, BaseException)
    if committed:
        assert isinstance(result, list) and {s.status for s in result} == {WRITTEN}
        assert isinstance(abort_result, ShardMapConflict) or abort_result is None
    else:
        assert isinstance(result, ShardMapConflict), result
        assert abort_result is None, abort_result
    _assert_table_whole(mem, committed)


def test_a_stale_discard_during_a_commit_between_its_live_check_and_its_swap_destroys_nothing(
    mem: ObjectStore,
) -> None:
    """Hole D, the stale discard: the targets are built (a first attempt died at its seal);
    attempt B read the map while a merge held the shards and is about to mark target 0
    destroyed (its check that the overwrite is unsealed passed); the merge is refused (a batch
    reached shard 1 only, so target 0 gets no records carried and nobody opens it), attempt A
    seals, checks every target live, and is about to swap. Before the fix B destroyed target 0
    and A swapped it in (B's own resume of the op came too late to cancel it)."""
    with Table.create("t", mem, [MID], OPTS) as t:
        fill(t, OLD)
        source0 = t.shards[0].db_path
    half = plan_ingest("t", mem, txn=AppVersion("loader", 1))
    plan = plan_overwrite("t", mem, job_id="job")
    staged = by_shard(stage(mem, plan, NEW))
    overwrite_dies_at(mem, plan, staged, "t/shardmap/*", run="first")  # the seal: targets built
    target0 = plan.shards[0].db_path
    built = ManifestStore(mem, target0).read_latest().id
    rescale_store, stale_store, commit_store = FaultyStore(mem), FaultyStore(mem), FaultyStore(mem)
    with Table.open("t", rescale_store, OPTS) as t:
        sealing = rescale_store.pause("sealing", "put_if_absent", "t/shardmap/*")
        sealed = rescale_store.pause("sealed", "put_if_absent", f"{source0}/manifest/*")
        merge, merged = in_thread(lambda: t.merge(0))
        destroying = stale_store.pause(
            "destroying", "put_if_absent", manifest_name(target0, built + 1)
        )
        try:
            # the batch reaches shard 1 only after the merge compared the records unfenced
            # (they agreed) and before its seal: its look under the fence refuses it
            assert sealing.wait_reached()
            commit_shard(mem, half, "run", half.shards[1], [])
            sealing.release()
            assert sealed.wait_reached()
            th_b, out_b = in_thread(lambda: commit_overwrite(stale_store, plan, "b", staged))
            _run_until_paused_or_done(destroying, th_b)
            sealed.release()
            merge.join()
            latest = ShardMapStore(mem, "t").read_latest().id
            swapping = commit_store.pause(
                "swapping", "put_if_absent", f"t/shardmap/{latest + 2:020}.shardmap"
            )
            th_a, out_a = in_thread(lambda: commit_overwrite(commit_store, plan, "a", staged))
            _run_until_paused_or_done(swapping, th_a)
            # B's discard goes on; it parks again when it next writes to a source (its resume
            # of the op it found sealed), before A swaps
            fencing = stale_store.pause("fencing", "put_if_absent", f"{source0}/manifest/*")
            destroying.release()
            _run_until_paused_or_done(fencing, th_b)
            swapping.release()
            th_a.join()
            fencing.release()
            th_b.join()
        finally:
            sealing.release()
            sealed.release()
            destroying.release()
            stale_store.release_all()
            commit_store.release_all()
            merge.join()
    (refused,) = merged
    assert isinstance(refused, BaseException) and "refused" in str(refused), refused
    (a,), (b,) = out_a, out_b
    committed = not isinstance(a, BaseException)
    if committed:
        assert isinstance(a, list) and {s.status for s in a} == {WRITTEN}
        assert isinstance(b, list) and {s.status for s in b} == {WRITTEN}, b
    else:
        assert isinstance(a, ShardMapConflict), a
        assert isinstance(b, ShardMapConflict), b
    _assert_table_whole(mem, committed)
