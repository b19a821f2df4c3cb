"""The batch ingest (``spark_jobs.ingest.ingest``) under real Spark task failures (issue 37,
adversarial review of 104a7be/548d195, a80255c, a7f6d30/456d978): a commit task whose first
attempt stops at a chosen point of a shard's commit (raising, or killing its Python worker with
``os._exit``) while the test, between that failure and Spark's retry, runs the table GC with
``ingest_min_age=0`` and deletes a key the stopped attempt committed. No shard may be applied
twice (the deleted key stays deleted), and the job either completes or fails with
IngestJobExpired. And a ``format("slatedb")`` batch write whose driver is killed after one
shard's commit: merges stay blocked until its re-run completes the batch.

Speculative copies are not attacked here: Spark never launches one on a single machine (local
mode starts no speculation thread; local-cluster executors share one host, and a copy never runs
on a host with an attempt of its task); tests/spark/test_ingest.py emulates one with a second
job of the same plan."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from slatedb_core.errors import InjectedFault, MergeBlockedByBatch
from slatedb_core.layout import ingest_done_marker, parse_ingest_checkpoint_name
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, table_app_versions
from slatedb_core.table.ingest import WRITTEN, plan_ingest
from slatedb_core.testing import FaultyStore
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.ingest import IngestStats, ingest

pytestmark = pytest.mark.spark

TABLE = "t"
SPLITS = [b"k0300", b"k0600"]
WAIT_S = 120.0


def frame(spark: SparkSession, rows: dict[bytes, bytes]) -> DataFrame:
    return spark.createDataFrame(list(rows.items()), "key binary, value binary")


def data(n: int) -> dict[bytes, bytes]:
    return {b"k%04d" % i: b"v%d" % i for i in range(n)}


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Table.open(TABLE, store) as t:
        return dict(t.scan())


def ingest_checkpoints(store: ObjectStore, db_path: str) -> list[str]:
    m = ManifestStore(store, db_path).read_latest().manifest
    return [c.name or "" for c in m.checkpoints if parse_ingest_checkpoint_name(c.name)]


def wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@dataclass(frozen=True)
class StopFirstAttempt:
    """Store factory for the tasks: in attempt 0 of a task, the first store call ``op`` on a
    path under ``into`` ending with ``suffix``, once every path of ``settled`` exists and no
    database of ``settled_dbs`` holds an ingest checkpoint (other shards' commits finished),
    touches ``<handshake>/stopped``, waits for ``<handshake>/go``, then fails the attempt:
    ``how`` = "raise" (InjectedFault) or "exit" (``os._exit``: the Python worker dies)."""

    url: str
    op: str
    handshake: str
    into: str = ""
    suffix: str = ""
    how: str = "raise"
    settled: tuple[str, ...] = ()
    settled_dbs: tuple[str, ...] = ()

    def __call__(self) -> ObjectStore:
        from pyspark import TaskContext

        store = open_store(self.url)
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() != 0:
            return store
        return _Stopping(store, self)


class _Stopping(FaultyStore):
    def __init__(self, inner: ObjectStore, how: StopFirstAttempt) -> None:
        super().__init__(inner)
        self._how = how

    def _settled(self) -> bool:
        h = self._how
        return all(self.inner.exists(p) for p in h.settled) and not any(
            ingest_checkpoints(self.inner, db) for db in h.settled_dbs
        )

    def _maybe_stop(self, op: str, path: str) -> None:
        h = self._how
        if op != h.op or not path.startswith(h.into) or not path.endswith(h.suffix):
            return
        deadline = time.monotonic() + WAIT_S
        while not self._settled():
            if time.monotonic() > deadline:
                raise InjectedFault("the other shards never settled")
            time.sleep(0.05)
        Path(h.handshake, "stopped").write_text(path)
        while not Path(h.handshake, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if h.how == "exit":
            os._exit(17)
        raise InjectedFault(f"attempt 0 stops before {op} {path}", path=path)

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        self._maybe_stop("put_if_absent", path)
        return super().put_if_absent(path, data)

    def copy_if_absent(self, src: str, dst: str) -> None:
        self._maybe_stop("copy_if_absent", dst)
        super().copy_if_absent(src, dst)


def run_with_pause(
    job: Callable[[], IngestStats], handshake: Path, between: Callable[[], None]
) -> IngestStats | BaseException:
    """Run ``job`` in a thread; once its stopped attempt says so, run ``between`` (the GC, a
    delete) and let the attempt fail. The job's stats, or what it raised."""
    out: list[IngestStats | BaseException] = []

    def run() -> None:
        try:
            out.append(job())
        except BaseException as e:  # handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(handshake / "stopped", "the first attempt to stop")
        between()
    finally:
        (handshake / "go").touch()
    thread.join(WAIT_S * 2)
    assert not thread.is_alive(), "the job never ended"
    return out[0]


def gc_and_delete(store: ObjectStore, shard_index: int, key: bytes) -> Callable[[], None]:
    def between() -> None:
        with Table.open(TABLE, store) as t:
            t.collect_garbage(ingest_min_age=timedelta(0))
            with t.writer(shard_index, DbOptions()) as db:
                db.delete(key)
                db.flush()

    return between


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    store = open_store(store_url)
    Table.create(TABLE, store, split_points=SPLITS).close()
    return store


def shard(store: ObjectStore, index: int) -> tuple[int, str]:
    with Table.open(TABLE, store) as t:
        s = t.shards[index]
        return s.shard_id, s.db_path


def test_gc_between_a_commit_and_its_marker_then_the_retry(
    spark: SparkSession, store_url: str, store: ObjectStore, tmp_path: Path
) -> None:
    """Attack 1a: task 0 commits shards 0 and 2; then attempt 0 of task 1 commits shard 1
    (checkpoint in the manifest) and fails before its done marker; the GC (ingest_min_age=0)
    collects the job's plan record, markers and staged SSTs; a key of shard 1 is deleted. The
    retry finds the commit's checkpoint: every shard is committed once, the job completed.
    Seen failing: the retry read the collected staged SSTs for its counts (ObjectNotFound on
    every attempt: the job failed, and the commit's checkpoint stayed pinned for 7 days)."""
    rows = data(900)
    plan = plan_ingest(TABLE, store)
    (id0, db0), (id1, db1), (id2, db2) = (shard(store, i) for i in range(3))
    stop = StopFirstAttempt(
        store_url,
        "put_if_absent",
        str(tmp_path),
        suffix=f"/{id1:010d}.done",
        settled=tuple(ingest_done_marker(TABLE, plan.job_id, i) for i in (id0, id2)),
        settled_dbs=(db0, db2),
    )
    outcome = run_with_pause(
        lambda: ingest(
            frame(spark, rows),
            store_url,
            TABLE,
            value_column="value",
            store_factory=stop,
            plan=plan,
        ),
        tmp_path,
        gc_and_delete(store, 1, b"k0400"),
    )
    want = dict(rows)
    del want[b"k0400"]
    assert contents(store) == want, "shard 1 was applied twice"
    assert isinstance(outcome, IngestStats), outcome
    assert outcome.rows == 900 and outcome.shards_written == 3
    by_shard = {s.shard_index: s for s in outcome.shards}
    assert "committed by an earlier attempt of this run" in by_shard[1].message
    assert (by_shard[1].rows, by_shard[1].attempt) == (300, 1)
    assert ingest_checkpoints(store, db1) == [], "the commit's checkpoint lingers"


def test_gc_after_a_shard_settled_and_its_task_failed(
    spark: SparkSession, store_url: str, store: ObjectStore, tmp_path: Path
) -> None:
    """Attack 1b: task 0 commits shards 0 and 2; attempt 0 settles shard 0 (marker written,
    checkpoint dropped) and fails at shard 2's first copy; the GC collects the job's plan record
    and markers; a key of shard 0 is deleted. The retry must not commit shard 0 again: the job
    fails with IngestJobExpired, shard 2 uncommitted."""
    rows = data(900)
    plan = plan_ingest(TABLE, store)
    id0, db0 = shard(store, 0)
    _, db2 = shard(store, 2)
    stop = StopFirstAttempt(
        store_url,
        "copy_if_absent",
        str(tmp_path),
        into=db2 + "/",
        settled=(ingest_done_marker(TABLE, plan.job_id, id0),),
        settled_dbs=(db0,),
    )
    outcome = run_with_pause(
        lambda: ingest(
            frame(spark, rows),
            store_url,
            TABLE,
            value_column="value",
            store_factory=stop,
            plan=plan,
        ),
        tmp_path,
        gc_and_delete(store, 0, b"k0100"),
    )
    got = contents(store)
    assert b"k0100" not in got, "shard 0 was applied twice: a deleted key came back"
    assert isinstance(outcome, BaseException), "shard 2 cannot commit after the GC"
    assert "IngestJobExpired" in str(outcome), outcome
    assert {k: v for k, v in rows.items() if k < b"k0300" and k != b"k0100"} == {
        k: v for k, v in got.items() if k < b"k0300"
    }
    assert not any(k >= b"k0600" for k in got), "shard 2 committed after its plan expired"


def test_a_worker_killed_between_a_commit_and_its_marker(
    spark: SparkSession, store_url: str, store: ObjectStore, tmp_path: Path
) -> None:
    """Attack 3: an exactly-once batch; attempt 0 of task 0 (shards 0 and 2, committed
    concurrently) kills its Python worker (os._exit) right after shard 0's commit, before its
    marker, wherever shard 2's commit is then; a key of shard 0 is deleted meanwhile. Spark's
    retry writes exactly what is missing."""
    rows = data(900)
    id0, db0 = shard(store, 0)
    stop = StopFirstAttempt(
        store_url, "put_if_absent", str(tmp_path), suffix=f"/{id0:010d}.done", how="exit"
    )

    def between() -> None:
        with Table.open(TABLE, store) as t, t.writer(0, DbOptions()) as db:
            db.delete(b"k0100")
            db.flush()

    outcome = run_with_pause(
        lambda: ingest(
            frame(spark, rows),
            store_url,
            TABLE,
            value_column="value",
            store_factory=stop,
            app_id="loader",
            batch_version=1,
        ),
        tmp_path,
        between,
    )
    assert isinstance(outcome, IngestStats), outcome
    want = dict(rows)
    del want[b"k0100"]
    assert contents(store) == want
    assert outcome.rows == 900 and {s.status for s in outcome.shards} == {WRITTEN}
    by_shard = {s.shard_index: s for s in outcome.shards}
    # the worker died: attempt 1 found attempt 0's commit of shard 0 (its checkpoint)
    assert by_shard[0].attempt == 1
    assert "committed by an earlier attempt of this run" in by_shard[0].message
    l0 = ManifestStore(store, db0).read_latest().manifest.l0
    assert len(l0) == by_shard[0].ssts == 1, "shard 0 was committed once (the delete is in the WAL)"
    assert table_app_versions(store, TABLE, "loader") == {0: 1, 1: 1, 2: 1}
    assert ingest_checkpoints(store, db0) == []


CRASH = Path(__file__).parent / "batch_crash"
KILL_HOOK = Path(__file__).parent / "stream_crash"  # its sitecustomize kills after a commit


def run_killed_write(url: str, version: int, n: int, marker: Path) -> int:
    """The batch write of batch_crash/driver.py, its whole process group killed (SIGKILL)
    right after its first shard commit."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(KILL_HOOK), str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    env["SLATEDB_TEST_KILL_AFTER_SHARD_COMMITS"] = str(marker)
    proc = subprocess.run(
        [sys.executable, str(CRASH / "driver.py"), url, "events", str(version), str(n)],
        env=env,
        start_new_session=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert marker.exists(), (
        f"the driver ended ({proc.returncode}) before a shard commit:\n{proc.stderr[-3000:]}"
    )
    return proc.returncode


def test_a_write_killed_after_one_shard_blocks_merges_until_its_rerun(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Attack 4: ``df.write.format("slatedb")`` of batch 5 of app ``loader``, its driver
    killed right after one shard's commit; an acknowledged delete in that shard; a merge of
    that shard with a neighbour is refused (MergeBlockedByBatch, nothing changed); the re-run
    of the batch writes exactly the other shards; then the merge goes through, and every row
    is there once, the deleted key still deleted."""
    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    n = 50
    marker = tmp_path / "killed"
    assert run_killed_write(url, 5, n, marker) != 0
    committed = int(marker.read_text())
    assert table_app_versions(store, "events", "loader") == {
        i: (5 if i == committed else None) for i in range(3)
    }
    victim = f"k{committed}-7".encode()
    with Table.open("events", store) as t, t.writer(committed, DbOptions()) as db:
        db.delete(victim)
        db.flush()

    pair = min(committed, 1)  # merge(i) merges shards i and i + 1
    with Table.open("events", store) as t:
        before = t.shard_map
        with pytest.raises(MergeBlockedByBatch, match="loader"):
            t.merge(pair)
    with Table.open("events", store) as t:
        assert t.shard_map.shards == before.shards and t.shard_map.pending == ()

    spark.dataSource.register(SlateDBDataSource)
    rows = [(f"k{s}-{i}", f"a{i}") for s in range(3) for i in range(n)]
    (
        spark.createDataFrame(rows, "id string, v string")
        .repartition(2)
        .write.format("slatedb")
        .option("url", url)
        .option("path", "events")
        .option("key", "id")
        .option("value", "v")
        .option("split_points", "k1,k2")
        .option("app_id", "loader")
        .option("batch_version", 5)
        .mode("append")
        .save()
    )
    assert table_app_versions(store, "events", "loader") == {0: 5, 1: 5, 2: 5}

    with Table.open("events", store) as t:
        t.merge(pair)
    with Table.open("events", store) as t:
        assert len(t.shards) == 2
        got = dict(t.scan())
    want = {k.encode(): v.encode() for k, v in rows}
    del want[victim]
    assert got == want and len(got) == 3 * n - 1
