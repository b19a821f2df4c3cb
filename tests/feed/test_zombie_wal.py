"""issue 43 adversarial review: a WAL SST a fenced (zombie) writer creates after the newer
writer's GC collected its slot is not part of the database, and the change feed must not
deliver it.

The scenario of SlateDB RFC 0026 for the WAL (docs/gc-and-boundaries.md): writer 1 stalls
inside its WAL write; writer 2 opens (its fence takes writer 1's next slot), writes, flushes to
L0; GC (min_age 0) advances ``gc/wal.boundary`` and deletes the WAL SSTs behind the replay
point, the fence included. Writer 1 wakes: its create-if-absent lands in the collected slot,
its boundary check fences it (nothing acknowledged), and the object stays. A lagging feed
whose cursor names that slot must say ChangesCollected (what it needs was collected), never
deliver writer 1's unacknowledged row, and never drop writer 2's committed row whose seq the
zombie reused.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import ChangesCollected, Fenced
from slatedb_core.feed import ChangeFeed, Cursor
from slatedb_core.gc import GarbageCollector
from slatedb_core.lsm.entries import ENTRY_SCHEMA, KIND_VALUE
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.wal.writer import WalWriter
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
GC = GarbageCollectorOptions(min_age=timedelta(0))


def test_a_zombie_wal_sst_in_a_collected_slot_is_never_a_change(store: ObjectStore) -> None:
    w1 = Db.open("db", store, QUIET)
    try:
        w1.put(b"a", b"1")
        w1.put(b"b", b"2")
        feed = ChangeFeed("db", store)
        cursor: Cursor | None = None
        for b in feed.changes(None):
            cursor = b.cursor
        assert cursor is not None
        stalled_at = cursor.wal_id  # writer 1's next WAL id: where its stalled write goes
        with Db.open("db", store, QUIET) as w2:  # fences writer 1 at that id
            w2.put(b"c", b"3")
            w2.flush_memtable()
            w2.put(b"d", b"4")
            GarbageCollector("db", store, GC).run_once()
            assert stalled_at not in WalLog(store, "db").list_ids()  # the fence was collected
            # writer 1's flusher wakes inside its WAL write (the real WalWriter, epoch 1): the
            # create lands in the collected slot, the boundary check fences it
            zombie = WalWriter(WalLog(store, "db"), 1, stalled_at, SstOptions())
            row = pa.RecordBatch.from_pylist(
                [{"key": b"zombie", "seq": cursor.seq + 1, "kind": KIND_VALUE, "value": b"x"}],
                schema=ENTRY_SCHEMA,
            )
            with pytest.raises(Fenced):
                zombie.write(row)
            assert stalled_at in WalLog(store, "db").list_ids()  # its object stays
            try:
                got = [r["key"] for b in feed.changes(cursor) for r in b.rows.to_pylist()]
            except ChangesCollected:
                got = None
            assert got is None, f"the feed delivered {got} across a collected slot"
    finally:
        w1.close()
