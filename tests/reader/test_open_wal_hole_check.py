"""A reader's open does not call GC's leftovers damage: its first WAL-hole check judges the manifest
it reads from, not a later one (slatedb_core.reader)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.gc import run_gc_once
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db
from tests.gc import ZERO, Background

QUIET = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(hours=1),
    compactor=None,
)


# ---- R1 (medium): a reader refuses to open a healthy database (WAL hole false positive) -------
@pytest.mark.parametrize("mode", [ReaderMode.FOLLOW_LATEST, ReaderMode.MANAGED])
def test_r1_reader_open_does_not_call_gc_leftovers_damage(
    mem: ObjectStore, mode: ReaderMode
) -> None:
    """45ae5c3 judges a hole the reader's first check calls damage again on the *latest*
    manifest, but hands ``damaged_holes`` the WAL ids listed after the reader's (older) replay
    point. When the latest manifest's replay point has moved past them and GC collected them
    except one whose delete failed (a failed delete "is left for the next pass", gc/collector.py),
    the ids below the latest replay point are not contiguous, and ``damaged_holes`` (which lets
    ``prev`` run backwards for ids at or below ``replay_after``) reports the collected ids as
    damage: DbReader.open raises WalSstMissing on a healthy database. Nothing is missing: every
    one of those writes is in the latest manifest's L0, and a reader opened a moment later
    serves them all.

    Found by the second adversarial review, 75d9b85..c37bcdc (was test_adversary_findings_2.py)."""
    db = Db.open("db", mem, QUIET)
    for i in range(3):
        db.put(b"k%d" % i, b"v")
        db.flush()  # one WAL SST each
    faulty = FaultyStore(mem)
    # the reader has read the latest manifest (replay point 0) and is about to list the WAL
    listing = faulty.pause("list", "list", "db/wal*")
    opener = Background(lambda: DbReader.open("db", faulty, options=DbReaderOptions(mode=mode)))
    assert listing.wait_reached()
    for i in range(3, 8):
        db.put(b"k%d" % i, b"v")
        db.flush()
    db.flush_memtable()
    db.put(b"z", b"v")
    db.flush()
    db.flush_memtable()  # the replay point moves past every WAL SST written so far
    gc_store = FaultyStore(mem)
    gc_store.fail_next("delete", "db/wal/*0003.sst")  # one transient delete failure
    run_gc_once("db", gc_store, ZERO)
    assert WalLog(mem, "db").list_ids(after=0)[0] == 3  # the leftover; 4..9 are collected
    listing.release()
    reader = opener.join()
    try:
        assert opener.error is None, f"a reader of a healthy database failed: {opener.error!r}"
        assert reader is not None
        reader.refresh()
        assert [reader.get(b"k%d" % i) for i in range(8)] == [b"v"] * 8
    finally:
        if reader is not None:
            reader.close()
        db.close()
