"""``spark.read.format("slatedb")``: contents, pushed key filters, snapshots, options, columns."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringEndsWith,
    StringStartsWith,
)
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from slatedb_core import open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.table import Table
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_read import (
    SlateDBPartition,
    SlateDBReader,
    check_read_options,
    read_partition,
)
from spark_jobs.read_filters import KeySelection, prefix_end, select_keys

pytestmark = pytest.mark.spark

TABLE = "t"
KV = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


@pytest.fixture(scope="module")
def spark_ds(spark: SparkSession) -> Iterator[SparkSession]:
    # spark_jobs.session turns on spark.sql.python.filterPushdown.enabled, without which PySpark
    # refuses a reader that takes filters
    spark.dataSource.register(SlateDBDataSource)
    yield spark


def load(spark: SparkSession, url: str, **options: str) -> DataFrame:
    return (
        spark.read.format("slatedb")
        .option("url", url)
        .option("path", TABLE)
        .options(**options)
        .load()
    )


def fill(url: str, n: int, tag: bytes, sst_bytes: int = 2048) -> dict[bytes, bytes]:
    """``n`` keys ``k0000``.. over the table's shards, bulk-ingested as small SSTs."""
    store = open_store(url)
    rows = {b"k%04d" % i: tag + b"%d" % i for i in range(n)}
    with Table.open(TABLE, store) as t:
        for i, shard in enumerate(t.shards):
            mine = {k: v for k, v in rows.items() if shard.contains(k)}
            with t.writer(i, DbOptions(l0_sst_size_bytes=sst_bytes)) as db:
                db.bulk_ingest(
                    pa.table(
                        {
                            "key": pa.array(list(mine), pa.binary()),
                            "value": pa.array(list(mine.values()), pa.binary()),
                        }
                    )
                )
    return rows


def make_table(url: str, n: int = 400, tag: bytes = b"v") -> dict[bytes, bytes]:
    Table.create(TABLE, open_store(url), split_points=[b"k0100", b"k0250"]).close()
    return fill(url, n, tag)


def as_dict(df: DataFrame) -> dict[bytes, bytes]:
    rows = df.collect()
    out = {bytes(r["key"]): bytes(r["value"]) for r in rows}
    assert len(out) == len(rows), "a key came twice"
    return out


def test_a_read_returns_the_table(spark_ds: SparkSession, store_url: str) -> None:
    rows = make_table(store_url)
    store = open_store(store_url)
    with Table.open(TABLE, store) as t, t.writer(1) as db:
        db.delete(b"k0200")
        db.put(b"k0201", b"changed")
        db.flush_memtable()
    del rows[b"k0200"]
    rows[b"k0201"] = b"changed"
    df = load(spark_ds, store_url)
    assert df.schema == KV
    assert as_dict(df) == rows
    assert df.count() == len(rows)


@pytest.mark.s3
def test_a_read_from_s3_returns_the_table(spark_ds: SparkSession, s3_url: str) -> None:
    rows = make_table(s3_url, 150)
    assert as_dict(load(spark_ds, s3_url)) == rows
    key = F.col("key")
    assert as_dict(load(spark_ds, s3_url).where(key == F.lit(b"k0120"))) == {
        b"k0120": rows[b"k0120"]
    }


def _b(s: str) -> Column:
    return F.lit(s.encode())


def KEY() -> Column:
    return F.col("key")


FILTERS: dict[str, Callable[[], Column]] = {
    "eq": lambda: KEY() == _b("k0042"),
    "eq-missing": lambda: KEY() == _b("k9999"),
    "eq-string-literal": lambda: KEY() == F.lit("k0300"),
    "in": lambda: KEY().isin([b"k0001", b"k0150", b"k0399", b"nope", b"k0150"]),
    "lt": lambda: KEY() < _b("k0105"),
    "le": lambda: KEY() <= _b("k0105"),
    "gt": lambda: KEY() > _b("k0390"),
    "ge": lambda: KEY() >= _b("k0390"),
    "range": lambda: (KEY() >= _b("k0095")) & (KEY() < _b("k0260")),
    "range-empty": lambda: (KEY() > _b("k0300")) & (KEY() < _b("k0100")),
    "eq-outside-range": lambda: (KEY() == _b("k0042")) & (KEY() > _b("k0100")),
    "in-and-range": lambda: KEY().isin([b"k0001", b"k0150", b"k0399"]) & (KEY() >= _b("k0100")),
    "startswith": lambda: KEY().startswith(_b("k01")),
    "like": lambda: F.expr("key like 'k02%'"),
    "not-eq": lambda: KEY() != _b("k0042"),
    "or": lambda: (KEY() == _b("k0001")) | (KEY() == _b("k0399")),
    "value": lambda: F.col("value") == _b("v7"),
    "value-and-key": lambda: (F.col("value") == _b("v7")) & (KEY() < _b("k0100")),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_every_filter_returns_what_spark_alone_returns(
    spark_ds: SparkSession, store_url: str, name: str
) -> None:
    make_table(store_url)
    everything = load(spark_ds, store_url).collect()
    cond = FILTERS[name]()
    local = spark_ds.createDataFrame(everything, "key binary, value binary")  # no pushdown
    expected = {bytes(r["key"]): bytes(r["value"]) for r in local.where(cond).collect()}
    assert as_dict(load(spark_ds, store_url).where(cond)) == expected
    if name.startswith(("eq", "in", "range", "lt", "gt", "le", "ge")) and name != "range-empty":
        assert expected or name == "eq-missing" or name == "eq-outside-range"


def test_spark_passes_binary_literals_and_the_reader_keeps_only_what_it_cannot_apply() -> None:
    ends = StringEndsWith(("key",), "x")
    value = EqualTo(("value",), b"v")
    text = EqualTo(("key",), 1)  # neither bytes nor text: left to Spark
    filters: list[Filter] = [
        IsNotNull(("key",)),
        GreaterThanOrEqual(("key",), b"k0100"),
        LessThan(("key",), bytearray(b"k0200")),
        StringStartsWith(("key",), b"k01"),  # type: ignore[arg-type]  # bytes: binary column
        In(("key",), (b"k0150", b"k0199", b"k0300", None)),
        ends,
        value,
        text,
        Not(EqualTo(("key",), b"k0150")),
    ]
    keys, rest = select_keys(filters)
    assert rest == [ends, value, text, filters[-1]]
    assert all(any(r is f for f in filters) for r in rest)
    assert keys == KeySelection(keys.range, (b"k0150", b"k0199"))
    assert (keys.range.start, keys.range.end) == (b"k0100", b"k02")  # the prefix ends first
    empty, _ = select_keys([GreaterThan(("key",), b"b"), LessThanOrEqual(("key",), b"a")])
    assert empty.is_empty
    none, _ = select_keys([EqualTo(("key",), b"a"), EqualTo(("key",), b"b")])
    assert none.is_empty
    assert prefix_end(b"ab\xff") == b"ac" and prefix_end(b"\xff\xff") is None


def _plan(url: str, filters: list[Filter], **options: str) -> list[SlateDBPartition]:
    reader = SlateDBReader({"url": url, "path": TABLE, **options}, KV)
    assert list(reader.pushFilters(filters)) == []
    parts = reader.partitions()
    assert all(isinstance(p, SlateDBPartition) for p in parts)
    return [p for p in parts if isinstance(p, SlateDBPartition)]


def _read(url: str, parts: list[SlateDBPartition]) -> tuple[dict[bytes, bytes], int]:
    """The rows the partitions read and the GET requests the reads made."""
    store = open_store(url)
    out: dict[bytes, bytes] = {}
    for p in parts:
        for b in read_partition(store, p, 1024):
            out.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True))
    return out, store.counters.snapshot()["get"]


def test_pushed_filters_cut_the_partitions_and_points_never_scan(store_url: str) -> None:
    Table.create(TABLE, open_store(store_url), split_points=[b"k1000"]).close()
    rows = fill(store_url, 2000, b"value-" * 20, sst_bytes=64 * 1024)
    small = {"partition_bytes": str(16 * 1024)}  # many partitions per shard
    full = _plan(store_url, [], **small)
    assert len(full) > 4
    got, full_gets = _read(store_url, full)
    assert got == rows
    eq = _plan(store_url, [EqualTo(("key",), b"k0500")], **small)
    assert len(eq) == 1 and [r.points for r in eq[0].reads] == [(b"k0500",)]
    got, eq_gets = _read(store_url, eq)
    assert got == {b"k0500": rows[b"k0500"]}
    keys = [b"k0003", b"k0999", b"k1000", b"k1999", b"zzz"]
    many = _plan(store_url, [In(("key",), tuple(keys))], **small)
    assert len(many) == 1 and sum(len(r.points or ()) for r in many[0].reads) == len(keys)
    got, in_gets = _read(store_url, many)
    assert got == {k: rows[k] for k in keys[:4]}
    narrow = _plan(
        store_url, [GreaterThanOrEqual(("key",), b"k1500"), LessThan(("key",), b"k1510")], **small
    )
    assert len(narrow) == 1 and narrow[0].reads[0].points is None
    got, narrow_gets = _read(store_url, narrow)
    assert got == {k: v for k, v in rows.items() if b"k1500" <= k < b"k1510"}
    # a point read fetches the manifest, the SST's index/filter and one block per key; a scan
    # of the same table every block
    print(f"GETs: full {full_gets}, narrow {narrow_gets}, eq {eq_gets}, in {in_gets}")
    assert eq_gets <= narrow_gets < full_gets / 4
    assert in_gets < full_gets / 4
    assert _plan(store_url, [GreaterThan(("key",), b"b"), LessThan(("key",), b"a")]) == []


def test_a_query_reads_the_snapshot_taken_when_it_was_planned(store_url: str) -> None:
    before = make_table(store_url)
    parts = _plan(store_url, [])
    fill(store_url, 400, b"new")  # after planning, before the tasks read
    with Table.open(TABLE, open_store(store_url)) as t:
        t.split(0, at=b"k0050")
    assert _read(store_url, parts)[0] == before
    assert all(v.startswith(b"new") for v in _read(store_url, _plan(store_url, []))[0].values())


def test_the_checkpoint_option_reads_the_named_snapshot(
    spark_ds: SparkSession, store_url: str
) -> None:
    before = make_table(store_url)
    store = open_store(store_url)
    with Table.open(TABLE, store) as t:
        t.snapshot(name="end-of-day")
    fill(store_url, 400, b"later")
    with Table.open(TABLE, store) as t, t.writer(0) as db:
        db.delete(b"k0001")
        db.flush_memtable()
    assert as_dict(load(spark_ds, store_url, checkpoint="end-of-day")) == before
    latest = as_dict(load(spark_ds, store_url))
    assert b"k0001" not in latest and latest[b"k0002"] == b"later2"
    one = load(spark_ds, store_url, checkpoint="end-of-day").where(KEY() == _b("k0001"))
    assert as_dict(one) == {b"k0001": before[b"k0001"]}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"path": TABLE}, "url"),
        ({"url": "<url>"}, "path"),
        ({"url": "<url>", "path": TABLE, "checkpoint": "nope"}, "checkpoint"),
        ({"url": "<url>", "path": TABLE, "checkpoint": "../x"}, "checkpoint"),
        ({"url": "<url>", "path": TABLE, "batch_size": "many"}, "batch_size"),
        ({"url": "<url>", "path": TABLE, "batch_size": "0"}, "batch_size"),
        ({"url": "<url>", "path": TABLE, "snapshot_lifetime_s": "-1"}, "snapshot_lifetime_s"),
        ({"url": "<url>", "path": TABLE, "partition_bytes": "1e9x"}, "partition_bytes"),
        (
            {"url": "<url>", "path": TABLE, "max_partitions_per_shard": "0"},
            "max_partitions_per_shard",
        ),
        ({"url": "<url>", "path": "no-such-table"}, "path"),
    ],
)
def test_bad_options_fail_naming_the_option(
    spark_ds: SparkSession, store_url: str, options: dict[str, str], named: str
) -> None:
    make_table(store_url, 10)
    opts = {k: v.replace("<url>", store_url) for k, v in options.items()}
    with pytest.raises(InvalidArgument, match=f"option '{named}'"):
        check_read_options(opts)
    with pytest.raises(Exception, match=f"option '{named}'"):
        spark_ds.read.format("slatedb").options(**opts).load().collect()


def _typed_frame(spark: SparkSession) -> DataFrame:
    rows = [
        (
            f"k{i:03d}",
            i,
            i * 0.5,
            None if i % 3 == 0 else f"name {i}\nline",
            bytes([i, 0, 255]),
            datetime(2024, 1, 1, 12, i % 60, tzinfo=UTC),
            i % 2 == 0,
        )
        for i in range(60)
    ]
    return spark.createDataFrame(
        rows, "id string, n bigint, x double, s string, b binary, ts timestamp, flag boolean"
    )


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_encoded_values_read_back_as_their_columns(
    spark_ds: SparkSession, store_url: str, fmt: str
) -> None:
    df = _typed_frame(spark_ds)
    (
        df.write.format("slatedb")
        .option("url", store_url)
        .option("path", TABLE)
        .option("key", "id")
        .option("value_format", fmt)
        .option("split_points", "k030")
        .mode("append")
        .save()
    )
    columns = StructType(df.schema.fields[1:])
    with Table.open(TABLE, open_store(store_url)) as t:
        encoding = t.value_encoding
    assert encoding is not None and encoding.format == fmt
    assert StructType.fromJson(json.loads(encoding.schema)) == columns
    got = load(spark_ds, store_url)
    assert got.schema.fieldNames() == ["key", *columns.fieldNames()]
    assert got.schema.fields[1:] == columns.fields
    want = {r["id"].encode(): r.asDict() for r in df.collect()}
    for r in got.collect():
        d = r.asDict()
        expected = want.pop(bytes(d.pop("key")))
        del expected["id"]
        d["b"] = bytes(d["b"])
        assert d == expected
    assert not want
    one = got.where((KEY() == _b("k007")) & (F.col("n") > 3)).collect()
    assert [r["n"] for r in one] == [7]


def test_a_named_snapshot_that_expired_fails_naming_the_option(store_url: str) -> None:
    make_table(store_url, 50)
    store = open_store(store_url)
    with Table.open(TABLE, store) as t:
        t.snapshot(timedelta(seconds=1), name="brief")
    time.sleep(2.1)  # expiry times are whole seconds
    reader = SlateDBReader({"url": store_url, "path": TABLE, "checkpoint": "brief"}, KV)
    with pytest.raises(InvalidArgument, match="option 'checkpoint': snapshot 'brief' has expired"):
        reader.partitions()


def test_string_keys_push_prefixes_and_comparisons(spark_ds: SparkSession, store_url: str) -> None:
    """With key_type=string the key is text: Spark 4.3 then pushes startswith (it never does on a
    binary column) and string comparisons, folded as their UTF-8 bytes."""
    rows = make_table(store_url)
    text = {k.decode(): v for k, v in rows.items()}
    df = load(spark_ds, store_url, key_type="string")
    assert df.schema["key"].dataType.simpleString() == "string"
    assert {r["key"]: bytes(r["value"]) for r in df.collect()} == text
    got = load(spark_ds, store_url, key_type="string").where(F.col("key").startswith("k01"))
    assert {r["key"]: bytes(r["value"]) for r in got.collect()} == {
        k: v for k, v in text.items() if k.startswith("k01")
    }
    got = load(spark_ds, store_url, key_type="string").where(
        (F.col("key") >= "k0390") | (F.col("key") == "k0007")
    )
    assert {r["key"] for r in got.collect()} == {k for k in text if k >= "k0390" or k == "k0007"}
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    reader = SlateDBReader({"url": store_url, "path": TABLE, "key_type": "string"}, schema)
    assert list(reader.pushFilters([StringStartsWith(("key",), "k01")])) == []
    parts = [p for p in reader.partitions() if isinstance(p, SlateDBPartition)]
    ranges = [r.key_range for p in parts for r in p.reads]  # the prefix's range, per shard
    assert ranges and all(
        r.start is not None and r.end is not None and b"k01" <= r.start and r.end <= b"k02"
        for r in ranges
    )


def test_a_key_that_is_not_utf8_fails_a_string_read(spark_ds: SparkSession, store_url: str) -> None:
    Table.create(TABLE, open_store(store_url)).close()
    with Table.open(TABLE, open_store(store_url)) as t, t.writer(0) as db:
        db.put(b"\xff\xfe", b"v")
        db.flush_memtable()
    with pytest.raises(Exception, match="option 'key_type'"):
        load(spark_ds, store_url, key_type="string").collect()
    with pytest.raises(Exception, match="option 'key_type'"):
        load(spark_ds, store_url, key_type="utf16").collect()
    assert as_dict(load(spark_ds, store_url)) == {b"\xff\xfe": b"v"}
