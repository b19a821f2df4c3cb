"""``slatedb changes --until CURSOR`` with no ``--since`` on a database whose feed starts from a
snapshot (review43 of issue 43, item 5): the snapshot is of the latest manifest, newer than
``--until``, so its rows hold changes ``--until`` has not delivered; printed before the cursor
line ``--until``, they come again from ``--since CURSOR`` (a merge operand applied twice). A
snapshot past the end is ChangesCollected; one at or before it is delivered whole."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa

from slatedb_core.cli.changes import db_changes_until
from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_until_never_yields_a_snapshot_past_it(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
        feed = ChangeFeed("db", store)
        until = feed.tail()
        db.put(b"a", b"2")  # after --until
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))  # the feed bootstraps
    try:
        got = list(db_changes_until(feed, None, until))
    except ChangesCollected:
        return
    seen = [(r["key"], r["value"]) for rows, _ in got for r in rows.to_pylist()]
    assert seen == [(b"a", b"1")]  # a=2 and y were written after --until


def test_until_yields_a_snapshot_before_it(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.bulk_ingest(pa.table({"key": [b"y"], "value": [b"v"]}))
        db.flush_memtable()
    feed = ChangeFeed("db", store)
    until = feed.tail()
    got = list(db_changes_until(feed, None, until))
    assert sorted(r["key"] for rows, _ in got for r in rows.to_pylist()) == [b"a", b"y"]
    assert got[-1][1] == until
