"""Adversarial review of ``format("slatedb")``'s writers (spark_jobs.datasource_write,
docs/spark.md): the driver's planning and commit under racing writers and odd inputs, stream
batches with huge ids, task retries. The driver-side tests call the writer's own planning and
commit functions (what ``writer()``/``commit()`` run) without a Spark session; the others run
real Spark (``local[2,4]``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument, ShardMapConflict
from slatedb_core.layout import sst_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.ingest import (
    SKIPPED,
    WRITTEN,
    IngestPlan,
    attempt_dir,
    commit_shard,
    plan_ingest,
    stage_ssts,
)
from slatedb_core.table.ingest_seqs import MAX_STATED_SEQ
from spark_jobs import datasource_write as dw
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import WriteOptions

pytestmark = pytest.mark.spark

PLAIN = StructType([StructField("k", StringType()), StructField("v", BinaryType())])
COLUMNS = StructType([StructField("k", StringType()), StructField("n", LongType())])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


def contents(store: ObjectStore, path: str = "t") -> dict[bytes, bytes]:
    with Table.open(path, store) as t:
        return dict(t.scan())


def options(
    url: str, schema: StructType, *, stream: bool = False, overwrite: bool = False, **extra: str
) -> WriteOptions:
    opts = {"url": url, "path": "t", "key": "k", **extra}
    if schema is PLAIN:
        opts["value"] = "v"
    return WriteOptions.parse(opts, schema, overwrite, stream=stream)


def stage_rows(
    store: ObjectStore,
    wp: dw.WritePlan,
    plan: IngestPlan,
    rows: Mapping[bytes, bytes],
    partition: int = 0,
) -> list[dw.StagedRef]:
    """What one task of the writer stages, as the refs it hands to commit()."""
    keys = sorted(rows)
    b = pa.record_batch(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([rows[k] for k in keys], pa.binary()),
        }
    )
    d = attempt_dir(plan, wp.run_id, partition, 0)
    return [
        dw.StagedRef(s.shard.index, partition, 0, s.part, s.path, s.rows, s.bytes)
        for s in stage_ssts(store, plan, d, 0, [b], partition=partition)
    ]


# ---- value encodings ----------------------------------------------------------------------------
def test_an_encoded_append_into_a_table_of_plain_values_is_refused(url: str) -> None:
    """FIXED. A table holding plain values (written with option 'value', the CLI or a Table
    writer) records no encoding; an append of columns used to record its encoding over them,
    after which every old value was read as a JSON row. Refused now, nothing recorded; an
    empty table (or one this write creates) still takes it."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]) as t, t.writer(0) as db:
        db.put(b"a", b"\x00plain bytes")
    with pytest.raises(InvalidArgument, match=r"option 'value'.*plain values"):
        dw.plan_write(options(url, COLUMNS))
    with Table.open("t", store) as t:
        assert t.value_encoding is None
    # an empty table records it
    with Table.create("e", store, [b"m"]):
        pass
    wp = dw.plan_write(WriteOptions.parse({"url": url, "path": "e", "key": "k"}, COLUMNS, False))
    assert wp.plan is not None
    with Table.open("e", store) as t:
        assert t.value_encoding is not None and t.value_encoding.format == "json"


def test_an_overwrite_swapped_in_while_an_append_plans_is_refused(
    url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """FIXED. An append checks the table's encoding, then plans on the latest map: an
    overwrite (here of plain values over a table of JSON columns) committed in between used to
    let the append's JSON rows into the new plain shards. The plan's map must hold the
    encoding the append checked."""
    store = open_store(url)
    wp0 = dw.plan_write(options(url, COLUMNS))  # creates the table, records JSON columns
    assert wp0.plan is not None

    def racing(*args: object, **kwargs: object) -> IngestPlan:
        with Table.open("t", store) as t:
            t.overwrite(
                [
                    pa.record_batch(
                        {
                            "key": pa.array([b"x"], pa.binary()),
                            "value": pa.array([b"raw"], pa.binary()),
                        }
                    )
                ]
            )
        return plan_ingest(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("spark_jobs.datasource_write.plan_ingest", racing)
    with pytest.raises(ShardMapConflict, match="value encoding"):
        dw.plan_write(options(url, COLUMNS))
    with Table.open("t", store) as t:
        assert t.value_encoding is None
    assert contents(store) == {b"x": b"raw"}


# ---- exactly-once batches through the driver's commit -------------------------------------------
def test_a_batch_committed_twice_by_the_driver_is_applied_once(url: str) -> None:
    """Two writes of one (app_id, batch_version) planned together (a re-run started while
    the first still ran) whose commits interleave: each shard applies the batch once, the
    second write reports every shard SKIPPED, and a delete between them is not undone."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]):
        pass
    o = options(url, PLAIN, app_id="loader", batch_version="5")
    first, second = dw.plan_write(o), dw.plan_write(o)
    assert first.plan is not None and second.plan is not None
    rows = {b"a": b"1", b"z": b"2"}
    r1 = stage_rows(store, first, first.plan, rows)
    r2 = stage_rows(store, second, second.plan, {b"a": b"other", b"z": b"other"})
    s1 = dw.commit_refs(store, first.plan, first.run_id, r1)
    assert [s.status for s in s1] == [WRITTEN, WRITTEN]
    with Table.open("t", store) as t, t.writer(0) as db:
        db.delete(b"a")
    s2 = dw.commit_refs(store, second.plan, second.run_id, r2)
    assert [s.status for s in s2] == [SKIPPED, SKIPPED]
    assert contents(store) == {b"z": b"2"}
    # a third plan of the same batch is settled on the driver: nothing to run
    assert dw.plan_write(o).plan is None


def test_stream_batches_with_huge_ids_keep_their_order(url: str) -> None:
    """Batch ids up to 2**40 through one plan (the ids once set the staged seqs: seq_base +
    (b << 36), staged at 0 past MAX_STATED_SEQ): whatever the id, a later batch's row wins over
    an earlier one's, a re-run is a no-op and a delete written between batches is kept."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]):
        pass
    wp = dw.plan_write(options(url, PLAIN, stream=True))
    assert wp.plan is not None and wp.plan.seq_base > 0
    top = (MAX_STATED_SEQ - wp.plan.seq_base) >> 36
    ids = [0, 1, top - 1, top, top + 1, top + 2, 1 << 40]
    for i, b in enumerate(ids):
        plan = dw.batch_plan(wp, b, "app")  # one plan for every batch: later ones re-encode
        refs = stage_rows(store, wp, plan, {b"a": f"v{i}".encode(), b"z": f"v{i}".encode()})
        stats = dw.commit_refs(store, plan, wp.run_id, refs)
        assert {s.status for s in stats} == {WRITTEN}, stats
        assert contents(store) == {b"a": f"v{i}".encode(), b"z": f"v{i}".encode()}, b
        # the same batch re-run (a restarted query) is a no-op
        again = stage_rows(store, wp, plan, {b"a": b"dup", b"z": b"dup"}, partition=1)
        assert {s.status for s in dw.commit_refs(store, plan, wp.run_id, again)} == {SKIPPED}
        with Table.open("t", store) as t, t.writer(1) as db:
            db.delete(b"z")
        assert b"z" not in contents(store)
    with pytest.raises(InvalidArgument, match="batch id"):
        dw.batch_plan(wp, -1, "app")


# ---- real Spark ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def registered(spark: SparkSession) -> SparkSession:
    spark.dataSource.register(SlateDBDataSource)
    return spark


def flaky_frame(spark: SparkSession, n: int, marker: Path) -> DataFrame:
    """n rows in 4 partitions whose first attempt of partition 1 fails after producing some
    rows (Spark retries it: local[2,4])."""

    def fail_once(it):  # type: ignore[no-untyped-def]
        ctx = TaskContext.get()
        for i, row in enumerate(it):
            if (
                ctx is not None
                and ctx.partitionId() == 1
                and ctx.attemptNumber() == 0
                and i == 3
                and not marker.exists()
            ):
                marker.write_text("failed once")
                raise RuntimeError("injected task failure")
            yield row

    rows = [(f"k{i:04d}", f"v{i}".encode()) for i in range(n)]
    df = spark.createDataFrame(rows, "k string, v binary").repartition(4, "k")
    return df.rdd.mapPartitions(fail_once).toDF("k string, v binary")


def test_a_retried_task_writes_its_rows_once(
    registered: SparkSession, url: str, tmp_path: Path
) -> None:
    """A task attempt that fails mid-partition and is retried: the table holds every row
    once, its staging is gone, and the same batch (app_id/batch_version) again is a no-op."""
    spark = registered
    marker = tmp_path / "failed"

    def save(df: DataFrame, mode: str = "append") -> None:
        (
            df.write.format("slatedb")
            .option("url", url)
            .option("path", "t")
            .option("key", "k")
            .option("value", "v")
            .option("split_points", "k0100")
            .option("app_id", "loader")
            .option("batch_version", "1")
            .mode(mode)
            .save()
        )

    save(flaky_frame(spark, 200, marker))
    assert marker.exists()
    store = open_store(url)
    want = {f"k{i:04d}".encode(): f"v{i}".encode() for i in range(200)}
    assert contents(store) == want
    assert not [m.path for m in store.list("t/_ingest/") if "/staged/" in m.path]
    save(spark.createDataFrame([("k0001", b"again")], "k string, v binary"))
    assert contents(store) == want
    # an overwrite with a retried task too, and the version of the app moving on
    marker.unlink()
    (
        flaky_frame(spark, 50, marker)
        .write.format("slatedb")
        .option("url", url)
        .option("path", "t")
        .option("key", "k")
        .option("value", "v")
        .option("app_id", "loader")
        .option("batch_version", "2")
        .mode("overwrite")
        .save()
    )
    assert marker.exists()
    assert contents(store) == {f"k{i:04d}".encode(): f"v{i}".encode() for i in range(50)}
    with Table.open("t", store) as t:
        assert not t.shard_map.pending and t.value_encoding is None


def test_spark_refuses_columns_into_a_plain_table(registered: SparkSession, url: str) -> None:
    """FIXED (see the driver-side test): through real Spark, before any task runs."""
    spark = registered
    (
        spark.createDataFrame([("a", b"\x00raw")], "k string, v binary")
        .write.format("slatedb")
        .option("url", url)
        .option("path", "t")
        .option("key", "k")
        .option("value", "v")
        .mode("append")
        .save()
    )
    with pytest.raises(Exception, match="plain values"):
        (
            spark.createDataFrame([("b", 2)], "k string, n long")
            .write.format("slatedb")
            .option("url", url)
            .option("path", "t")
            .option("key", "k")
            .mode("append")
            .save()
        )
    got = spark.read.format("slatedb").option("url", url).option("path", "t").load()
    assert got.columns == ["key", "value"]
    assert [(bytes(r["key"]), bytes(r["value"])) for r in got.collect()] == [(b"a", b"\x00raw")]


def test_a_stream_batch_rerun_after_a_partial_commit_and_a_split_is_completed_once(
    url: str,
) -> None:
    """A micro-batch committed to shard 0 only (the driver died before shard 1); then shard 0
    is split (its children carry the batch's record) and shard 1 too (they do not). The
    restarted query (a new plan on the new map) re-runs the batch: the children of shard 0
    skip it, those of shard 1 commit it, and a delete written into shard 0's range after the
    partial commit is not undone."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]):
        pass
    o = options(url, PLAIN, stream=True)
    wp = dw.plan_write(o)
    assert wp.plan is not None
    plan = dw.batch_plan(wp, 3, "stream:q")
    rows = {b"a": b"3", b"c": b"3", b"n": b"3", b"x": b"3"}
    refs = stage_rows(store, wp, plan, rows)
    from_shard0 = [r for r in refs if r.shard == 0]
    done = commit_shard(store, plan, wp.run_id, plan.shards[0], [r.path for r in from_shard0])
    assert done.status == WRITTEN
    with Table.open("t", store) as t:
        with t.writer(0) as db:
            db.delete(b"a")
        t.split(0, b"b")
        t.refresh()
        t.split(2, b"w")
    restarted = dw.plan_write(o)
    assert restarted.plan is not None and len(restarted.plan.shards) == 4
    plan2 = dw.batch_plan(restarted, 3, "stream:q")
    stats = dw.commit_refs(
        store, plan2, restarted.run_id, stage_rows(store, restarted, plan2, rows)
    )
    assert [s.status for s in sorted(stats, key=lambda s: s.shard_index)] == [
        SKIPPED,
        SKIPPED,
        WRITTEN,
        WRITTEN,
    ]
    assert contents(store) == {b"c": b"3", b"n": b"3", b"x": b"3"}


@pytest.mark.parametrize("text", ["1_0", "\u0664\u0662", "1e3", "0x10", "", " "])
def test_batch_version_takes_plain_decimal_digits_only(url: str, text: str) -> None:
    """FIXED. The option went through Python's int(), which also takes "1_0" (10) and other
    scripts' digits ("\u0664\u0662" is 42): a typo became another batch version silently."""
    with pytest.raises(InvalidArgument, match="option 'batch_version'"):
        options(url, PLAIN, app_id="a", batch_version=text)


def test_batch_version_edge_values(url: str) -> None:
    """The version is 0..2**63-1 (Manifest.transactions), checked on the driver."""
    assert options(url, PLAIN, app_id="a", batch_version="0").batch_version == 0
    top = str((1 << 63) - 1)
    assert options(url, PLAIN, app_id="a", batch_version=top).batch_version == (1 << 63) - 1
    for bad in (str(1 << 63), "-1"):
        with pytest.raises(InvalidArgument, match="batch_version"):
            options(url, PLAIN, app_id="a", batch_version=bad)


@pytest.mark.slow
def test_an_overwrite_under_a_running_stream_leaves_each_batch_applied_once(
    registered: SparkSession,
    url: str,
    tmp_path: Path,
) -> None:
    """A running query (file source) whose table is overwritten between two micro-batches:
    the batch before is replaced by the overwrite (it came before it); the batch after lands
    in the new shards (PySpark plans the write of every micro-batch again: docs/spark.md says
    the next batch fails, which only happens when the overwrite lands inside a batch, see
    test_a_stream_commit_uses_the_plan_its_tasks_staged_with); a delete after it holds, and a
    restart from the checkpoint applies nothing twice."""
    spark = registered
    store = open_store(url)
    Table.create("t", store, [b"m"]).close()
    src, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    src.mkdir()

    def put(n: int, rows: dict[str, str]) -> None:
        tmp = src / f".b{n}.tmp"
        tmp.write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in rows.items()))
        tmp.rename(src / f"b{n}.json")

    def start() -> StreamingQuery:
        df = (
            spark.readStream.schema("k string, v string")
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
        )
        return (
            df.writeStream.format("slatedb")
            .option("url", url)
            .option("path", "t")
            .option("key", "k")
            .option("value", "v")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    put(0, {"a": "0", "x": "0"})
    q = start()
    try:
        q.processAllAvailable()
        assert contents(store) == {b"a": b"0", b"x": b"0"}
        (
            spark.createDataFrame([("b", b"ow"), ("y", b"ow")], "k string, v binary")
            .write.format("slatedb")
            .option("url", url)
            .option("path", "t")
            .option("key", "k")
            .option("value", "v")
            .mode("overwrite")
            .save()
        )
        assert contents(store) == {b"b": b"ow", b"y": b"ow"}
        put(1, {"c": "1", "z": "1"})
        q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()
    after = {b"b": b"ow", b"y": b"ow", b"c": b"1", b"z": b"1"}
    assert contents(store) == after
    with Table.open("t", store) as t, t.writer(1) as db:
        db.delete(b"z")
        db.flush_memtable()
    assert b"z" not in contents(store)
    assert_seqs_below_last_l0_seq(store)
    with Table.open("t", store) as t:
        t.overwrite([])  # empty the table: a restart that re-applied a batch would show it
    q = start()
    try:
        put(2, {"d": "2"})
        q.processAllAvailable()
    finally:
        q.stop()
    assert contents(store) == {b"d": b"2"}


def assert_seqs_below_last_l0_seq(store: ObjectStore) -> None:
    """Every row of every shard's L0 carries a seq at or below its manifest's last_l0_seq (a
    writer opened later writes above that: docs/format.md, "Ingested SSTs")."""
    with Table.open("t", store) as t:
        for sh in t.shards:
            m = ManifestStore(store, sh.db_path).read_latest().manifest
            for sst in m.ssts:
                rows = SstReader.open(store, sst_path(sh.db_path, sst.id)).read_all()
                assert max(rows.column("seq").to_pylist()) <= m.last_l0_seq, sh.db_path


def test_a_stream_commit_uses_the_plan_its_tasks_staged_with(url: str) -> None:
    """FIXED. PySpark creates a NEW stream writer for every micro-batch commit
    (pyspark/sql/worker/python_streaming_sink_runner.py calls ``streamWriter()`` again), so
    ``commit()`` planned the write afresh: another seq base, shard map and job than the tasks
    staged with. After an overwrite (fresh shards, low seqs) the commit stated seqs far below
    the rows' own: the shard's last_l0_seq ended below its rows, a delete written afterwards
    got a lower seq than the row it deletes (SlateDB orders versions by seq: the key comes
    back for it and for compaction), and the batch went into shards its tasks never routed
    for. The tasks' plan now travels in their messages and the commit uses it: a batch staged
    on retired shards is refused (ShardMapConflict), and re-run after the restart."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]):
        pass
    o = options(url, PLAIN, stream=True, app_id="s")
    first = dw.plan_write(o)
    assert first.plan is not None
    plan = dw.batch_plan(first, 1000, "s")  # a long-running query: the shards' seqs high
    dw.commit_refs(store, plan, first.run_id, stage_rows(store, first, plan, {b"a": b"0"}))
    started = dw.plan_write(o)  # the query restarts: its tasks get this plan
    with Table.open("t", store) as t:
        t.overwrite([])  # fresh shards, seqs from SEQ_GAP
    rows = {b"a": b"1001", b"b": b"1001"}
    plan = dw.batch_plan(started, 1001, None)
    messages = [dw.StagedRefs(tuple(stage_rows(store, started, plan, rows)), None, started)]
    with pytest.raises(ShardMapConflict):  # committed by the writer Spark creates for it
        dw.SlateDBStreamWriter(dw.plan_write(o)).commit(list(messages), 1001)
    assert contents(store) == {}
    restarted = dw.plan_write(o)
    plan = dw.batch_plan(restarted, 1001, None)
    messages = [dw.StagedRefs(tuple(stage_rows(store, restarted, plan, rows)), None, restarted)]
    dw.SlateDBStreamWriter(dw.plan_write(o)).commit(list(messages), 1001)
    assert contents(store) == rows
    assert_seqs_below_last_l0_seq(store)
    with Table.open("t", store) as t, t.writer(0) as db:
        db.delete(b"a")
        db.flush_memtable()
    assert contents(store) == {b"b": b"1001"}
    assert_seqs_below_last_l0_seq(store)


def test_stream_seqs_grow_with_the_batch_count_not_its_square(url: str) -> None:
    """FIXED. PySpark plans every micro-batch's write again, so each batch's base is already
    above the batch before; the batch id added (b << 36) on top of it made the seqs grow with
    the square of the batch count: about 2**43 after 12 batches, past MAX_STATED_SEQ after some
    10^4, from when on every batch's SSTs were re-encoded at commit instead of linked."""
    store = open_store(url)
    with Table.create("t", store, [b"m"]):
        pass
    o = options(url, PLAIN, stream=True, app_id="s")
    for b in range(12):
        wp = dw.plan_write(o)  # what Spark does for every micro-batch
        plan = dw.batch_plan(wp, b, "s")
        stats = dw.commit_refs(
            store, plan, wp.run_id, stage_rows(store, wp, plan, {b"a": str(b).encode()})
        )
        assert {s.status for s in stats} == {WRITTEN}
    assert plan.seq_base < 13 << 32, plan.seq_base.bit_length()
    assert contents(store) == {b"a": b"11"}
