"""SlateDB 0.17 writes, we read: its L0 SSTs (memtable flushes), its sorted runs (its own
compactor), its WAL SSTs (a tail the writer never flushed to L0), its tombstones and overwrites;
our ``Db`` and ``DbReader`` must answer every key and scan the same rows in the same order
(docs/format.md)."""

from __future__ import annotations

import time

import pytest

from slatedb_core.reader.reader import DbReader
from slatedb_core.sst.reader import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import Oracle, settings
from tests.interop.rounds_steps import FAST, READER, slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb


def wal_tail(oracle: Oracle, replay_after_wal_id: int) -> list[int]:
    """Ids of the non-empty WAL SSTs past the manifest's replay point (the rows only there)."""
    return sorted(
        int(p.stem)
        for p in (oracle.root / "db" / "wal").iterdir()
        if int(p.stem) > replay_after_wal_id and p.stat().st_size > 0
    )


def read_with_ours(store: ObjectStore, model: Model) -> None:
    with DbReader.open("db", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    with Db.open("db", store, FAST) as db:  # fences SlateDB's writer, replays its WAL
        check_reads(model, db.get, scanner(db), who="our Db")


def test_slatedb_l0_and_wal_tail_read_by_our_reader_and_db(
    oracle: Oracle, store: ObjectStore
) -> None:
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 3)
    slate_tail(w, model)
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")
    m = oracle.admin().latest()
    assert len(m.l0) == 3 and not m.compacted and wal_tail(oracle, m.replay_after_wal_id)
    read_with_ours(store, model)


def test_slatedb_compacted_runs_read_by_our_reader_and_db(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB's compactor merges its L0 SSTs into a sorted run; more L0 SSTs and a WAL tail
    land on top of it."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=True))
    slate_rounds(w, model, 4)
    admin = oracle.admin()
    admin.wait_until(lambda m: len(m.compacted) >= 1 and len(m.l0) == 0)
    slate_rounds(w, model, 2, first=4)
    slate_tail(w, model)
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")
    m = admin.latest()
    assert m.compacted and m.l0 and wal_tail(oracle, m.replay_after_wal_id)
    read_with_ours(store, model)


def test_slatedb_clean_shutdown_read_by_our_reader_and_db(
    oracle: Oracle, store: ObjectStore
) -> None:
    """A writer that shut down cleanly (SlateDB flushes its memtable to L0 on shutdown), then a
    reopen by SlateDB that only overwrites and deletes."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 2)
    w.write(model.apply(rows(9, 50, step=3)))
    w.shutdown()
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply((k, None) for k, _ in rows(9, 25, step=6)))
    w.write(model.apply(rows(10, 30, step=5, start=1)))
    w.shutdown()
    read_with_ours(store, model)


@pytest.mark.parametrize("codec", ["Snappy", "Zlib", "Lz4", "Zstd"])
def test_slatedb_compressed_ssts_read_by_our_reader_and_db(
    oracle: Oracle, store: ObjectStore, codec: str
) -> None:
    """Every codec SlateDB 0.17 writes (its ``compression_codec`` setting; L0 and WAL SSTs)."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False, compression_codec=codec))
    slate_rounds(w, model, 2)
    slate_tail(w, model)
    read_with_ours(store, model)


def test_slatedb_ttl_rows_read_by_our_reader_and_db(oracle: Oracle, store: ObjectStore) -> None:
    """Rows SlateDB stores with an expire_ts. SlateDB 0.17 applies expiry when it rewrites rows
    (a memtable flush or a compaction turns a value expired by its clock's last tick, the newest
    write's timestamp, into a tombstone), not at reads: a row that expired in the WAL, or in an
    L0 SST flushed before it expired, still reads as its value, and we must read what SlateDB
    reads."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply(rows(0, 1200)))
    for i in range(0, 1200, 100):
        w.put_ttl(b"k/%05d" % i, b"expires-in-an-hour", 3_600_000)
        model.put(b"k/%05d" % i, b"expires-in-an-hour")
        w.put_ttl(b"k/%05d" % (i + 1), b"expires-now", 1)
        model.delete(b"k/%05d" % (i + 1))
    time.sleep(0.05)
    w.put(b"clock", b"tick")  # moves SlateDB's clock past every "expires-now"
    model.put(b"clock", b"tick")
    w.flush_memtable()  # the expired rows reach L0 as tombstones
    w.put_ttl(b"l0/expired-after-flush", b"expires-soon", 5)
    w.flush_memtable()  # flushed before it expired: L0 holds the value and its expire_ts
    time.sleep(0.05)
    w.put(b"clock", b"tick2")
    model.put(b"clock", b"tick2")
    assert w.get(b"l0/expired-after-flush") == b"expires-soon"  # SlateDB still reads it
    model.put(b"l0/expired-after-flush", b"expires-soon")
    w.put_ttl(b"wal/live", b"expires-in-an-hour", 3_600_000)
    model.put(b"wal/live", b"expires-in-an-hour")
    w.put_ttl(b"wal/expired", b"expires-now", 1)
    time.sleep(0.05)
    assert w.get(b"wal/expired") == b"expires-now"  # as said above: still there in the WAL
    model.put(b"wal/expired", b"expires-now")
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")
    with DbReader.open("db", store, options=READER) as reader:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    # our writer replays the WAL's TTL rows keeping their expire_ts (it refused them before
    # issue 38) and flushes them at close, expiring at the last write's tick as SlateDB's own
    # flush does ("wal/expired" was written last: not expired at its own tick); SlateDB's writer
    # then reads what it read before
    w.shutdown()
    with Db.open("db", store, FAST) as ours:
        check_reads(model, ours.get, scanner(ours), who="our Db after replaying the TTL rows")
    again = oracle.open_db(s=settings(compactor=False))
    check_reads(model, again.get, again.scan, who="SlateDB Db after our writer's flush")


def test_slatedb_multi_version_ssts_read_by_our_reader_and_db(
    oracle: Oracle, store: ObjectStore
) -> None:
    """An SST holding several versions of a key: SlateDB keeps every version a live snapshot
    may read (its manifest's recent_snapshot_min_seq) when it flushes, newest first; a reader
    answers with the newest only, and a tombstone hides what is under it."""
    model = Model()
    w = oracle.open_db(s=settings(compactor=False))
    w.write(model.apply(rows(0, 1200)))
    snapshot = w.snapshot()
    w.write(model.apply(rows(1, 600, step=2)))
    w.write(model.apply((k, None) for k, _ in rows(1, 300, step=4, start=1)))
    w.flush_memtable()
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")
    (sst,) = (oracle.root / "db" / "compacted").iterdir()
    keys = SstReader.open(store, f"db/compacted/{sst.name}").read_all().column("key")
    assert len(keys) == 1200 + 600 + 300  # every version kept: 1200 keys, 900 newer versions
    read_with_ours(store, model)
    del snapshot
