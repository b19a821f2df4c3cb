"""Review of issue 38 (item 1, TTL): a memtable flush expires rows at the memtable's last clock
tick, and SlateDB stamps *every* write with its tick (a plain put, a delete, a batch), not only
the rows with a TTL. Our memtable counted only rows that carry a timestamp, so a TTL row that
expired before a later plain write survived our flush although SlateDB's flush of the same
writes turns it into a tombstone (a value) or drops it (an operand): the two engines then read
different values for the same rows, and SlateDB's reader of our database serves a row SlateDB
itself has retired."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, SlateWriter
from tests.interop.oracle_merge import open_reader_at, slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = pytest.mark.slatedb


OURS = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")


def _batch(db: Db) -> None:
    b = WriteBatch()
    b.put(b"z", b"z")
    b.delete(b"y")
    db.write(b)


PLAIN: dict[str, tuple[Callable[[Db], object], Callable[[SlateWriter], None]]] = {
    "put": (lambda db: db.put(b"z", b"z"), lambda w: w.put(b"z", b"z")),
    "delete": (lambda db: db.delete(b"z"), lambda w: w.delete(b"z")),
    "batch": (_batch, lambda w: w.write([(b"z", b"z"), (b"y", None)])),
    "put_arrow": (
        lambda db: db.put_arrow(pa.table({"key": [b"z"], "value": [b"z"]})),
        lambda w: w.put(b"z", b"z"),
    ),
}


@pytest.mark.parametrize("plain", sorted(PLAIN))
def test_a_plain_write_after_an_expiry_expires_the_row_at_flush(
    oracle: Oracle, tmp_path: Path, plain: str
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_flush_tick.py)."""
    ours_plain, theirs_plain = PLAIN[plain]
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    slatedb_write(w, [("put", b"v", b"1", 1)])
    slatedb_write(w, [("merge", b"m", b"x", 1)])
    time.sleep(0.02)
    theirs_plain(w)
    w.flush_memtable()
    want = {k: w.get(k) for k in (b"v", b"m")}
    assert want == {b"v": None, b"m": None}  # SlateDB's flush retired both

    with Db.open("ours", open_store(tmp_path.as_uri()), OURS) as db:
        db.put(b"v", b"1", ttl=1)
        db.merge(b"m", b"x", ttl=1)
        time.sleep(0.02)
        ours_plain(db)
        db.flush_memtable()
        assert {k: db.get(k) for k in (b"v", b"m")} == want
    reader = open_reader_at(oracle, "ours", StringAppend())
    assert {k: reader.get(k) for k in (b"v", b"m")} == want


def test_a_replayed_plain_wal_sst_moves_the_flush_tick(oracle: Oracle, tmp_path: Path) -> None:
    """The same after a crash: the replay dropped the create_ts of a WAL SST without TTL rows,
    so the replayed memtable's tick stayed at the TTL rows' and its flush kept them.

    Found by the review of issue 38 (was review/test_issue38_flush_tick.py)."""
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    slatedb_write(w, [("put", b"v", b"1", 1)])
    slatedb_write(w, [("merge", b"m", b"x", 1)])
    time.sleep(0.02)
    w.put(b"z", b"z")
    w.shutdown()  # SlateDB's close flushes the memtable
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    want = {k: w.get(k) for k in (b"v", b"m", b"z")}
    assert want == {b"v": None, b"m": None, b"z": b"z"}

    store = open_store(tmp_path.as_uri())
    db = Db.open("ours", store, OURS)
    db.put(b"v", b"1", ttl=1)
    db.merge(b"m", b"x", ttl=1)
    time.sleep(0.02)
    db.put(b"z", b"z")  # durable in a WAL SST of its own, without a TTL row
    db._simulate_crash()
    with Db.open("ours", store, OURS) as again:
        again.flush_memtable()
        assert {k: again.get(k) for k in (b"v", b"m", b"z")} == want
