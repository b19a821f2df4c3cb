"""Spark ingestion into a sharded table: routing, upserts and deletes, task retries, rescales."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from slatedb_core.errors import InvalidArgument, ShardMapConflict
from slatedb_core.layout import ingest_done_marker
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import REFUSED, SKIPPED, WRITTEN, plan_ingest
from slatedb_core.testing import FaultRule, FaultyStore
from spark_jobs.ingest import IngestStats, ingest
from spark_jobs.routing import partition_keys, spark_hash_long
from spark_jobs.write_tasks import decode_arrow_value, encode_arrow_rows

pytestmark = pytest.mark.spark

TABLE = "t"
SPLITS = [b"k0300", b"k0600"]
SMALL_SSTS = DbOptions(l0_sst_size_bytes=2048)


def frame(spark: SparkSession, rows: dict[bytes, bytes]) -> DataFrame:
    return spark.createDataFrame(list(rows.items()), "key binary, value binary")


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Table.open(TABLE, store) as t:
        return dict(t.scan())


def data(n: int, tag: bytes = b"v") -> dict[bytes, bytes]:
    return {b"k%04d" % i: tag + b"%d" % i for i in range(n)}


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    store = open_store(store_url)
    Table.create(TABLE, store, split_points=SPLITS).close()
    return store


def test_rows_land_in_their_shards_once(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    stats = ingest(frame(spark, rows), store_url, TABLE, value_column="value")
    assert stats.rows == 900 and stats.shards_written == 3
    tasks = min(3, spark.sparkContext.defaultParallelism)  # shard i committed by task i % tasks
    assert tasks == 2
    assert sorted((s.shard_index, s.partition) for s in stats.shards) == [(0, 0), (1, 1), (2, 0)]
    assert all(s.status == WRITTEN and s.rows == 300 for s in stats.shards)
    assert contents(store) == rows
    with Table.open(TABLE, store) as t:
        for shard in t.shards:
            m = ManifestStore(store, shard.db_path).read_latest().manifest
            assert len(m.l0) >= 1 and m.writer_epoch == 1
            lo, hi = shard.key_range.start, shard.key_range.end
            assert all(
                (lo is None or s.info.first_key >= lo) and (hi is None or s.info.last_key < hi)
                for s in m.ssts
                if s.info.first_key is not None and s.info.last_key is not None
            )


def test_ingest_upserts_and_deletes_by_tombstone_flag(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    ingest(frame(spark, data(900)), store_url, TABLE, value_column="value")
    changes = [(b"k%04d" % i, b"new%d" % i, i % 3 == 0) for i in range(0, 1200, 2)]
    df = spark.createDataFrame(changes, "key binary, value binary, deleted boolean")
    ingest(df, store_url, TABLE, value_column="value", tombstone_column="deleted")
    expected = data(900)
    for k, v, deleted in changes:
        if deleted:
            expected.pop(k, None)
        else:
            expected[k] = v
    assert contents(store) == expected


def test_json_and_arrow_value_encodings(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    df = spark.createDataFrame(
        [(f"k{i:04d}", i, None if (i // 100) % 2 else f"s{i}") for i in range(0, 900, 100)],
        "id string, n bigint, s string",
    )
    ingest(df, store_url, TABLE, key_column="id", value_format="json")
    got = contents(store)
    assert json.loads(got[b"k0100"]) == {"n": 100}  # null fields omitted
    assert json.loads(got[b"k0200"]) == {"n": 200, "s": "s200"}
    # a table holds one kind of value (spark_jobs/value_columns.py): arrow goes to another one
    with pytest.raises(InvalidArgument, match="holds json values"):
        ingest(df, store_url, TABLE, key_column="id", value_format="arrow")
    Table.create("arrow_t", store).close()
    ingest(df, store_url, "arrow_t", key_column="id", value_format="arrow")
    with Table.open("arrow_t", store) as t:
        got = dict(t.scan())
    assert decode_arrow_value(got[b"k0100"]) == {"n": 100, "s": None}
    assert decode_arrow_value(got[b"k0800"]) == {"n": 800, "s": "s800"}
    assert len(got) == 9


def test_arrow_rows_decode_to_themselves() -> None:
    batch = pa.record_batch({"a": [1, None, 3], "b": [b"x", b"", None]})
    values = encode_arrow_rows(batch).to_pylist()
    assert [decode_arrow_value(v) for v in values] == batch.to_pylist()


def test_value_format_needs_a_matching_value_column(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    with pytest.raises(InvalidArgument):
        ingest(frame(spark, data(3)), store_url, TABLE, value_format="binary")
    with pytest.raises(InvalidArgument):
        ingest(frame(spark, data(3)), store_url, TABLE, value_column="value", value_format="json")


@dataclass(frozen=True)
class FaultyFirstAttempt:
    """Store factory for the tasks: attempt 0 of the given partitions gets these fault rules."""

    url: str
    rules: dict[int, tuple[dict[str, object], ...]] = field(default_factory=dict)

    def __call__(self) -> ObjectStore:
        from pyspark import TaskContext

        store = open_store(self.url)
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() != 0 or ctx.partitionId() not in self.rules:
            return store
        rules = [FaultRule(**kw) for kw in self.rules[ctx.partitionId()]]  # type: ignore[arg-type]
        return FaultyStore(store, rules=rules)


@dataclass(frozen=True)
class FailingCopies:
    """Store factory: every copy into a database fails, in every attempt."""

    url: str

    def __call__(self) -> ObjectStore:
        rule = FaultRule(op="copy", path_glob="*/compacted/*", fail_before=1.0)
        return FaultyStore(open_store(self.url), rules=[rule])


def sst_objects(store: ObjectStore, db_path: str) -> set[str]:
    return {m.path.rsplit("/", 1)[1][:-4] for m in store.list(f"{db_path}/compacted/")}


def test_failed_attempts_leave_every_row_once_and_nothing_of_their_own(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    with Table.open(TABLE, store) as t:
        shard0, shard1 = t.shards[0], t.shards[1]
    factory = FaultyFirstAttempt(
        store_url,
        {
            # task 0 (shards 0 and 2): shard 0's second copy of a staged SST fails: part of its
            # data copied into the database, nothing committed; shard 2 commits meanwhile (stage
            # 1's tasks never copy: rules on stage-2 operations leave them alone)
            0: (
                {
                    "op": "copy",
                    "path_glob": f"{shard0.db_path}/compacted/*",
                    "skip": 1,
                    "fail_before": 1.0,
                    "max_hits": 1,
                },
            ),
            # task 1 (shard 1): the task dies after its commit took effect (the marker fails)
            1: (
                {
                    "op": "put_if_absent",
                    "path_glob": f"*/_ingest/*/{shard1.shard_id:010d}.done",
                    "fail_before": 1.0,
                },
            ),
        },
    )
    stats = ingest(
        frame(spark, rows),
        store_url,
        TABLE,
        value_column="value",
        db_options=SMALL_SSTS,
        store_factory=factory,
    )
    by_shard = {s.shard_index: s for s in stats.shards}
    assert by_shard[0].attempt == 1 and by_shard[1].attempt == 1
    # shard 2 was committed by attempt 0 of task 0; attempt 1 found its marker and reports it
    assert by_shard[2].attempt == 0 and by_shard[2].status == WRITTEN
    assert "committed by attempt 0 of this run" in by_shard[2].message
    assert stats.rows == 900 and stats.shards_written == 3
    assert contents(store) == rows
    m0 = ManifestStore(store, shard0.db_path).read_latest().manifest
    live0 = {str(s.id) for s in m0.ssts}
    orphans = sst_objects(store, shard0.db_path) - live0
    assert len(orphans) == 1, "the failed attempt's first SST exists but is not referenced"
    assert m0.writer_epoch == 2
    # shard 1 was committed once: attempt 1 found attempt 0's commit checkpoint (no marker),
    # reported that commit and dropped the checkpoint
    assert "committed by an earlier attempt of this run" in by_shard[1].message
    m1 = ManifestStore(store, shard1.db_path).read_latest().manifest
    assert m1.writer_epoch == 2 and len(m1.l0) == by_shard[1].ssts, "shard 1 was committed once"
    assert [c for c in m1.checkpoints if c.writer_epoch is None] == []
    with Table.open(TABLE, store) as t:
        m2 = ManifestStore(store, t.shards[2].db_path).read_latest().manifest
    assert len(m2.l0) == by_shard[2].ssts, "shard 2 was committed once"


def test_a_finished_shard_is_not_written_again_by_a_late_attempt(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    plan = plan_ingest(TABLE, store, job_id="job-1")
    ingest(frame(spark, data(900)), store_url, TABLE, value_column="value", plan=plan)
    newer = data(900, tag=b"newer")
    ingest(frame(spark, newer), store_url, TABLE, value_column="value")
    # a zombie attempt of job-1 (e.g. a speculative copy Spark failed to kill) runs late
    late = ingest(frame(spark, data(900)), store_url, TABLE, value_column="value", plan=plan)
    assert {s.status for s in late.shards} == {SKIPPED}
    assert late.rows == 0
    assert contents(store) == newer


def test_a_rescale_after_planning_refuses_the_retired_shard(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    plan = plan_ingest(TABLE, store)
    with Table.open(TABLE, store) as t:
        t.split(0, at=b"k0150")
    with pytest.raises(ShardMapConflict, match="shard 0"):
        ingest(frame(spark, rows), store_url, TABLE, value_column="value", plan=plan)
    got = contents(store)
    assert not any(k < b"k0300" for k in got), "no row may land in the retired shard"
    assert {k: v for k, v in rows.items() if k >= b"k0300"} == got
    stats = ingest(frame(spark, rows), store_url, TABLE, value_column="value")
    assert REFUSED not in {s.status for s in stats.shards}
    assert stats.shards_written == 4
    assert contents(store) == rows


@dataclass(frozen=True)
class StallFirstUpload:
    """Store factory: attempt 0 of ``partition`` stalls its first SST copy until ``until``
    exists (bounded), so a concurrent copy of the task overtakes it at a known point."""

    url: str
    partition: int
    until: str

    def __call__(self) -> ObjectStore:
        from pyspark import TaskContext

        store = open_store(self.url)
        ctx = TaskContext.get()
        if ctx is None or ctx.attemptNumber() != 0 or ctx.partitionId() != self.partition:
            return store
        return _Stalling(store, self.until)


class _Stalling(FaultyStore):
    def __init__(self, inner: ObjectStore, until: str) -> None:
        super().__init__(inner)
        self._until = until
        self._stalled = False

    def copy_if_absent(self, src: str, dst: str) -> None:
        if "/compacted/" in dst and not self._stalled:
            self._stalled = True
            deadline = time.monotonic() + 90
            while not self.inner.exists(self._until) and time.monotonic() < deadline:
                time.sleep(0.05)
        super().copy_if_absent(src, dst)


def test_a_slow_attempt_overtaken_by_a_concurrent_copy_is_fenced(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    """Speculative execution, emulated: Spark never launches a speculative copy on a single
    machine (local mode starts no speculation thread; local-cluster executors share one host and
    a copy never runs on the host of the original), so the copy is a second job with the same
    plan, i.e. the same job id, shards and rows, as a speculative attempt has."""
    rows = data(900)
    plan = plan_ingest(TABLE, store, job_id="spec")
    shard = plan.shards[1]
    slow = StallFirstUpload(store_url, 1, ingest_done_marker(TABLE, plan.job_id, shard.shard_id))
    outcome: list[object] = []

    def run_slow() -> None:
        try:
            outcome.append(
                ingest(
                    frame(spark, rows),
                    store_url,
                    TABLE,
                    value_column="value",
                    db_options=SMALL_SSTS,
                    store_factory=slow,
                    plan=plan,
                )
            )
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=run_slow, daemon=True)
    thread.start()
    deadline = time.monotonic() + 90
    while ManifestStore(store, shard.db_path).read_latest().manifest.writer_epoch < 1:
        assert time.monotonic() < deadline, "the slow attempt never opened its writer"
        time.sleep(0.05)
    copy = ingest(
        frame(spark, rows), store_url, TABLE, value_column="value", db_options=SMALL_SSTS, plan=plan
    )
    thread.join(120)
    assert not thread.is_alive() and len(outcome) == 1
    slow_stats = outcome[0]
    assert isinstance(slow_stats, IngestStats), slow_stats
    slow1 = next(s for s in slow_stats.shards if s.shard_index == 1)
    copy1 = next(s for s in copy.shards if s.shard_index == 1)
    assert copy1.status == WRITTEN and copy1.writer_epoch == 2
    assert slow1.status == SKIPPED and slow1.attempt == 1  # attempt 0 was fenced, then retried
    assert contents(store) == rows
    m1 = ManifestStore(store, shard.db_path).read_latest().manifest
    assert m1.writer_epoch == 3
    assert len(m1.l0) == copy1.ssts, "only the copy's commit is visible"
    assert sst_objects(store, shard.db_path) - {str(s.id) for s in m1.ssts}, (
        "the fenced attempt copied SSTs that nothing references"
    )
    assert not staged_objects(store, plan.job_id), "both runs deleted their staged SSTs"


def staged_objects(store: ObjectStore, job_id: str) -> list[str]:
    return [m.path for m in store.list(f"{TABLE}/_ingest/{job_id}/staged/")]


def test_staged_ssts_are_linked_into_l0_and_deleted_after_the_run(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    df = frame(spark, rows).repartition(3)
    plan = plan_ingest(TABLE, store)
    # a tiny run size: every input batch is sorted and staged on its own
    stats = ingest(df, store_url, TABLE, value_column="value", plan=plan, run_bytes=1)
    assert contents(store) == rows
    assert not staged_objects(store, plan.job_id)
    with Table.open(TABLE, store) as t:
        for shard in t.shards:
            m = ManifestStore(store, shard.db_path).read_latest().manifest
            s = next(s for s in stats.shards if s.shard_index == shard.index)
            assert len(m.l0) == s.ssts >= 3, "one SST per input partition and run at least"
            assert sum(x.info.entry_count for x in m.ssts) == s.rows == 300
    # the upsert of a later ingest wins over every staged run
    newer = data(900, tag=b"newer")
    ingest(frame(spark, newer).repartition(3), store_url, TABLE, value_column="value")
    assert contents(store) == newer


def test_compact_l0_at_compacts_the_crowded_shards_after_the_ingest(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    df = frame(spark, rows).repartition(6)  # six L0 SSTs per shard
    with pytest.raises(InvalidArgument):
        ingest(df, store_url, TABLE, value_column="value", compact_l0_at=0)
    stats = ingest(df, store_url, TABLE, value_column="value", compact_l0_at=4)
    assert contents(store) == rows
    assert sorted(stats.compactions) == [0, 1, 2]
    with Table.open(TABLE, store) as t:
        for shard in t.shards:
            m = ManifestStore(store, shard.db_path).read_latest().manifest
            assert len(m.l0) < 4 and m.compactor_epoch == 1
            c = stats.compactions[shard.index]
            assert c.input_ssts >= 6 and c.rows_out == 300
    assert "spark compaction" in stats.summary()
    # under the threshold: nothing is compacted
    again = ingest(
        frame(spark, data(900, b"w")).repartition(2),
        store_url,
        TABLE,
        value_column="value",
        compact_l0_at=4,
    )
    assert again.compactions == {} and contents(store) == data(900, b"w")


def test_a_failed_job_deletes_its_staged_ssts(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    rows = data(900)
    plan = plan_ingest(TABLE, store)
    with pytest.raises(Exception, match="InjectedFault"):  # every attempt of every commit fails
        ingest(
            frame(spark, rows),
            store_url,
            TABLE,
            value_column="value",
            plan=plan,
            store_factory=FailingCopies(store_url),
        )
    assert not staged_objects(store, plan.job_id)
    assert contents(store) == {}


def test_bad_run_bytes(spark: SparkSession, store_url: str, store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument):
        ingest(frame(spark, data(3)), store_url, TABLE, value_column="value", run_bytes=0)


def test_arrow_batch_bounds_are_set_for_the_job_only(spark: SparkSession) -> None:
    from spark_jobs.ingest import ARROW_BATCH_ROWS, NO_BYTE_BOUND, arrow_batches

    rows_key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    bytes_key = "spark.sql.execution.arrow.maxBytesPerBatch"
    session_rows = spark.conf.get(rows_key, None)
    assert spark.conf.get(bytes_key, None) is None
    with arrow_batches(spark):  # the defaults: many rows, no byte bound (no per-row check)
        assert spark.conf.get(rows_key) == str(ARROW_BATCH_ROWS)
        assert spark.conf.get(bytes_key) == str(NO_BYTE_BOUND)
    assert spark.conf.get(rows_key, None) == session_rows
    assert spark.conf.get(bytes_key, None) is None
    with arrow_batches(spark, 7, 4096):  # the caller's bounds
        assert (spark.conf.get(rows_key), spark.conf.get(bytes_key)) == ("7", "4096")
    spark.conf.set(bytes_key, "1048576")  # the session's own byte bound is kept
    try:
        with arrow_batches(spark):
            assert spark.conf.get(bytes_key) == "1048576"
        assert spark.conf.get(bytes_key) == "1048576"
    finally:
        spark.conf.unset(bytes_key)
    for rows, max_bytes in ((0, None), (None, 0), (None, NO_BYTE_BOUND + 1)):
        with pytest.raises(InvalidArgument), arrow_batches(spark, rows, max_bytes):
            pass
    assert spark.conf.get(rows_key, None) == session_rows


def test_ingest_with_small_arrow_batches(
    spark: SparkSession, store_url: str, store: ObjectStore
) -> None:
    """Bounded by bytes (Spark's per-row check) and by rows: the same rows land."""
    rows = data(900)
    ingest(
        frame(spark, rows).repartition(2),
        store_url,
        TABLE,
        value_column="value",
        arrow_batch_rows=50,
        arrow_batch_bytes=2048,
    )
    assert contents(store) == rows
    with pytest.raises(InvalidArgument):
        ingest(frame(spark, rows), store_url, TABLE, value_column="value", arrow_batch_rows=0)


def test_partition_keys_land_in_their_partitions(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    for n in (1, 3, 8, 17):
        keys = partition_keys(n)
        df = spark.createDataFrame([(k,) for k in keys], "k bigint").repartition(n, "k")
        got: dict[int, int] = dict(df.select("k", F.spark_partition_id().alias("p")).collect())
        assert got == {k: p for p, k in enumerate(keys)}
    values = [0, 1, -1, 2**40 + 7, -(2**63)]
    hashed = spark.createDataFrame([(v,) for v in values], "v bigint").select(F.hash("v"))
    assert [r[0] for r in hashed.collect()] == [spark_hash_long(v) for v in values]


@pytest.mark.s3
def test_ingest_into_a_table_on_s3(spark: SparkSession, s3_url: str) -> None:
    """The same job on a real S3 server (moto on 127.0.0.1): staged SSTs are put by stage 1 and
    server-side copied into each shard by stage 2 (UploadPartCopy + If-None-Match)."""
    store = open_store(s3_url)
    Table.create(TABLE, store, split_points=SPLITS).close()
    rows = data(900)
    plan = plan_ingest(TABLE, store)
    stats = ingest(
        frame(spark, rows).repartition(2), s3_url, TABLE, value_column="value", plan=plan
    )
    assert stats.rows == 900 and stats.shards_written == 3
    changes = [(b"k%04d" % i, b"new%d" % i, i % 2 == 0) for i in range(0, 900, 3)]
    df = spark.createDataFrame(changes, "key binary, value binary, deleted boolean")
    ingest(df, s3_url, TABLE, value_column="value", tombstone_column="deleted")
    for k, v, deleted in changes:
        if deleted:
            rows.pop(k)
        else:
            rows[k] = v
    assert contents(store) == rows
    assert not [m.path for m in store.list(f"{TABLE}/_ingest/") if "/staged/" in m.path], (
        "staged SSTs deleted"
    )
    with Table.open(TABLE, store) as t:
        for shard in t.shards:
            m = ManifestStore(store, shard.db_path).read_latest().manifest
            first = next(s for s in stats.shards if s.shard_index == shard.index)
            assert sst_objects(store, shard.db_path) >= {str(s.id) for s in m.ssts}
            assert len(m.l0) >= first.ssts >= 1


def test_the_spark_submit_entry_point_ingests_a_parquet_file(
    spark: SparkSession,
    store_url: str,
    tmp_path: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from spark_jobs.ingest import main

    rows = data(600)
    source = f"{tmp_path}/in.parquet"
    frame(spark, rows).repartition(3).write.parquet(source)
    assert (
        main(
            [
                "--input",
                source,
                "--url",
                store_url,
                "--path",
                "cli",
                "--value-column",
                "value",
                "--create",
                "k0300",
                "--compact-l0-at",
                "2",
                "--arrow-batch-rows",
                "100",
                "--arrow-batch-bytes",
                "65536",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "600 rows into 2 shard(s)" in out and "spark compaction" in out
    with Table.open("cli", open_store(store_url)) as t:
        assert dict(t.scan()) == rows and len(t.shards) == 2
    # one line and exit 1, no traceback (issue 40, item 6)
    assert main(["--input", f"{tmp_path}/in.json", "--url", store_url, "--path", "cli"]) == 1
    assert "error: InvalidArgument: " in capsys.readouterr().err
