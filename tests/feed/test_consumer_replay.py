"""A registered consumer resumed from a cursor older than one it already acknowledged (a second
process under the same consumer name, a Delta table restored to an earlier version, an
operator replaying with ``--since``): the ingest markers between the two cursors were pruned
when it acknowledged the later one, so their seq gaps must not be taken for failed ingests
(review43 of issue 43, item 1: never a silent gap; ``ChangesCollected`` instead).
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.layout import consumer_record_path
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def rows(feed: ChangeFeed, since: Cursor | None) -> tuple[list[bytes], Cursor | None]:
    out: list[bytes] = []
    cursor = since
    for b in feed.changes(since):
        out.extend(r["key"] for r in b.rows.to_pylist())
        cursor = b.cursor
    return out, cursor


def test_an_older_cursor_of_the_same_consumer_never_skips_a_pruned_ingest(
    store: ObjectStore,
) -> None:
    opts = ChangesOptions(consumer="etl")
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        first = ChangeFeed("db", store, opts)
        _, c1 = rows(first, None)  # registered, at the end of the WAL
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))  # marked for "etl"
        db.put(b"b", b"2")
        db.flush_memtable()
        got, c2 = rows(first, c1)
        assert got == [b"y", b"b"]
        rows(first, c2)  # acknowledges c2: the ingest's marker is pruned
    # the same consumer name, resumed from c1 (another process, or a restored sink)
    second = ChangeFeed("db", store, opts)
    try:
        got, _ = rows(second, c1)
    except ChangesCollected:
        return  # said so: never a silent gap
    assert got == [b"y", b"b"]


def test_a_stale_record_write_of_a_second_process_never_skips_a_pruned_ingest(
    store: ObjectStore,
) -> None:
    """The race review43 left open: two processes under one consumer name; one acknowledges past
    an ingest (its marker pruned, ``marked_after`` raised in the record), then the other writes
    the record it read before that (a stale read), which lowers ``marked_after`` again. An older
    cursor then meets the ingest's gap above ``marked_after`` with no marker: the feed must ask
    the manifests that committed it rather than take it for a failed ingest."""
    opts = ChangesOptions(consumer="etl")
    record = consumer_record_path("db", "etl")
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        first = ChangeFeed("db", store, opts)
        _, c1 = rows(first, None)
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))
        db.put(b"b", b"2")
        db.flush_memtable()
        got, c2 = rows(first, c1)
        assert got == [b"y", b"b"]
        stale = store.get(record).data  # what the other process read before the pruning
        rows(first, c2)  # acknowledges c2: the ingest's marker is pruned
        store.put(record, stale)  # the other process's late write of what it read
    second = ChangeFeed("db", store, opts)
    try:
        got, _ = rows(second, c1)
    except ChangesCollected:
        return  # said so: never a silent gap
    assert got == [b"y", b"b"]
