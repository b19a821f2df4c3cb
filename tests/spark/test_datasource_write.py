"""``df.write.format("slatedb")``: appends (upserts), encoded columns, save modes, overwrite,
exactly-once batches and the options checked before any task runs (docs/spark.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from slatedb_core import Table, ValueEncoding, open_store
from slatedb_core.store.objectstore import ObjectStore
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.write_tasks import decode_arrow_value

pytestmark = pytest.mark.spark

TABLE = "orders"


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


def rows_frame(spark: SparkSession, n: int, tag: str = "v", parts: int = 3) -> DataFrame:
    rows = [(f"k{i:04d}", f"{tag}{i}".encode()) for i in range(n)]
    return spark.createDataFrame(rows, "order_id string, payload binary").repartition(parts)


def writer(df: DataFrame, url: str, **options: object) -> object:
    w = df.write.format("slatedb").option("url", url).option("path", TABLE)
    for k, v in options.items():
        w = w.option(k, v)  # type: ignore[arg-type]
    return w


def contents(store: ObjectStore, path: str = TABLE) -> dict[bytes, bytes]:
    with Table.open(path, store) as t:
        return dict(t.scan())


def listing(url: str) -> list[str]:
    return sorted(m.path for m in open_store(url).list(""))


def test_append_creates_the_table_and_upserts(spark: SparkSession, store_url: str) -> None:
    writer(
        rows_frame(spark, 300),
        store_url,
        key="order_id",
        value="payload",
        split_points="k0100,k0200",
    ).mode("append").save()
    store = open_store(store_url)
    with Table.open(TABLE, store) as t:
        assert t.shard_map.split_points == (b"k0100", b"k0200")
        assert t.value_encoding is None
    want = {f"k{i:04d}".encode(): f"v{i}".encode() for i in range(300)}
    assert contents(store) == want
    # append = upsert by key; a tombstone column deletes
    upd = spark.createDataFrame(
        [("k0005", b"new", False), ("k0150", b"x", True), ("k0400", b"added", False)],
        "order_id string, payload binary, gone boolean",
    )
    writer(upd, store_url, key="order_id", value="payload", tombstone="gone").mode("append").save()
    want[b"k0005"] = b"new"
    del want[b"k0150"]
    want[b"k0400"] = b"added"
    assert contents(store) == want


@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_columns_are_encoded_and_the_schema_recorded(
    spark: SparkSession, store_url: str, fmt: str
) -> None:
    df = spark.createDataFrame(
        [(b"a", 1, "x", 2.5), (b"b", None, "y", None)],
        "id binary, qty long, name string, price double",
    )
    writer(df, store_url, key="id", value_format=fmt).mode("append").save()
    store = open_store(store_url)
    with Table.open(TABLE, store) as t:
        enc = t.value_encoding
        assert enc is not None and enc.format == fmt
        assert [f["name"] for f in json.loads(enc.schema)["fields"]] == ["qty", "name", "price"]
        got = dict(t.scan())
    if fmt == "json":
        assert json.loads(got[b"a"]) == {"qty": 1, "name": "x", "price": 2.5}
        assert json.loads(got[b"b"]) == {"name": "y"}
    else:
        assert decode_arrow_value(got[b"a"]) == {"qty": 1, "name": "x", "price": 2.5}
        assert decode_arrow_value(got[b"b"]) == {"qty": None, "name": "y", "price": None}
    # other columns into the same table are refused before anything is written
    other = spark.createDataFrame([(b"c", 3)], "id binary, qty int")
    with pytest.raises(Exception, match="holds"):
        writer(other, store_url, key="id", value_format=fmt).mode("append").save()
    with pytest.raises(Exception, match="option 'value'"):
        writer(
            spark.createDataFrame([(b"c", b"v")], "id binary, v binary"),
            store_url,
            key="id",
            value="v",
        ).mode("append").save()
    assert set(contents(store)) == {b"a", b"b"}


def test_save_modes(spark: SparkSession, store_url: str) -> None:
    df = rows_frame(spark, 20)
    # error on a missing table creates it
    writer(df, store_url, key="order_id", value="payload", mode="error").mode("append").save()
    store = open_store(store_url)
    before = contents(store)
    assert len(before) == 20
    other = rows_frame(spark, 40, tag="w")
    with pytest.raises(Exception, match="option 'mode' is error"):
        writer(other, store_url, key="order_id", value="payload", mode="error").mode(
            "append"
        ).save()
    writer(other, store_url, key="order_id", value="payload", mode="ignore").mode("append").save()
    assert contents(store) == before
    # Spark itself refuses .mode("error") / .mode("ignore") for Python data sources
    for mode in ("error", "ignore"):
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            writer(other, store_url, key="order_id", value="payload").mode(mode).save()
    with pytest.raises(Exception, match="option 'mode'"):
        writer(other, store_url, key="order_id", value="payload", mode="upsert").mode(
            "append"
        ).save()
    assert contents(store) == before


def test_overwrite_replaces_the_contents(spark: SparkSession, store_url: str) -> None:
    writer(
        rows_frame(spark, 300),
        store_url,
        key="order_id",
        value="payload",
        split_points="k0100,k0200",
    ).mode("append").save()
    store = open_store(store_url)
    with Table.open(TABLE, store) as t:
        old_dbs = {s.db_path for s in t.shards}
        snap = t.snapshot()
    writer(rows_frame(spark, 50, tag="o"), store_url, key="order_id", value="payload").mode(
        "overwrite"
    ).save()
    assert contents(store) == {f"k{i:04d}".encode(): f"o{i}".encode() for i in range(50)}
    with Table.open(TABLE, store) as t:
        assert t.shard_map.split_points == (b"k0100", b"k0200")
        assert not old_dbs & {s.db_path for s in t.shards}
    with Table.open(TABLE, store, snapshot=snap) as old:  # a snapshot from before reads before
        assert len(dict(old.scan())) == 300
    # an overwrite may change the columns
    df = spark.createDataFrame([("k1", 1)], "order_id string, qty int")
    writer(df, store_url, key="order_id").mode("overwrite").save()
    with Table.open(TABLE, store) as t:
        assert t.value_encoding is not None and t.value_encoding.format == "json"
        assert dict(t.scan()) == {b"k1": b'{"qty":1}'}


def test_exactly_once_batches(spark: SparkSession, store_url: str) -> None:
    def write(tag: str, version: int, n: int = 300) -> None:
        writer(
            rows_frame(spark, n, tag=tag),
            store_url,
            key="order_id",
            value="payload",
            split_points="k0100,k0200",
            app_id="loader",
            batch_version=version,
        ).mode("append").save()

    write("a", 7)
    store = open_store(store_url)
    first = contents(store)
    write("b", 7)  # the same batch again, other values: a no-op on every shard
    assert contents(store) == first
    write("c", 3)  # an older batch: a no-op
    assert contents(store) == first
    write("d", 8)
    assert contents(store) == {f"k{i:04d}".encode(): f"d{i}".encode() for i in range(300)}
    # another app id is independent
    writer(
        rows_frame(spark, 10, tag="e"),
        store_url,
        key="order_id",
        value="payload",
        app_id="other",
        batch_version=1,
    ).mode("append").save()
    assert contents(store)[b"k0001"] == b"e1"


@pytest.mark.parametrize(
    "options, match",
    [
        ({"path": TABLE, "key": "order_id"}, "option 'url'"),
        ({"url": None, "key": "order_id"}, "option 'path'"),
        ({"url": None, "path": TABLE}, "option 'key'"),
        ({"url": None, "path": TABLE, "key": "n"}, "option 'key'.*string or binary"),
        ({"url": None, "path": TABLE, "key": "nope"}, "option 'key'.*no column"),
        ({"url": None, "path": TABLE, "key": "order_id", "mode": "merge"}, "option 'mode'"),
        ({"url": None, "path": TABLE, "key": "order_id", "batch_version": "4"}, "app_id"),
        ({"url": None, "path": TABLE, "key": "order_id", "app_id": "a"}, "batch_version"),
        (
            {"url": None, "path": TABLE, "key": "order_id", "app_id": "a", "batch_version": "x"},
            "option 'batch_version'",
        ),
        ({"url": None, "path": TABLE, "key": "order_id", "value": "n"}, "option 'value'"),
        (
            {"url": None, "path": TABLE, "key": "order_id", "split_points": "b,a"},
            "option 'split_points'",
        ),
        (
            {"url": None, "path": TABLE, "key": "order_id", "value_format": "csv"},
            "option 'value_format'",
        ),
        ({"url": None, "path": TABLE, "key": "order_id", "colour": "red"}, "unknown option"),
        ({"url": None, "path": "../up", "key": "order_id"}, "path"),
    ],
)
def test_bad_options_fail_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, options: dict[str, object], match: str
) -> None:
    url = (tmp_path / "bad").as_uri()
    df = spark.createDataFrame([("k1", b"v", 1)], "order_id string, payload binary, n int")
    w = df.write.format("slatedb")
    for k, v in options.items():
        w = w.option(k, url if v is None else v)  # type: ignore[arg-type]
    with pytest.raises(Exception, match=match):
        w.mode("append").save()
    assert not (tmp_path / "bad").exists() or listing(url) == []


def test_split_points_only_when_creating(spark: SparkSession, store_url: str) -> None:
    writer(
        rows_frame(spark, 10), store_url, key="order_id", value="payload", split_points="k0005"
    ).mode("append").save()
    before = contents(open_store(store_url))
    with pytest.raises(Exception, match="option 'split_points' applies only"):
        writer(
            rows_frame(spark, 10, tag="z"),
            store_url,
            key="order_id",
            value="payload",
            split_points="k0003",
        ).mode("append").save()
    assert contents(open_store(store_url)) == before


@pytest.mark.s3
def test_append_and_read_on_s3(spark: SparkSession, s3_url: str) -> None:
    writer(
        rows_frame(spark, 200), s3_url, key="order_id", value="payload", split_points="k0100"
    ).mode("append").save()
    got = spark.read.format("slatedb").option("url", s3_url).option("path", TABLE).load()
    assert {bytes(r["key"]): bytes(r["value"]) for r in got.collect()} == {
        f"k{i:04d}".encode(): f"v{i}".encode() for i in range(200)
    }


def test_value_encoding_round_trips_through_reads(spark: SparkSession, store_url: str) -> None:
    df = spark.createDataFrame([("a", 1, "x"), ("b", 2, None)], "id string, qty long, name string")
    writer(df, store_url, key="id").mode("append").save()
    with Table.open(TABLE, open_store(store_url)) as t:
        assert isinstance(t.value_encoding, ValueEncoding)
    got = spark.read.format("slatedb").option("url", store_url).option("path", TABLE).load()
    assert got.columns == ["key", "qty", "name"]
    assert sorted((bytes(r["key"]), r["qty"], r["name"]) for r in got.collect()) == [
        (b"a", 1, "x"),
        (b"b", 2, None),
    ]
