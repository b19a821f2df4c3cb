"""The rows of our WAL SSTs: one per write, in seq order, a key repeated as often as it was
written (SlateDB 0.17's WAL SSTs are the same; its replay and ours apply rows in order, so the
newest row of a key wins). A write buffer is no longer sorted by key or deduplicated before it
is encoded."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.lsm.memtable import Memtable
from slatedb_core.options import DbOptions
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.log import WalLog, encode_wal_sst
from slatedb_core.wal.pipeline import WalBuffer
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop import conftest as interop
from tests.interop.expect import Model, check_reads, scanner
from tests.interop.oracle import Oracle, settings

# the wheel's fixtures, shared with tests/interop (one harness)
oracle = interop.oracle
root = interop.root
store = interop.store


def _arrow_batch(keys: list[bytes], first_seq: int, values: list[bytes | None]) -> pa.RecordBatch:
    n = len(keys)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(np.arange(first_seq, first_seq + n, dtype=np.uint64)),
            pa.array([1 if v is None else 0 for v in values], pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def test_buffer_rows_every_write_in_seq_order() -> None:
    one = WalBuffer()
    arrow = _arrow_batch([b"b", b"a", b"b"], 1, [b"b1", b"a2", b"b3"])
    one.batches.append(arrow)
    assert one.to_batch() is arrow  # one part, already in seq order: no copy, no sort
    buf = WalBuffer()
    buf.keys += [b"z", b"a"]
    buf.seqs += [1, 2]
    buf.values += [b"z1", None]
    buf.batches.append(_arrow_batch([b"a", b"c", b"a"], 3, [b"a3", b"c4", b"a5"]))
    rows = buf.to_batch()
    # the puts in lists come after the arrow parts; every row is kept (no dedup)
    assert rows.column("key").to_pylist() == [b"a", b"c", b"a", b"z", b"a"]
    assert rows.column("seq").to_pylist() == [3, 4, 5, 1, 2]
    assert rows.column("kind").to_pylist() == [0, 0, 0, 0, 1]
    wal = WalLog(None, "db")  # type: ignore[arg-type]  # decode needs no store
    sst = wal.decode(7, encode_wal_sst(rows, SstOptions(), create_ts=1234))
    got = sst.entries
    assert got.column("seq").to_pylist() == [1, 2, 3, 4, 5]
    assert got.column("key").to_pylist() == [b"z", b"a", b"a", b"c", b"a"]
    memtable = Memtable()
    for batch in got.to_batches():
        memtable.put_batch(batch)
    assert memtable.get(b"a") == (5, b"a5") and memtable.get(b"z") == (1, b"z1")


FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


@pytest.mark.slatedb
def test_repeated_keys_in_our_wal_read_by_slatedb_and_replayed_here(
    oracle: Oracle, store: ObjectStore
) -> None:
    """A WAL tail whose SSTs repeat keys (a WriteBatch, a put_arrow table and single puts that
    overwrite and delete each other) reads the newest write of every key in SlateDB's reader,
    SlateDB's writer (replaying it) and our writer replaying it."""
    model = Model()
    slow = DbOptions(flush_interval=timedelta(hours=1))  # one WAL SST per flush() below
    with Db.open("db", store, slow) as db:
        wb = WriteBatch()
        for i in range(300):
            key = b"k/%03d" % (i % 100)
            wb.put(key, b"wb%d" % i)
            model.put(key, b"wb%d" % i)
        wb.delete(b"k/007")
        model.delete(b"k/007")
        db.write(wb, await_durable=False)
        ops = [(b"k/%03d" % (i % 50), b"arrow%d" % i) for i in range(120)] + [(b"k/008", None)]
        db.put_arrow(
            pa.table(
                {
                    "key": pa.array([k for k, _ in ops], pa.binary()),
                    "value": pa.array([v for _, v in ops], pa.binary()),
                }
            ),
            await_durable=False,
        )
        model.apply(ops)
        db.put(b"k/009", b"single")
        model.put(b"k/009", b"single")
        db.put(b"k/007", b"back")
        model.put(b"k/007", b"back")
        db.flush()
        check_reads(model, db.get, scanner(db), who="our Db (the writer itself)")
    with Db.open("db", store, FAST) as db:
        check_reads(model, db.get, scanner(db), who="our Db after replaying its WAL")
    reader = oracle.open_reader()
    check_reads(model, reader.get, reader.scan, who="SlateDB DbReader")
    reader.shutdown()
    w = oracle.open_db("db", settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db replaying our WAL")
    w.shutdown()
