"""Adversarial review of the regrouping: the exactly-once per-shard ingest commit
(slatedb_core/table/ingest.py; the same bug was in spark_jobs/ingest_tasks.py at 77a4ad0)."""

from __future__ import annotations

import threading
from pathlib import Path

from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table


# ---- the exactly-once per-shard ingest commit ------------------------------------------------------
def test_an_attempt_stalled_before_its_marker_is_not_ingested_again_by_the_next(
    tmp_path: Path,
) -> None:
    """Review finding (the bug was in spark_jobs/ingest_tasks.py, then table/ingest.py): the
    done marker is written after the commit and the writer's close, and the other attempt
    checks it after fencing. Attempt A commits the shard and stalls before its marker; a user
    deletes an ingested key (acknowledged); attempt B (a Spark retry or speculative copy of the
    same task) fences A and finds no marker, but finds the checkpoint A committed with its SSTs:
    it reports A's commit and ingests nothing, so the delete stands."""
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
