"""Spark partitions read by one unordered scan each (review 53 of 8b7c7cf, issue 42 goal 4).

A table of three shards, each with overlapping L0 SSTs and a sorted run (newer versions,
deletes and keys of several widths across them), read in many partitions per shard with the
smallest task memory (a read budget of 256 KiB shared by the sources):

- in process: the partitions' ranges tile each shard; every partition's rows lie in its range;
  no row comes in two partitions and none is lost (the dict model); a partition read again, as
  Spark retries a task, gives the same rows, no more; a key filter whose range holds no row
  plans partitions that read nothing;
- in process, random tables (puts, deletes, merge operands, flushes, compactions over two
  shards) in many small partitions, each read twice: the dict model;
- in Spark: a read whose first task fails after it returned a batch (an injected failure, see
  tests/spark/read_retry_steps.py) is retried by Spark, and the query holds each row once; the
  same with ``key_type=string``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle
from pyspark.sql import SparkSession

import spark_jobs.datasource_read as dr
from slatedb_core import open_store
from slatedb_core.compactor import run_compaction_once
from slatedb_core.keys import KeyRange
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.table import Table
from spark_jobs.datasource_read import SlateDBPartition, SlateDBReader, read_partition
from tests.spark import read_retry_steps

pytestmark = pytest.mark.spark

MiB = 1 << 20
SPLITS = [b"k030000", b"k060000"]


def _table(url: str) -> dict[bytes, bytes]:
    """Three shards; in each, a sorted run then three overlapping L0 SSTs rewriting and deleting
    keys of the ones before; a few keys one byte longer (``k0xxxxx!``)."""
    store = open_store(url)
    Table.create("t", store, split_points=SPLITS).close()
    rows: dict[bytes, bytes] = {}
    with Table.open("t", store) as t:
        for i, shard in enumerate(t.shards):
            path = shard.db_path
            with t.writer(i, DbOptions(l0_sst_size_bytes=1 << 20, block_size=1024)) as db:
                for r in range(4):
                    for j in range(r, 90_000, 3 + r):
                        k = b"k%06d" % j
                        if not shard.contains(k):
                            continue
                        if j % 17 == 0:
                            k += b"!"
                        v = b"r%d-" % r + b"x" * (j % 40)
                        db.put(k, v, await_durable=False)
                        rows[k] = v
                    for j in range(r * 7, 90_000, 29):
                        k = b"k%06d" % j
                        if shard.contains(k):
                            db.delete(k, await_durable=False)
                            rows.pop(k, None)
                    db.flush_memtable()
                    if r == 0:
                        run_compaction_once(path, store, CompactorOptions(l0_trigger=1))
    return rows


def _reader(url: str, **opts: str) -> tuple[SlateDBReader, list[SlateDBPartition]]:
    options = {"url": url, "path": "t", "task_memory_bytes": str(4 * MiB)}
    options.update(opts)
    reader = SlateDBReader(options, dr._schema_of(None))
    return reader, [p for p in reader.partitions() if isinstance(p, SlateDBPartition)]


def _rows(batches: list[pa.RecordBatch]) -> Counter[tuple[bytes, bytes]]:
    return Counter(
        kv
        for b in batches
        for kv in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
    )


@pytest.mark.slow
def test_partitions_tile_the_table_and_a_retried_partition_reads_the_same(
    store_url: str,
) -> None:
    rows = _table(store_url)
    reader, parts = _reader(store_url, partition_bytes=str(64 * 1024))
    assert len(parts) >= 6  # several partitions per shard
    store = open_store(store_url)
    total: Counter[tuple[bytes, bytes]] = Counter()
    ranges: dict[str, list[KeyRange]] = {}
    for p in parts:
        (r,) = p.reads
        ranges.setdefault(r.db_path, []).append(r.key_range)
        first = list(read_partition(store, p, 1000, read_budget=reader.options.read_budget))
        again = list(read_partition(store, p, 7, read_budget=1))  # a retry, smaller batches
        got = _rows(first)
        assert got == _rows(again)
        assert all(r.key_range.contains(k) for k, _ in got)
        assert not (set(got) & set(total)), "a row in two partitions"
        total.update(got)
    assert total == Counter(rows.items())
    for cuts in ranges.values():  # each shard's ranges follow each other without a gap
        assert all(a.end == b.start for a, b in itertools.pairwise(cuts))


@pytest.mark.slow
def test_a_key_range_without_rows_reads_nothing(store_url: str) -> None:
    _table(store_url)
    store = open_store(store_url)
    _, parts = _reader(store_url)
    # keys after k000001 and before k000001! (the table holds none)
    empty = KeyRange(b"k000001\x00", b"k000001!")
    for p in parts:
        (r,) = p.reads
        if r.key_range.contains(b"k000001"):
            part = SlateDBPartition((dr.ShardRead(r.db_path, r.checkpoint, empty),), None)
            assert list(read_partition(store, part, 100, read_budget=1)) == []
            break
    else:
        raise AssertionError("no partition holds k000001")


@pytest.fixture(scope="module")
def flaky(spark: SparkSession) -> SparkSession:
    cloudpickle.register_pickle_by_value(read_retry_steps)  # type: ignore[no-untyped-call]
    spark.dataSource.register(read_retry_steps.FlakySlateDBDataSource)
    return spark


@pytest.mark.slow
@pytest.mark.parametrize("key_type", ["binary", "string"])
def test_spark_retries_a_failed_read_task_without_a_row_twice(
    flaky: SparkSession, store_url: str, key_type: str
) -> None:
    rows = _table(store_url)
    marker = Path(store_url.removeprefix("file://")) / read_retry_steps.FLAKY_MARKER
    marker.touch()
    df = (
        flaky.read.format("slatedb_flaky")
        .option("url", store_url)
        .option("path", "t")
        .option("partition_bytes", str(64 * 1024))
        .option("task_memory_bytes", str(4 * MiB))
        .option("batch_size", "500")
        .option("key_type", key_type)
        .load()
    )
    got = Counter(
        (r["key"].encode() if key_type == "string" else bytes(r["key"]), bytes(r["value"]))
        for r in df.collect()
    )
    assert not marker.exists(), "no task failed: the retry was not exercised"
    assert got == Counter(rows.items())


_KEY = st.one_of(
    st.integers(0, 300).map(lambda i: b"k%06d" % (i * 300)),  # one width, both shards
    st.binary(min_size=1, max_size=9).map(lambda b: b"k" + b),  # other widths
)
_OP = st.tuples(
    st.sampled_from(["put", "put", "put", "delete", "merge", "flush", "compact"]),
    _KEY,
    st.binary(max_size=12),
)


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(_OP, min_size=1, max_size=150), partition_bytes=st.sampled_from([512, 4096]))
def test_random_tables_read_as_the_model_in_any_partitions(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, bytes, bytes]],
    partition_bytes: int,
) -> None:
    """Random puts, deletes, merge operands, flushes and compactions over two shards, read in
    many small partitions, each twice (a retry) with a one-byte read budget: the union is the
    dict model, no row twice, each partition's rows the same both times."""
    url = tmp_path_factory.mktemp("t").as_uri()
    store = open_store(url)
    Table.create("t", store, split_points=SPLITS[:1]).close()
    model: dict[bytes, bytes | None] = {}
    opts = DbOptions(block_size=64, merge_operator="string_append")
    with Table.open("t", store) as t:
        writers = [t.writer(i, opts) for i in range(len(t.shards))]
        try:
            for op, key, value in ops:
                i = next(j for j, s in enumerate(t.shards) if s.contains(key))
                db = writers[i]
                if op == "put":
                    db.put(key, value, await_durable=False)
                    model[key] = value
                elif op == "delete":
                    db.delete(key, await_durable=False)
                    model[key] = None
                elif op == "merge":
                    db.merge(key, value, await_durable=False)
                    model[key] = (model.get(key) or b"") + value
                elif op == "flush":
                    db.flush_memtable()
                else:
                    db.flush_memtable()
                    run_compaction_once(
                        t.shards[i].db_path,
                        store,
                        CompactorOptions(l0_trigger=1, merge_operator="string_append"),
                    )
        finally:
            for db in writers:
                db.close()
    reader, parts = _reader(
        url, partition_bytes=str(partition_bytes), merge_operator="string_append"
    )
    ropts = reader.options.reader_options()
    total: Counter[tuple[bytes, bytes]] = Counter()
    for p in parts:
        first = _rows(list(read_partition(store, p, 3, ropts, read_budget=1)))
        assert first == _rows(list(read_partition(store, p, 1000, ropts, read_budget=None)))
        total.update(first)
    assert total == Counter((k, v) for k, v in model.items() if v is not None)
