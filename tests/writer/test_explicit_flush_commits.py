"""An explicit ``Db.flush_memtable()`` commits its L0 SST and the replay point past the flushed
WAL SSTs in one manifest update (issue 42, goal 2: a writer commit, put + flush to L0, within 2x
SlateDB 0.17's CPU; its memtable flush moves the replay point in the flush's own update). A
background flush keeps the lag of slatedb_core.writer.l0_flush (the replay point moves at the
next commit)."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_an_explicit_flush_is_one_manifest_update(store: ObjectStore) -> None:
    manifests = ManifestStore(store, "db")
    with Db.open("db", store, QUIET) as db:
        db.put(b"a", b"1")
        db.flush_memtable()  # the first flush after open: settles any open-time state
        for i in range(3):
            before = manifests.read_latest()
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()
            after = manifests.read_latest()
            assert after.id == before.id + 1  # one update per flush
            m = after.manifest
            assert len(m.l0) == len(before.manifest.l0) + 1
            assert m.replay_after_wal_id > before.manifest.replay_after_wal_id
            assert m.replay_after_wal_id == m.next_wal_sst_id - 1  # nothing left to replay
    with Db.open("db", store, QUIET) as db:
        assert [db.get(b"k%d" % i) for i in range(3)] == [b"v"] * 3
        assert db.get(b"a") == b"1"
