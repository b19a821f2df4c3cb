"""A cursor from ``tail()`` carries L0's last seq, which lags the WAL rows not yet flushed: the
seq gap before the first row after it holds those rows, and a flush of them later commits a
manifest whose ``last_l0_seq`` lands in that gap. Taken for an unmarked ingest, it delivered
the flushed rows a second time (found in session 49 after aa15536 read unmarked ingests from
the manifests: ``after-first`` came again after the tail cursor). The gap now starts after the
last row of the WAL SSTs before the cursor (issue 43, item 1: each change once).
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.mark.parametrize("consumer", [None, "etl"])
def test_a_tail_cursor_resumes_after_flushed_rows_and_reads_a_later_ingest_once(
    store: ObjectStore, consumer: str | None
) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.flush()
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1000, consumer=consumer))
    if consumer is not None:
        list(feed.changes(None))  # registered before the ingests
    with Db.open("db", store, QUIET) as db:
        db.bulk_ingest(pa.table({"key": [b"i0"], "value": [b"a"]}))
        db.put(b"after-first", b"x")
        db.flush()
    end = feed.tail()  # its seq is L0's: after-first is in the WAL only
    with Db.open("db", store, QUIET) as db:  # the first writer's close flushed after-first
        db.bulk_ingest(pa.table({"key": [b"j0"], "value": [b"c"]}))
        db.put(b"after-second", b"y")
        db.flush()
    got = [r["key"] for b in feed.changes(end) for r in b.rows.to_pylist()]
    assert got == [b"j0", b"after-second"]
