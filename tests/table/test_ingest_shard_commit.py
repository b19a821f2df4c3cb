"""The per-shard ingest commit is exactly once (slatedb_core/table/ingest.py): a commit whose
shard is split or sealed before its done marker, an attempt stalled before its marker, and the GC
contract of the markers."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.errors import IngestJobExpired, SlateDBError
from slatedb_core.layout import ingest_done_marker
from slatedb_core.manifest.model import Checkpoint
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import (
    REFUSED,
    WRITTEN,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.testing import FaultyStore


def _batch(keys: list[bytes], value: bytes) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(keys, pa.binary()), pa.array([value] * len(keys), pa.binary())],
        ["key", "value"],
    )


def _ingest_cps(db_path: str, store: ObjectStore) -> list[Checkpoint]:
    return [c for c in list_checkpoints(db_path, store) if (c.name or "").startswith("ingest:")]


# ---- (a) ingest ----------------------------------------------------------------------------
def test_a_committed_shard_split_before_its_marker_is_settled_by_the_retry(
    tmp_path: Path,
) -> None:
    """Attempt A commits shard 0 (SSTs + checkpoint in one manifest update) and is lost before
    its marker. The shard is then split (a rescale). The retry B is refused by the shard map,
    but it finds A's checkpoint in the retired shard's manifest: it reports A's commit (so the
    job does not tell the user to re-run it), writes the marker and drops the checkpoint; a
    further retry ingests nothing, and a delete acknowledged after the split stays deleted.

    Found by the review of the per-shard ingest commit (was test_review_ingest_fixes.py)."""
    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    staged = list(
        stage_ssts(local, plan, attempt_dir(plan, "run", 0, 0), 0, [_batch([b"a", b"x"], b"1")])
    )
    shard = plan.shards[0]
    srcs = [s.path for s in staged]
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    pause = faulty.pause("before-marker", "put_if_absent", marker)
    th = threading.Thread(target=lambda: commit_shard(faulty, plan, "run", shard, srcs))
    th.daemon = True
    th.start()
    try:
        assert pause.wait_reached()  # A's commit landed; A is lost before its marker
        with Table.open("t", local) as t:
            assert t.get(b"a") == b"1"  # the shard WAS written by this job
            t.split(0, b"m")
        retry = commit_shard(local, plan, "run", shard, srcs, attempt=1)
        assert (retry.status, retry.rows, retry.ssts) == (WRITTEN, 2, len(srcs))
        assert local.exists(marker)
        assert _ingest_cps(shard.db_path, local) == []  # dropped in the retired shard
        with Table.open("t", local) as t:
            with t.writer(0) as db:
                db.delete(b"a")  # acknowledged
        again = commit_shard(local, plan, "run", shard, srcs, attempt=2)
        assert (again.status, again.rows) == (WRITTEN, 2)  # A's commit, reported again
        with Table.open("t", local) as t:
            assert t.get(b"a") is None
            assert t.get(b"x") == b"1"
    finally:
        pause.release()
        th.join(10)


def test_a_committed_shard_sealed_by_a_crashed_split_is_settled_by_the_retry(
    tmp_path: Path,
) -> None:
    """As above, but the split crashed after its seal: the shard is still in the map, sealed. The
    retry fences it (the rescale may not have yet), finds A's checkpoint, reports A's commit;
    resuming the split then finishes it and the rows are there once.

    Found by the review of the per-shard ingest commit (was test_review_ingest_fixes.py)."""
    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    srcs = [
        s.path
        for s in stage_ssts(
            local, plan, attempt_dir(plan, "run", 0, 0), 0, [_batch([b"a", b"x"], b"1")]
        )
    ]
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    pause = faulty.pause("before-marker", "put_if_absent", marker)
    th = threading.Thread(target=lambda: commit_shard(faulty, plan, "run", shard, srcs))
    th.daemon = True
    th.start()
    try:
        assert pause.wait_reached()
        crashing = FaultyStore(local)
        crashing.fail_next("put_if_absent", "t/shards/0000000002/manifest/*", times=50)
        with Table.open("t", crashing) as t, pytest.raises(SlateDBError):
            t.split(0, b"m")
        with Table.open("t", local) as t:
            assert t.shards[0].sealed and t.shard_map.pending
        retry = commit_shard(local, plan, "run", shard, srcs, attempt=1)
        assert (retry.status, retry.rows) == (WRITTEN, 2)
        assert local.exists(marker) and _ingest_cps(shard.db_path, local) == []
        with Table.open("t", local) as t:
            assert not t.resume().pending
            with t.writer(0) as db:
                db.delete(b"a")
        assert commit_shard(local, plan, "run", shard, srcs, attempt=2).rows == 2
        with Table.open("t", local) as t:
            assert list(t.scan()) == [(b"x", b"1")]
    finally:
        pause.release()
        th.join(10)


def test_a_sealed_shard_the_retry_finds_uncommitted_is_refused(tmp_path: Path) -> None:
    """No attempt committed a shard that a split replaced: the retry finds neither checkpoint
    nor marker in the retired shard and reports it not written, writing nothing.

    Found by the review of the per-shard ingest commit (was test_review_ingest_fixes.py)."""
    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    srcs = [
        s.path
        for s in stage_ssts(local, plan, attempt_dir(plan, "run", 0, 0), 0, [_batch([b"a"], b"1")])
    ]
    with Table.open("t", local) as t:
        t.split(0, b"m")
    retry = commit_shard(local, plan, "run", shard, srcs)
    assert retry.status == REFUSED and "ShardMapConflict" in retry.message
    assert not local.exists(ingest_done_marker("t", "job", shard.shard_id))
    with Table.open("t", local) as t:
        assert t.get(b"a") is None


def test_a_job_outlived_by_its_marker_ingests_nothing_and_one_outliving_it_is_refused(
    tmp_path: Path,
) -> None:
    """Kept, the marker outlives the job and a stage-1 re-run of the same run (Spark recomputes
    map output after a fetch failure: a fresh attempt directory, fresh staged SSTs) feeding a
    stage-2 retry ingests nothing. With ``ingest_min_age`` shorter than the job, the GC deletes
    the marker while the job runs, and its plan record first: the retry is refused
    (IngestJobExpired) instead of ingesting the shard again over an acknowledged delete (issue
    37, hole 4; tests/table/test_ingest_retention.py).

    Found by the review of the per-shard ingest commit (was test_review_ingest_fixes.py)."""
    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    first = list(stage_ssts(local, plan, attempt_dir(plan, "run", 0, 0), 0, [_batch([b"a"], b"1")]))
    assert commit_shard(local, plan, "run", shard, [s.path for s in first]).status == WRITTEN
    with Table.open("t", local) as t:
        with t.writer(0) as db:
            db.delete(b"a")  # acknowledged
        t.collect_garbage()  # the default ingest_min_age: longer than this job
    restaged = [
        s.path
        for s in stage_ssts(local, plan, attempt_dir(plan, "run", 0, 1), 0, [_batch([b"a"], b"1")])
    ]
    kept = commit_shard(local, plan, "run", shard, restaged, attempt=1)
    with Table.open("t", local) as t:
        assert (kept.status, t.get(b"a")) == (WRITTEN, None)
        t.collect_garbage(ingest_min_age=timedelta(0))  # shorter than the job: contract broken
    again = list(stage_ssts(local, plan, attempt_dir(plan, "run", 0, 2), 0, [_batch([b"a"], b"1")]))
    with pytest.raises(IngestJobExpired):
        commit_shard(local, plan, "run", shard, [s.path for s in again], attempt=2)
    with Table.open("t", local) as t:
        assert t.get(b"a") is None


def test_held_a_lost_answer_of_the_marker_is_settled_by_the_retry(tmp_path: Path) -> None:
    """A's marker lands but its answer is lost (A fails before dropping the checkpoint); the
    retry finds marker and checkpoint, ingests nothing, reports A's commit, drops the
    checkpoint.

    Found by the review of the per-shard ingest commit (was test_review_ingest_fixes.py)."""
    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    shard = plan.shards[0]
    srcs = [
        s.path
        for s in stage_ssts(local, plan, attempt_dir(plan, "run", 0, 0), 0, [_batch([b"a"], b"1")])
    ]
    faulty = FaultyStore(local)
    faulty.fail_next(
        "put_if_absent", ingest_done_marker("t", "job", shard.shard_id), after_effect=True
    )
    with pytest.raises(SlateDBError):
        commit_shard(faulty, plan, "run", shard, srcs)
    assert len(_ingest_cps(shard.db_path, local)) == 1
    with Table.open("t", local) as t:
        with t.writer(0) as db:
            db.delete(b"a")
    retry = commit_shard(local, plan, "run", shard, srcs, attempt=1)
    assert retry.status == WRITTEN and retry.rows == 1
    assert _ingest_cps(shard.db_path, local) == []
    with Table.open("t", local) as t:
        assert t.get(b"a") is None


# ---- the exactly-once per-shard ingest commit ------------------------------------------------------
def test_an_attempt_stalled_before_its_marker_is_not_ingested_again_by_the_next(
    tmp_path: Path,
) -> None:
    """Review finding (the bug was in spark_jobs/write_tasks.py, then table/ingest.py): the
    done marker is written after the commit and the writer's close, and the other attempt
    checks it after fencing. Attempt A commits the shard and stalls before its marker; a user
    deletes an ingested key (acknowledged); attempt B (a Spark retry or speculative copy of the
    same task) fences A and finds no marker, but finds the checkpoint A committed with its SSTs:
    it reports A's commit and ingests nothing, so the delete stands.

    Found by the adversarial review of the regrouping (was test_review_ingest_once.py)."""
    import pyarrow as pa

    from slatedb_core.checkpoints import list_checkpoints
    from slatedb_core.layout import ingest_done_marker
    from slatedb_core.table.ingest import (
        WRITTEN,
        attempt_dir,
        commit_shard,
        plan_ingest,
        stage_ssts,
    )

    local = open_store((tmp_path / "store").as_uri())
    Table.create("t", local, []).close()
    plan = plan_ingest("t", local, job_id="job")
    keys = pa.array([b"a", b"b"], pa.binary())
    batch = pa.record_batch([keys, pa.array([b"1", b"1"], pa.binary())], ["key", "value"])
    staged = list(stage_ssts(local, plan, attempt_dir(plan, "run", 0, 0), 0, [batch]))
    shard = plan.shards[0]
    srcs = [s.path for s in staged]
    faulty = FaultyStore(local)
    marker = ingest_done_marker("t", "job", shard.shard_id)
    pause = faulty.pause("before-marker", "put_if_absent", marker)
    out: list[object] = []
    th = threading.Thread(
        target=lambda: out.append(commit_shard(faulty, plan, "run", shard, srcs, attempt=0))
    )
    th.start()
    assert pause.wait_reached()  # A's commit is in the manifest; its marker is not yet written
    with Table.open("t", local) as t:
        with t.writer(0) as db:
            db.delete(b"a")  # acknowledged after the job's commit of the shard
        assert t.get(b"a") is None
    second = commit_shard(local, plan, "run", shard, srcs, attempt=1)
    pause.release()
    th.join()
    first = out[0]
    assert first.status == WRITTEN  # type: ignore[attr-defined]
    with Table.open("t", local) as t:
        resurrected = t.get(b"a")
    ingested_twice = second.status == WRITTEN and second.manifest_id != first.manifest_id  # type: ignore[attr-defined]
    # exactly once: the second attempt must not ingest the shard again, and the acknowledged
    # delete stands
    assert (ingested_twice, resurrected) == (False, None)
    # B reports A's commit, counts included (the job's statistics take B's row)
    assert (second.status, second.rows, second.ssts) == (WRITTEN, 2, 1)
    assert second.manifest_id == first.manifest_id  # type: ignore[attr-defined]
    # the marker is written and the checkpoint, which pins A's manifest, is gone
    assert local.exists(marker)
    assert [c for c in list_checkpoints(shard.db_path, local) if c.writer_epoch is None] == []
