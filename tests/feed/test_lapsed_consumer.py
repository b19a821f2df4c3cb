"""issue 43 adversarial review: a registered consumer whose checkpoint lapsed
(``consumer_lifetime``) while an ingest committed must not skip the ingest's rows.

An ingest adds markers only for consumers whose checkpoint is live at its commit
(:func:`slatedb_core.feed.ingests.mark_ingest`). A consumer that comes back after its
checkpoint expired is registered again by ``changes(since=c)``, and a registered feed takes a
seq gap no marker names, covered by L0, for a failed ingest's: it went on past the committed
ingest's rows, a silent gap. docs/changes.md says a consumer behind a lapsed checkpoint gets
ChangesCollected.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_a_consumer_back_after_its_checkpoint_lapsed_never_skips_an_ingest(
    store: ObjectStore,
) -> None:
    opts = ChangesOptions(consumer="etl", consumer_lifetime=timedelta(seconds=1))
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        feed = ChangeFeed("db", store, opts)
        cursor: Cursor | None = None
        for b in feed.changes(None):
            cursor = b.cursor
        assert cursor is not None
        time.sleep(2.1)  # the consumer's checkpoint expires
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.put(b"b", b"2")
        try:
            got = [r["key"] for b in feed.changes(cursor) for r in b.rows.to_pylist()]
        except ChangesCollected:
            got = None
        assert got in (None, [b"y0", b"y1", b"b"]), f"the feed delivered {got}"
        again = [r["key"] for b in feed.changes(None) for r in b.rows.to_pylist()]
        assert {b"a", b"y0", b"y1", b"b"} <= set(again)  # it starts again, from a snapshot


def test_a_consumer_back_after_gc_removed_its_lapsed_checkpoint_never_skips_an_ingest(
    store: ObjectStore,
) -> None:
    opts = ChangesOptions(consumer="etl", consumer_lifetime=timedelta(seconds=1))
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        feed = ChangeFeed("db", store, opts)
        cursor: Cursor | None = None
        for b in feed.changes(None):
            cursor = b.cursor
        assert cursor is not None
        time.sleep(2.1)  # the consumer's checkpoint expires
        db.bulk_ingest(pa.table({"key": [b"y0", b"y1"], "value": [b"v0", b"v1"]}))
        db.put(b"b", b"2")
        GarbageCollector("db", store, GarbageCollectorOptions(min_age=timedelta(0))).run_once()
        try:
            got = [r["key"] for b in feed.changes(cursor) for r in b.rows.to_pylist()]
        except ChangesCollected:
            got = None
        assert got in (None, [b"y0", b"y1", b"b"]), f"the feed delivered {got}"
