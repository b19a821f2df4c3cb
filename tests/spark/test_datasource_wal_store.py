"""``df.write.format("slatedb").option("wal_url", ...)``: the shard writers keep their WAL in a
separate object store (SlateDB RFC 0009, ``DbOptions.wal_url``), checked on the driver, never
shown (issue 38, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from slatedb_core import Table, open_store
from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.table.options import TableOptions
from spark_jobs.datasource import SlateDBDataSource
from spark_jobs.datasource_options import WriteOptions

pytestmark = pytest.mark.spark

TABLE = "orders"
SECRET = "s3://walbucket?secret_access_key=hunter2"


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


def test_append_with_wal_url_keeps_the_shards_wal_in_the_wal_store(
    spark: SparkSession, tmp_path: Path
) -> None:
    url, wal_url = (tmp_path / "main").as_uri(), (tmp_path / "wal").as_uri()
    rows = [(f"k{i:04d}", f"v{i}".encode()) for i in range(200)]
    df = spark.createDataFrame(rows, "order_id string, payload binary").repartition(2)
    w = df.write.format("slatedb").option("url", url).option("path", TABLE)
    w = w.option("key", "order_id").option("value", "payload").option("split_points", "k0100")
    w.option("wal_url", wal_url).mode("append").save()
    main, wal = open_store(url), open_store(wal_url)
    assert not [m.path for m in main.list(TABLE) if "/wal/" in m.path]
    wal_objects = [m.path for m in wal.list(TABLE)]
    # the writers' fences, and each shard's WAL store id (slatedb_core.wal.location)
    assert wal_objects and all("/wal/" in p or p.endswith("/_wal_store_id") for p in wal_objects)
    options = TableOptions(
        writer=DbOptions(wal_url=wal_url), reader=DbReaderOptions(wal_url=wal_url)
    )
    with Table.open(TABLE, main, options) as t:
        assert dict(t.scan()) == {k.encode(): v for k, v in rows}


def test_wal_url_option_is_checked_and_never_shown(spark: SparkSession) -> None:
    schema = spark.createDataFrame([("k", b"v")], "order_id string, payload binary").schema
    base = {"url": "memory://x", "path": TABLE, "key": "order_id", "value": "payload"}
    opts = WriteOptions.parse({**base, "wal_url": SECRET}, schema, overwrite=False)
    assert opts.wal_url == SECRET and opts.db_options == DbOptions(wal_url=SECRET)
    assert "hunter2" not in repr(opts) and "hunter2" not in repr(opts.db_options)
    with pytest.raises(InvalidArgument, match="wal_url"):
        WriteOptions.parse({**base, "wal_url": " "}, schema, overwrite=False)
    with pytest.raises(InvalidArgument, match="wal_url"):
        WriteOptions.parse({**base, "wal_url": SECRET}, schema, overwrite=True)
    assert WriteOptions.parse(base, schema, overwrite=False).db_options is None
