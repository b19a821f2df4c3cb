"""A registered consumer polling the change feed while the writer flushes to L0 and the garbage
collector runs passes every 10 ms sees every change once, in order, and is never collected
(issue 43, item 1: "compaction and GC running during consumption"); an unregistered feed that
falls behind the same GC gets ChangesCollected, never a gap."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db

GC = GarbageCollectorOptions(min_age=timedelta(0), interval=timedelta(milliseconds=10))
WRITER = DbOptions(flush_interval=timedelta(milliseconds=5))
ROUNDS = 30


def writer(store: ObjectStore, done: threading.Event) -> None:
    with Db.open("db", store, WRITER) as db:
        for r in range(ROUNDS):
            for i in range(4):
                db.put(b"k%03d-%d" % (r, i), b"v")
            if r % 3 == 2:
                db.flush_memtable()
            time.sleep(0.005)
    done.set()


def test_a_consumer_polls_through_flushes_and_gc_passes(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"first", b"v")  # the database exists before the consumer registers
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=5, consumer="etl"))
    keys: list[bytes] = []
    cursor: Cursor | None = None
    done = threading.Event()
    with GarbageCollector("db", store, GC).start() as gc:
        t = threading.Thread(target=writer, args=(store, done))
        t.start()
        deadline = time.monotonic() + 60
        polls = 0
        while time.monotonic() < deadline:
            finished = done.is_set()
            for b in feed.changes(cursor):
                keys += [r["key"] for r in b.rows.to_pylist()]
                cursor = b.cursor
            polls += 1
            if polls == 2:
                time.sleep(0.3)  # fall behind: the writer flushes to L0, GC passes run
            if finished:
                break
            time.sleep(0.01)
        t.join()
        passes = gc.passes
    assert gc.last_error is None, gc.last_error
    expected = [b"first"] + [b"k%03d-%d" % (r, i) for r in range(ROUNDS) for i in range(4)]
    assert keys == expected
    assert passes >= 3
    assert list(feed.changes(cursor)) == []  # caught up: its checkpoint moves to the latest
    GarbageCollector("db", store, GC).run_once()
    assert WalLog(store, "db").list_ids()[0] > 1  # what it read is collectable now

    write_more = ChangeFeed("db", store)
    with Db.open("db", store, WRITER) as db:
        db.put(b"late", b"v")
        db.flush_memtable()
    GarbageCollector("db", store, GC).run_once()
    try:
        rows = [r for b in write_more.changes(Cursor(2, 0)) for r in b.rows.to_pylist()]
    except ChangesCollected:
        rows = None
    assert rows is None  # behind the GC without a consumer: the typed error, not a gap
    feed.release()
