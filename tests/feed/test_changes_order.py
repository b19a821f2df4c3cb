"""The change feed delivers every committed change once, in commit order, and resumes from any
cursor it handed out with exactly the rest (issue 43, item 1).

Our ``Db`` writes puts, deletes, merge operands and TTL rows across many WAL SSTs and an L0 flush;
the feed read through ``Db.changes`` and ``DbReader.changes`` must list them in seq order with
their op and timestamps, and resuming from each batch's cursor must yield the suffix, once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.lsm.row_model import now_ms
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1), merge_operator="add_int64")

Change = tuple[bytes, bytes | None, str, int]


def rows_of(feed: ChangeFeed, since: Cursor | str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for b in feed.changes(since):
        out += b.rows.to_pylist()
    return out


def write_history(store: ObjectStore) -> list[tuple[bytes, bytes | None, str]]:
    """Writes over 12 WAL SSTs and one L0 flush; returns (key, value, op) in write order."""
    done: list[tuple[bytes, bytes | None, str]] = []
    with Db.open("db", store, QUIET) as db:
        for i in range(12):
            for j in range(5):
                k = b"k%02d" % ((i * 5 + j) % 17)
                if j == 3:
                    db.delete(k, await_durable=False)
                    done.append((k, None, "delete"))
                else:
                    v = b"v%d-%d" % (i, j)
                    db.put(k, v, await_durable=False)
                    done.append((k, v, "put"))
            if i == 4:
                db.merge(b"counter", (5).to_bytes(8, "little"), await_durable=False)
                done.append((b"counter", (5).to_bytes(8, "little"), "merge"))
            db.flush()  # one WAL SST per round
            if i == 6:
                db.flush_memtable()  # rounds 0..6 reach L0; the WAL stays (no GC)
    return done


def test_order_across_wal_ssts_and_l0_flush(store: ObjectStore) -> None:
    done = write_history(store)
    got = rows_of(ChangeFeed("db", store))
    assert [(r["key"], r["value"], r["op"]) for r in got] == done
    seqs = [r["seq"] for r in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert not any(r["snapshot"] for r in got)
    wal_ids = [r["wal_id"] for r in got]
    assert wal_ids == sorted(wal_ids) and len(set(wal_ids)) >= 12
    assert all(r["create_ts"] is not None for r in got)  # our WAL rows all carry one


@pytest.mark.parametrize("batch_rows", [8, 1000])
def test_resume_from_every_cursor_yields_the_rest_once(store: ObjectStore, batch_rows: int) -> None:
    write_history(store)
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=batch_rows))
    batches = list(feed.changes())
    everything = [r for b in batches for r in b.rows.to_pylist()]
    assert all(b.rows.num_rows <= batch_rows for b in batches)
    seen = 0
    for b in batches:
        seen += b.rows.num_rows
        encoded = b.cursor.encode()
        assert Cursor.decode(encoded) == b.cursor
        assert rows_of(feed, encoded) == everything[seen:]
    assert rows_of(feed, batches[-1].cursor) == []


def test_new_writes_after_the_last_cursor_and_a_reopened_writer(store: ObjectStore) -> None:
    write_history(store)
    feed = ChangeFeed("db", store)
    last = list(feed.changes())[-1].cursor
    with Db.open("db", store, QUIET) as db:  # a new writer: fences, replays, writes on
        db.put(b"after", b"reopen")
        db.delete(b"k01")
    got = rows_of(feed, last)
    assert [(r["key"], r["op"]) for r in got] == [(b"after", "put"), (b"k01", "delete")]
    assert got[0]["seq"] > last.seq


def test_tombstones_and_ttl_rows(store: ObjectStore) -> None:
    before = now_ms()
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1", ttl=timedelta(milliseconds=1))  # expired by the time it is read
        db.put(b"b", b"2", ttl=timedelta(hours=1))
        db.delete(b"a")
        db.put(b"c", b"3")
    got = {r["key"] + b"/" + r["op"].encode(): r for r in rows_of(ChangeFeed("db", store))}
    a = got[b"a/put"]
    assert a["value"] == b"1" and a["expire_ts"] - a["create_ts"] == 1
    assert a["create_ts"] >= before
    b = got[b"b/put"]
    assert b["expire_ts"] - b["create_ts"] == 3_600_000
    assert got[b"a/delete"]["value"] is None and got[b"a/delete"]["expire_ts"] is None
    assert got[b"c/put"]["expire_ts"] is None


def test_db_and_reader_changes_delegate(store: ObjectStore) -> None:
    from slatedb_core.options import DbReaderOptions, ReaderMode
    from slatedb_core.reader.reader import DbReader

    with Db.open("db", store, QUIET) as db:
        db.put(b"x", b"1")
        db.delete(b"x")
        ours = [r for b in db.changes() for r in b.rows.to_pylist()]
    opts = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open("db", store, options=opts) as reader:
        theirs = [r for b in reader.changes() for r in b.rows.to_pylist()]
    assert [(r["key"], r["op"]) for r in ours] == [(b"x", "put"), (b"x", "delete")]
    assert theirs == ours


def test_the_schema_is_stable(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"x", b"1")
    (batch,) = list(ChangeFeed("db", store).changes())
    assert batch.rows.schema.names == [
        "key",
        "value",
        "op",
        "seq",
        "create_ts",
        "expire_ts",
        "wal_id",
        "snapshot",
    ]
    assert batch.rows.schema.field("seq").type == pa.uint64()


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "c1",
        "c1.0.0",
        "c2.1.0",
        "c1.1.-1",
        "c1.1.99999999999999999999",
        "c1.01.0",
        "c1.1.0.not-a-uuid.3.",
        "c1.1.0.00000000-0000-0000-0000-000000000000.3.abc",
        "c1.1.0.d" + "a" * 31,  # a database id is 32 lowercase hex digits
        "c1.1.0.d" + "A" * 32,
        "c1.1.0.d" + "a" * 32 + ".d" + "b" * 32,
        b"\xff",
        7,
    ],
)
def test_a_bad_cursor_is_refused_before_anything_is_read(store: ObjectStore, bad: object) -> None:
    with pytest.raises(CursorInvalid) as e:
        ChangeFeed("db", store).changes(bad)  # type: ignore[arg-type]
    assert e.value.kind.name == "INVALID"


def test_cursor_encoding_round_trips() -> None:
    import uuid

    from slatedb_core.feed import SnapshotPosition

    for c in [
        Cursor(),
        Cursor(7, 2**64 - 1),
        Cursor(3, 9, SnapshotPosition(uuid.uuid4(), 12, None)),
        Cursor(3, 9, SnapshotPosition(uuid.uuid4(), 12, b"\x00key\xff")),
        Cursor(3, 9, db=uuid.uuid4().hex),
        Cursor(3, 9, SnapshotPosition(uuid.uuid4(), 12, None), uuid.uuid4().hex),
        Cursor(3, 9, SnapshotPosition(uuid.uuid4(), 12, b"k"), uuid.uuid4().hex),
    ]:
        assert Cursor.decode(c.encode()) == c
        assert Cursor.decode(c.encode().encode()) == c


def test_a_cursor_ahead_of_the_wal_is_refused(store: ObjectStore, mem: ObjectStore) -> None:
    """A cursor naming WAL SSTs the database never wrote (another database's, or one restored
    from an older copy) is CursorInvalid, not an endless wait for changes."""
    write_history(store)
    last = list(ChangeFeed("db", store).changes())[-1].cursor
    with Db.open("db", mem, QUIET) as db:  # a younger database: fewer WAL SSTs
        db.put(b"x", b"1")
    with pytest.raises(CursorInvalid, match="another database's"):
        list(ChangeFeed("db", mem).changes(last))
    with pytest.raises(CursorInvalid, match="ahead"):  # an earlier build's: no identity
        list(ChangeFeed("db", mem).changes(last.of_db(None)))
    assert [
        r["key"] for b in ChangeFeed("db", mem).changes(Cursor(2, 0)) for r in b.rows.to_pylist()
    ] == [b"x"]


def test_tail_delivers_only_what_is_committed_after_it(store: ObjectStore) -> None:
    write_history(store)
    feed = ChangeFeed("db", store)
    tail = feed.tail()
    assert rows_of(feed, tail) == []
    with Db.open("db", store, QUIET) as db:
        db.put(b"new", b"1")
        db.flush_memtable()
        db.delete(b"new")
    assert [(r["key"], r["op"]) for r in rows_of(feed, tail)] == [
        (b"new", "put"),
        (b"new", "delete"),
    ]
