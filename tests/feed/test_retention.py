"""A change-feed cursor the garbage collector made unreachable is a typed error, never a gap; a
fresh feed bootstraps from a checkpoint's snapshot instead; a registered consumer's checkpoint
keeps its changes through a real GC pass and lets them go once it advances (issue 43, item 1).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.checkpoints import delete_change
from slatedb_core.errors import ChangesCollected, ErrorKind
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.feed.retention import checkpoint_name, consumers
from slatedb_core.gc import GarbageCollector
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1))
ZERO = GarbageCollectorOptions(min_age=timedelta(0))


def write_rounds(store: ObjectStore, first: int, last: int, *, to_l0: bool) -> None:
    """Rounds ``first..last`` of writes, one WAL SST each; ``to_l0``: then flush the memtable,
    which moves the replay point past them (their WAL SSTs become collectable)."""
    with Db.open("db", store, QUIET) as db:
        for r in range(first, last + 1):
            db.put(b"k%d" % (r % 4), b"v%d" % r, await_durable=False)
            if r % 3 == 2:
                db.delete(b"k%d" % ((r + 1) % 4), await_durable=False)
            db.flush()
        if to_l0:
            db.flush_memtable()


def gc_pass(store: ObjectStore) -> None:
    GarbageCollector("db", store, ZERO).run_once()


def wal_ids(store: ObjectStore) -> list[int]:
    return WalLog(store, "db").list_ids()


def replay(feed: ChangeFeed, since: Cursor | None) -> tuple[dict[bytes, bytes], Cursor | None]:
    """Apply the feed after ``since`` to a dict: the state it describes, and the last cursor."""
    state: dict[bytes, bytes] = {}
    last = since
    for b in feed.changes(since):
        for r in b.rows.to_pylist():
            if r["op"] == "delete":
                state.pop(r["key"], None)
            else:
                state[r["key"]] = r["value"]
        last = b.cursor
    return state, last


def db_state(store: ObjectStore) -> dict[bytes, bytes]:
    with Db.open("db", store, QUIET) as db:
        return dict(db.scan())


def test_a_cursor_past_gc_raises_and_a_fresh_feed_bootstraps(store: ObjectStore) -> None:
    write_rounds(store, 0, 5, to_l0=True)
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    early = next(iter(feed.changes())).cursor
    assert early.wal_id <= 3  # WAL 1 is the writer's fence
    gc_pass(store)
    assert wal_ids(store)[0] > early.wal_id  # the GC did collect the WAL after the cursor
    with pytest.raises(ChangesCollected) as e:
        list(feed.changes(early))
    assert e.value.kind is ErrorKind.DATA
    assert "collected" in str(e.value)

    write_rounds(store, 6, 7, to_l0=False)  # more changes, in the WAL only
    batches = list(ChangeFeed("db", store).changes())
    flags = [r["snapshot"] for b in batches for r in b.rows.to_pylist()]
    assert flags[0] and not flags[-1] and flags == sorted(flags, reverse=True)
    assert all(b.cursor.snapshot is None for b in batches[-1:])
    state, last = replay(ChangeFeed("db", store), None)
    assert state == db_state(store)
    # the snapshot's own checkpoint is gone once the feed was read to its end
    m = ManifestStore(store, "db").read_latest().manifest
    assert not [c for c in m.checkpoints if c.name == "changes-snapshot"]
    assert last is not None and replay(ChangeFeed("db", store), last)[0] == {}


def test_resuming_inside_the_snapshot(store: ObjectStore) -> None:
    write_rounds(store, 0, 11, to_l0=True)
    gc_pass(store)
    write_rounds(store, 12, 13, to_l0=False)
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    everything = [r for b in feed.changes() for r in b.rows.to_pylist()]
    seen = resumed = 0
    for b in feed.changes():  # a new bootstrap; resumed from while its checkpoint is held
        seen += b.rows.num_rows
        if b.cursor.snapshot is not None:
            rest = [r for x in feed.changes(b.cursor.encode()) for r in x.rows.to_pylist()]
            assert rest == everything[seen:]
            resumed += 1
    assert resumed > 1  # the snapshot took several batches


def test_a_consumer_keeps_its_changes_through_gc_and_releases_them(store: ObjectStore) -> None:
    write_rounds(store, 0, 2, to_l0=False)
    etl = ChangeFeed("db", store, ChangesOptions(batch_rows=1, consumer="etl"))
    first = next(iter(etl.changes()))  # registers "etl", pinning the WAL from id 1
    m = ManifestStore(store, "db").read_latest().manifest
    assert checkpoint_name("etl") in {c.name for c in m.checkpoints}
    everything_after = [r for b in etl.changes(first.cursor) for r in b.rows.to_pylist()]

    write_rounds(store, 3, 8, to_l0=True)
    gc_pass(store)
    assert wal_ids(store)[0] == 1  # kept for "etl"
    (held,) = etl.consumers()
    assert held.name == "etl" and held.pinned_replay_after == 0
    assert held.wal_behind is not None and held.wal_behind >= 6  # what it holds back
    plain = ChangeFeed("db", store)  # an unregistered feed still reads them too
    rows = [r for b in plain.changes(first.cursor) for r in b.rows.to_pylist()]
    assert rows[: len(everything_after)] == everything_after
    assert len(rows) > len(everything_after)

    last = list(etl.changes(first.cursor))[-1].cursor  # "etl" reads to the end ...
    list(etl.changes(last))  # ... and resumes from there: its checkpoint moves on
    gc_pass(store)
    assert wal_ids(store)[0] > first.cursor.wal_id
    with pytest.raises(ChangesCollected):
        list(plain.changes(first.cursor))
    assert [r for b in etl.changes(last) for r in b.rows.to_pylist()] == []

    (held,) = etl.consumers()
    assert held.wal_behind == 0  # caught up: it holds nothing back
    etl.release()
    assert etl.consumers() == []
    m = ManifestStore(store, "db").read_latest().manifest
    assert "etl" not in consumers(m)


def test_a_new_consumer_of_a_flushed_database_is_kept_from_its_first_batch(
    store: ObjectStore,
) -> None:
    """A consumer registered on a database whose WAL already reached L0 (but is not collected
    yet) starts from a snapshot its checkpoint pins: a GC pass right after its first batch
    leaves everything it still needs."""
    write_rounds(store, 0, 5, to_l0=True)
    write_rounds(store, 6, 7, to_l0=False)
    etl = ChangeFeed("db", store, ChangesOptions(batch_rows=1, consumer="etl"))
    first = next(iter(etl.changes()))
    gc_pass(store)
    write_rounds(store, 8, 9, to_l0=True)
    gc_pass(store)
    rows = first.rows.to_pylist() + [
        r for b in etl.changes(first.cursor) for r in b.rows.to_pylist()
    ]
    assert rows[0]["snapshot"]
    state: dict[bytes, bytes] = {}
    for r in rows:
        if r["op"] == "delete":
            state.pop(r["key"], None)
        else:
            state[r["key"]] = r["value"]
    assert state == db_state(store)


def test_a_snapshot_is_read_through_compaction_and_gc(store: ObjectStore) -> None:
    """The bootstrap snapshot's checkpoint keeps its L0 SSTs while a compaction replaces them and
    a GC pass runs mid-snapshot; once that checkpoint is gone, resuming inside the snapshot is
    ChangesCollected, not a partial snapshot."""
    from slatedb_core.compactor.compactor import Compactor
    from slatedb_core.manifest.store import ManifestStore as Manifests
    from slatedb_core.options import CompactorOptions

    with Db.open("db", store, QUIET) as db:
        for r in range(6):
            for i in range(3):
                db.put(b"k%d-%d" % (r, i), b"v%d" % r, await_durable=False)
            db.flush_memtable()  # one L0 SST per round
    gc_pass(store)
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=2))
    it = iter(feed.changes())
    first = next(it)
    assert first.cursor.snapshot is not None
    with Compactor("db", store, CompactorOptions(l0_trigger=2)) as c:
        assert c.run_once().compactions >= 1
    gc_pass(store)
    rows = first.rows.to_pylist() + [r for b in it for r in b.rows.to_pylist()]
    assert {r["key"]: r["value"] for r in rows} == db_state(store)

    again = iter(ChangeFeed("db", store, ChangesOptions(batch_rows=2)).changes())
    inside = next(again).cursor
    assert inside.snapshot is not None
    Manifests(store, "db").update(delete_change(inside.snapshot.checkpoint))
    with Compactor("db", store, CompactorOptions(l0_trigger=1)) as c:
        c.run_once()
    gc_pass(store)
    with pytest.raises(ChangesCollected):
        list(feed.changes(inside))
