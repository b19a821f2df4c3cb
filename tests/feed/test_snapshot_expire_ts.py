"""Snapshot rows (the bootstrap from a checkpoint's SSTs) carry the ``expire_ts`` of the
version they deliver, as WAL rows do: a TTL row's expiry is read from its SST row, in L0 and in
a sorted run alike; a row without a TTL has none (issue 43, item 1: "the timestamps SlateDB
stores").
"""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.compactor import Compactor
from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def newest_expiries(store: ObjectStore) -> dict[bytes, int | None]:
    """Each key's newest expire_ts as the WAL rows carry it."""
    out: dict[bytes, int | None] = {}
    for b in ChangeFeed("db", store).changes(None):
        for r in b.rows.to_pylist():
            out[r["key"]] = r["expire_ts"]
    return out


def test_snapshot_rows_carry_their_versions_expire_ts(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        db.put(b"plain", b"0")
        db.put(b"t1", b"1", ttl=timedelta(hours=1))
        db.put(b"t2", b"2", ttl=timedelta(hours=2))
        db.put(b"t1", b"1b", ttl=timedelta(hours=3))  # a newer version, another expiry
        for i in range(300):
            db.put(b"bulk%03d" % i, b"v", ttl=timedelta(minutes=10 + i) if i % 3 else None)
        db.flush_memtable()
    with Compactor("db", store, CompactorOptions(l0_trigger=1)) as c:
        assert c.run_once().compactions >= 1  # these are in a sorted run now
    with Db.open("db", store, QUIET) as db:
        db.put(b"t3", b"3", ttl=timedelta(hours=4))
        db.put(b"t2", b"2b")  # no TTL now: its newest version has no expiry
        db.put(b"plain2", b"p")
        db.flush_memtable()  # and these in L0
    expected = newest_expiries(store)
    assert expected[b"t1"] is not None and expected[b"t2"] is None
    # a new consumer of a database whose WAL reached L0 starts from a snapshot
    feed = ChangeFeed("db", store, ChangesOptions(consumer="new", batch_rows=50))
    rows = [r for b in feed.changes(None) for r in b.rows.to_pylist()]
    snap = [r for r in rows if r["snapshot"]]
    assert len(snap) == len(expected)
    got = {r["key"]: r["expire_ts"] for r in snap}
    assert got == expected
    assert sum(v is not None for v in got.values()) == 2 + 200  # t1, t3 and two of every three
    assert all(r["create_ts"] is None for r in snap)
