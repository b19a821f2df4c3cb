"""Engine bugs the seeded simulation found, each pinned by a deterministic test.

Every test names the seed that first showed the bug; ``python -m tests.sim.run --seed N`` replays
that schedule.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from slatedb_core.db import Db
from slatedb_core.errors import Fenced
from slatedb_core.options import DbOptions
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.url import open_store

OPTS = DbOptions(flush_interval=timedelta(milliseconds=5))


def test_writer_whose_open_stalled_before_fencing_the_wal_is_fenced_by_a_newer_writer() -> None:
    """Seeds 64 and 67: writer A bumps the epoch, stalls before listing the WAL; writer B opens
    (newer epoch) and fences the WAL; A resumes and used to fence *after* B's fence SST, open
    successfully and acknowledge writes, while B's next WAL write then hit A's older-epoch SST
    (WalEpochConflict). A must instead fail its open with Fenced, and B keep working."""
    store = FaultyStore(open_store("memory://"))
    Db.open("db", store, OPTS).close()
    point = store.pause("a-before-wal-list", "list", "db/wal", when="before")
    box: list[BaseException | Db] = []

    def open_a() -> None:
        try:
            box.append(Db.open("db", store, OPTS))
        except BaseException as e:
            box.append(e)

    a = threading.Thread(target=open_a, daemon=True)
    a.start()
    assert point.wait_reached(10)
    b = Db.open("db", store, OPTS)
    point.release()
    a.join(30)
    assert not a.is_alive()
    try:
        assert isinstance(box[0], Fenced), f"the stale opener got {box[0]!r}"
        b.put(b"k", b"v")  # B's WAL is not blocked by a stale fence SST
        assert b.get(b"k") == b"v"
    finally:
        b.close()
        if isinstance(box[0], Db):
            box[0].close()
    with Db.open("db", store, OPTS) as c:
        assert c.get(b"k") == b"v"
