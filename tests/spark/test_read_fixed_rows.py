"""``spark.read.format("slatedb")`` of shards whose SSTs hold rows of one shape, which the Spark
workers decode by columns (:mod:`slatedb_core.sst.decode_fixed`; issue 42, goal 4), beside SSTs
the general walk decodes: the rows are a model's and the Db scans' (read in this process with the
fixed-shape decoder switched off), with tombstones hidden (an SST of deletes only is itself of
one shape), TTL-expired rows hidden, merge operands folded (an SST of operands only, too), and a
named snapshot read as it was when it was taken."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from slatedb_core import DbReader, DbReaderOptions, Table, open_store
from slatedb_core.options import DbOptions
from slatedb_core.sst.decode import Decoded
from slatedb_core.sst.decode_fixed import decode_fixed
from slatedb_core.writer.db import Db
from spark_jobs.datasource import SlateDBDataSource

pytestmark = [pytest.mark.spark]

FIXED = "slatedb_core.sst.block.decode_fixed"  # where the block decoder looks it up


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    spark.dataSource.register(SlateDBDataSource)


def i64(n: int) -> bytes:
    return (n % (1 << 64)).to_bytes(8, "little")


def key(shard: int, i: int) -> bytes:
    return bytes([shard * 0x80]) + i.to_bytes(7, "big")


def test_fixed_rows_read_as_the_db_scans_them(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = (tmp_path / "store").as_uri()
    store = open_store(url)
    n = 3000
    model: dict[bytes, bytes] = {}
    with Table.create("t", store, [b"\x80"]) as t:
        paths = [s.db_path for s in t.shards]
    opts = DbOptions(merge_operator="add_int64")
    for s, path in enumerate(paths):
        with Db.open(path, store, opts) as db:
            keys = [key(s, i) for i in range(n)]
            vals = [i64(i * 3) for i in range(n)]
            db.put_arrow(pa.table({"key": keys, "value": vals}))
            db.flush_memtable()  # an L0 SST of plain values of one width
            model.update(zip(keys, vals, strict=True))
            for i in range(0, n, 5):  # an SST of deletes only (empty values: one shape)
                db.delete(key(s, i), await_durable=False)
                model.pop(key(s, i))
            db.flush_memtable()
            for i in range(1, n, 7):  # an SST of merge operands only
                db.merge(key(s, i), i64(1000), await_durable=False)
                if key(s, i) in model:
                    model[key(s, i)] = i64(int.from_bytes(model[key(s, i)], "little") + 1000)
                else:
                    model[key(s, i)] = i64(1000)
            db.flush_memtable()
            for i in range(2, n, 11):  # rows with TTLs: some expire (the general walk)
                db.put(key(s, i), i64(-i), ttl=1 if i % 2 else 3_600_000, await_durable=False)
                if i % 2:
                    model.pop(key(s, i), None)
                else:
                    model[key(s, i)] = i64(-i)
            time.sleep(0.05)  # the 1 ms TTLs are past when the next write ticks the clock
            db.put(key(s, n + 1), b"a longer value of another width", await_durable=False)
            model[key(s, n + 1)] = b"a longer value of another width"
            db.flush_memtable()
    with Table.open("t", store) as t:
        named = t.snapshot(name="before")
    for s, path in enumerate(paths):
        with Db.open(path, store, opts) as db:  # after the snapshot: not in its rows
            db.put(key(s, 1), i64(77))
            db.flush_memtable()

    def read(**options: str) -> dict[bytes, bytes]:
        r = spark.read.format("slatedb").option("url", url).option("path", "t")
        r = r.option("merge_operator", "add_int64")
        for k, v in options.items():
            r = r.option(k, v)
        return {bytes(x.key): bytes(x.value) for x in r.load().collect()}

    def scan_all() -> dict[bytes, bytes]:
        out: dict[bytes, bytes] = {}
        for path in paths:
            with DbReader.open(path, store, None, DbReaderOptions(merge_operator="add_int64")) as r:
                out.update(r.scan())
        return out

    real, shaped = decode_fixed, []

    def counting(raw: pa.Buffer, spans: list[tuple[int, int]]) -> Decoded | None:
        got = real(raw, spans)
        shaped.append(got is not None)
        return got

    monkeypatch.setattr(FIXED, counting)
    by_columns = scan_all()
    # the values', the deletes' and the operands' SSTs of each shard by columns, the TTL rows' not
    assert shaped.count(True) >= 3 * len(paths) and False in shaped
    monkeypatch.setattr(FIXED, lambda *_: None)  # this process only
    scanned = scan_all()
    assert by_columns == scanned
    assert named is not None
    assert read(checkpoint="before") == model
    latest = dict(model)
    latest[key(0, 1)] = latest[key(1, 1)] = i64(77)
    assert scanned == latest
    assert read() == latest
