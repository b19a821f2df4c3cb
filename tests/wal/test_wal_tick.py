"""Review of issue 38 (item 1, TTL): the clock tick our WAL gives rows written without one.

SlateDB stamps every row with its write's clock tick, and its memtable flush expires TTL rows at
the newest (the last write's). Our plain writes carried no tick in memory (the fast path); the WAL
writer stamped them when it encodes the WAL SST, at the flush, later than the write. After a
crash the replayed memtable's newest tick was then that flush's, and a TTL row still live at the
last write but expired by the WAL flush was retired by our flush and kept by SlateDB's.

Fixed: every write path reads the clock once per write (as SlateDB's does) and a sealed WAL
buffer stamps its rows with its newest write's tick (``WalBuffer.tick_ms``); a frozen memtable
keeps that tick too (``Memtable.freeze``)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle
from tests.interop.oracle_merge import slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = pytest.mark.slatedb


def test_a_ttl_row_live_at_the_last_write_survives_a_replayed_flush(
    oracle: Oracle, tmp_path: Path
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_wal_tick.py)."""
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    slatedb_write(w, [("put", b"z", b"z", None)])
    slatedb_write(w, [("put", b"k", b"v", 200)])
    time.sleep(0.3)
    w.shutdown()  # flushes its memtable at its last write's tick: k was live then
    w = open_merge_db(oracle, StringAppend(), path="theirs")
    assert w.get(b"k") == b"v"

    store = open_store(tmp_path.as_uri())
    options = DbOptions(flush_interval=timedelta(hours=1), merge_operator="string_append")
    db = Db.open("ours", store, options)
    db.put(b"z", b"z", await_durable=False)
    db.put(b"k", b"v", ttl=200, await_durable=False)
    time.sleep(0.3)
    db.flush()  # one WAL SST, encoded after k expired
    db._simulate_crash()
    with Db.open("ours", store, options) as again:
        again.flush_memtable()
        assert again.get(b"k") == b"v"
