"""``spark.read.format("slatedb").option("wal_url", ...).option("merge_operator", ...)`` of a table
whose shard SlateDB 0.17 writes with a separate WAL store (SlateDB RFC 0009) and its
``add_int64`` merge operator (RFC 0006), part of it only in the WAL (issue 38, items 2 and 4: the
read options took neither, so the query's snapshot missed SlateDB's WAL tail and the operands
could not be folded).

With both options the query returns SlateDB's own values; without ``wal_url`` it fails with
``WalStoreMissing``, and without ``merge_operator`` with ``MergeOperatorMissing``: never stale or
partial rows. Also ``spark_jobs.read.read_table``'s keywords of the same names."""

from __future__ import annotations

from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_read import ReadOptions
from spark_jobs.read import read_table
from tests.interop.oracle import SlateWriter, settings
from tests.interop.oracle_merge_read import AddInt64, merge
from tests.interop.oracle_wal import WalOracle

pytestmark = [pytest.mark.spark, pytest.mark.slatedb]


def i64(n: int) -> bytes:
    return (n % (1 << 64)).to_bytes(8, "little")


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


def test_read_with_wal_url_and_merge_operator(spark: SparkSession, tmp_path: Path) -> None:
    root, wal_root = tmp_path / "main", tmp_path / "wal"
    root.mkdir()
    wal_root.mkdir()
    url, wal_url = root.as_uri(), wal_root.as_uri()
    with Table.create("t", open_store(url), [b"m"]) as t:
        shard = t.shards[0].db_path
    o = WalOracle(root, wal_root)
    try:
        builder = sdb.DbBuilder(shard, o.store())
        builder.with_wal_object_store(o.wal_store())
        builder.with_merge_operator(AddInt64())
        builder.with_settings(settings(compactor=False))
        w = SlateWriter(o, o.run(builder.build()))
        o._open.append(w.db.shutdown)
        w.put(b"a/count", i64(5))
        merge(w, b"a/count", i64(2))
        w.put(b"b/plain", b"flushed")
        w.flush_memtable()
        merge(w, b"a/count", i64(10))  # durable, only in the WAL store
        w.put(b"c/tail", b"tail")
        want = {b"a/count": i64(17), b"b/plain": b"flushed", b"c/tail": b"tail"}
        assert {k: w.get(k) for k in want} == want

        def read(**opts: str) -> dict[bytes, bytes]:
            r = spark.read.format("slatedb").option("url", url).option("path", "t")
            for k, v in opts.items():
                r = r.option(k, v)
            return {bytes(x.key): bytes(x.value) for x in r.load().collect()}

        assert read(wal_url=wal_url, merge_operator="add_int64") == want
        with pytest.raises(Exception, match="WalStoreMissing"):
            read(merge_operator="add_int64")
        with pytest.raises(Exception, match="MergeOperatorMissing"):
            read(wal_url=wal_url)
        df = read_table(spark, url, "t", "create", wal_url=wal_url, merge_operator="add_int64")
        assert {bytes(x.key): bytes(x.value) for x in df.collect()} == want
    finally:
        o.close()


def test_read_options_check_merge_operator_and_hide_wal_url() -> None:
    base = {"url": "memory://x", "path": "t"}
    opts = ReadOptions.parse({**base, "wal_url": "s3://b?secret_access_key=hunter2"})
    assert "hunter2" not in repr(opts)
    with pytest.raises(InvalidArgument, match="merge_operator"):
        ReadOptions.parse({**base, "merge_operator": "no_such_op"})
