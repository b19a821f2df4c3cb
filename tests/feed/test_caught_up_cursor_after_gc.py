"""review43, issue 43: an unregistered consumer that read everything (its cursor after the last
WAL SST, and past a new writer's empty fencing one) while the GC then collected the last WAL SST
with rows (its rows flushed to L0, so nothing the
consumer still needs). An ingest right after it leaves a seq gap at the cursor; the feed asked
the gone WAL SST where the gap starts and raised ChangesCollected, which tells the consumer to
start again from a snapshot though it missed nothing. The manifest that put that WAL SST in L0
tells as well: its rows are at or below the cursor's seq."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
GC = GarbageCollectorOptions(min_age=timedelta(hours=1), wal_min_age=timedelta(0))


def test_an_ingest_after_a_caught_up_cursor_whose_wal_was_collected(store: ObjectStore) -> None:
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    with Db.open("db", store, QUIET) as db:
        for k in (b"a", b"b", b"c"):
            db.put(k, b"1")
        cursor = list(feed.changes(None))[-1].cursor
    with Db.open("db", store, QUIET) as db:  # a new writer: its empty fencing WAL SST
        cursor = list(feed.changes(cursor))[-1].cursor  # caught up past it
        db.flush_memtable()
        GarbageCollector("db", store, GC).run_once()
        listed = WalLog(store, "db").list_ids()
        assert cursor.wal_id - 2 not in listed  # the last one with rows is collected
        db.bulk_ingest(pa.table({"key": [b"i0", b"i1"], "value": [b"x", b"y"]}))
        db.put(b"d", b"2")
        db.flush_memtable()
    got = [r["key"] for b in feed.changes(cursor) for r in b.rows.to_pylist()]
    assert got == [b"i0", b"i1", b"d"]
