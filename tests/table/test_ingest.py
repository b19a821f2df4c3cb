"""The batch ingest of a sharded table without Spark: staging SSTs, the exactly-once per-shard
commit (done markers and the checkpoint committed with the SSTs), the run's cleanup and the
leftovers' GC (slatedb_core.table.ingest)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.errors import Fenced, InjectedFault
from slatedb_core.layout import (
    ingest_checkpoint_name,
    ingest_dir,
    ingest_done_marker,
    ingest_plan_record,
    ingest_staging_dir,
)
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    REFUSED,
    SKIPPED,
    WRITTEN,
    IngestPlan,
    StagedSst,
    attempt_dir,
    collect_leftovers,
    commit_shard,
    delete_staging,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.testing import FaultyStore


@pytest.fixture
def local(tmp_path: Path) -> ObjectStore:
    """A local store: staging hands the encoder's scratch memory to the store uncopied, which a
    ``memory://`` store would keep a reference to."""
    return open_store((tmp_path / "store").as_uri())


def rows(keys: list[bytes], value: bytes = b"v") -> list[pa.RecordBatch]:
    values = pa.array([value] * len(keys), pa.binary())
    return [pa.record_batch([pa.array(keys, pa.binary()), values], ["key", "value"])]


def stage(store: ObjectStore, plan: IngestPlan, run_id: str, value: bytes) -> list[StagedSst]:
    directory = attempt_dir(plan, run_id, partition=0, attempt=0)
    return list(
        stage_ssts(store, plan, directory, 0, rows([b"a", b"b", b"x", b"y"], value), partition=0)
    )


def sources(staged: list[StagedSst], shard_index: int) -> list[str]:
    return [s.path for s in staged if s.shard.index == shard_index]


def test_each_shard_is_committed_once_per_job(local: ObjectStore) -> None:
    Table.create("t", local, [b"m"]).close()
    plan = plan_ingest("t", local, job_id="job")
    staged = stage(local, plan, "run-1", b"1")
    assert {s.shard.index for s in staged} == {0, 1}
    assert all(s.path.startswith(ingest_staging_dir("t", "job", "run-1") + "/") for s in staged)
    shard0, shard1 = plan.shards
    first = commit_shard(local, plan, "run-1", shard0, sources(staged, 0), attempt=0)
    assert first.status == WRITTEN and first.rows == 2 and first.ssts == 1
    assert local.exists(ingest_done_marker("t", "job", shard0.shard_id))
    # the checkpoint committed with the SSTs is dropped once the marker is written
    assert ingest_checkpoints(local, shard0.db_path) == []
    # a retry of the same run reports the commit the marker records, writing nothing
    again = commit_shard(local, plan, "run-1", shard0, sources(staged, 0), attempt=1)
    assert again.status == WRITTEN and again.attempt == 0 and again.rows == 2
    assert again.manifest_id == first.manifest_id
    # another run of the same job (a zombie) finds the marker and writes nothing
    later = stage(local, plan, "run-2", b"2")
    zombie = commit_shard(local, plan, "run-2", shard0, sources(later, 0))
    assert zombie.status == SKIPPED
    assert commit_shard(local, plan, "run-2", shard1, sources(later, 1)).status == WRITTEN
    with Table.open("t", local) as t:
        assert t.get(b"a") == b"1" and t.get(b"x") == b"2"


def test_a_shard_a_rescale_replaced_is_refused(local: ObjectStore) -> None:
    with Table.create("t", local, [b"m"]) as t:
        plan = plan_ingest("t", local)
        staged = stage(local, plan, "run", b"1")
        t.split(0, b"c")
    out = commit_shard(local, plan, "run", plan.shards[0], sources(staged, 0))
    assert out.status == REFUSED and "ShardMapConflict" in out.message
    assert not local.exists(ingest_done_marker("t", plan.job_id, plan.shards[0].shard_id))


def test_an_attempt_fenced_before_its_commit_fails_and_writes_no_marker(
    local: ObjectStore,
) -> None:
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local)
    staged = stage(local, plan, "run", b"1")
    shard = plan.shards[0]
    faulty = FaultyStore(local)
    # stalled while copying the staged SSTs, the attempt is fenced by a later one
    pause = faulty.pause("before-commit", "copy", "t/shards/*")
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            # the staged seqs: the sources are copied as they are (the stall is in the copy)
            commit_shard(
                faulty,
                plan,
                "run",
                shard,
                sources(staged, 0),
                seqs=[s.seq for s in staged if s.shard.index == 0],
            )
        except BaseException as e:
            errors.append(e)

    th = threading.Thread(target=attempt)
    th.start()
    assert pause.wait_reached()
    with Table.open("t", local) as t:
        t.writer(0).close()  # a later attempt opened the writer: ours is fenced
    faulty.release_all()
    th.join()
    assert len(errors) == 1 and isinstance(errors[0], Fenced)
    assert not local.exists(ingest_done_marker("t", plan.job_id, shard.shard_id))


def test_the_runs_cleanup_and_the_leftovers_gc(local: ObjectStore) -> None:
    Table.create("t", local, [b"m"]).close()
    plan = plan_ingest("t", local, job_id="job")
    staged = stage(local, plan, "run", b"1")
    commit_shard(local, plan, "run", plan.shards[0], sources(staged, 0))
    assert delete_staging(local, "t", "job", "run") == len(staged)
    assert not any(local.exists(s.path) for s in staged)
    left = [m.path for m in local.list(ingest_dir("t") + "/")]
    assert sorted(left) == [
        ingest_done_marker("t", "job", plan.shards[0].shard_id),
        ingest_plan_record("t", "job"),
    ]
    assert collect_leftovers(local, "t", timedelta(days=1)) == (0, 0)
    deleted, _ = collect_leftovers(local, "t", timedelta(0))
    assert deleted == 2 and list(local.list(ingest_dir("t") + "/")) == []


# ---- the commit's checkpoint: an attempt that stopped before its marker ----------------------
def ingest_checkpoints(store: ObjectStore, db_path: str) -> list[str | None]:
    return [c.name for c in list_checkpoints(db_path, store) if c.writer_epoch is None]


def test_another_run_finding_a_commit_without_its_marker_skips_the_shard(
    local: ObjectStore,
) -> None:
    """Run 1 commits the shard and stops before its marker; run 2 of the same job (a zombie, or
    the job run again) finds the commit's checkpoint: it writes no data, writes the marker for
    run 1's commit and drops the checkpoint."""
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    staged = stage(local, plan, "run-1", b"1")
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    faulty.fail_next("put_if_absent", marker)  # run 1 stops between its commit and its marker
    with pytest.raises(InjectedFault):
        commit_shard(faulty, plan, "run-1", shard, sources(staged, 0))
    assert ingest_checkpoints(local, shard.db_path) == [
        ingest_checkpoint_name("job", "run-1", shard.shard_id)
    ]
    with Table.open("t", local) as t:
        with t.writer(0) as db:
            db.put(b"a", b"later")  # written after run 1's commit
    later = stage(local, plan, "run-2", b"2")
    out = commit_shard(local, plan, "run-2", shard, sources(later, 0))
    assert out.status == SKIPPED and out.rows == 0
    assert local.exists(marker) and ingest_checkpoints(local, shard.db_path) == []
    with Table.open("t", local) as t:
        assert t.get(b"a") == b"later" and t.get(b"b") == b"1"


def test_a_checkpoint_left_beside_its_marker_is_dropped_by_the_next_attempt(
    local: ObjectStore,
) -> None:
    """An attempt that wrote its marker and failed to drop its checkpoint: the next attempt
    reports the commit from the marker and drops the checkpoint (it pins a manifest)."""
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    staged = stage(local, plan, "run", b"1")
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    pause = faulty.pause("marker", "put_if_absent", marker, when="after")
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            # the staged seqs: the sources are copied as they are (the stall is in the copy)
            commit_shard(
                faulty,
                plan,
                "run",
                shard,
                sources(staged, 0),
                seqs=[s.seq for s in staged if s.shard.index == 0],
            )
        except BaseException as e:
            errors.append(e)

    th = threading.Thread(target=attempt)
    th.start()
    assert pause.wait_reached()  # the marker is written; the checkpoint's drop comes next
    # every retry of the drop's manifest update fails
    faulty.fail_next("put_if_absent", f"{shard.db_path}/manifest/*", times=1000)
    pause.release()
    th.join()
    assert len(errors) == 1 and isinstance(errors[0], InjectedFault)
    assert local.exists(marker)
    assert ingest_checkpoints(local, shard.db_path) == [
        ingest_checkpoint_name("job", "run", shard.shard_id)
    ]
    again = commit_shard(local, plan, "run", shard, sources(staged, 0), attempt=1)
    assert (again.status, again.attempt, again.rows) == (WRITTEN, 0, 4)
    assert ingest_checkpoints(local, shard.db_path) == []
