"""A WAL SST missing below the last writer's in-flight window is damage (SlateDB RFC 0001
"Parallel Writes"): ``Db.open`` raises ``WalSstMissing`` naming every missing id instead of fencing
into the hole, and a reader replaying the WAL refuses it too; holes inside the window and WAL SSTs
collected behind the replay point are not damage."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import CorruptionError, WalSstMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog, damaged_holes
from slatedb_core.writer.db import Db

# the background WAL flusher never runs on its own: every WAL SST is a durable put's
QUIET = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    """The local filesystem, where the review reproduced these."""
    return open_store(f"file://{tmp_path}/lake")


def opts(window: int = 1, **kw: object) -> DbOptions:
    return DbOptions(flush_interval=QUIET, max_parallel_writes=window, **kw)  # type: ignore[arg-type]


def keys(n: int) -> list[bytes]:
    return [b"k%02d" % i for i in range(n)]


def write_old_then_new(store: ObjectStore, window: int = 1) -> list[int]:
    """10 keys written "old" then "new", one durable put (one WAL SST) each, never flushed to
    L0; the writer then dies. Returns the WAL ids."""
    db = Db.open("db", store, opts(window))
    for value in (b"old", b"new"):
        for k in keys(10):
            db.put(k, value)
    db._simulate_crash()
    return WalLog(store, "db").list_ids()


def values(db: Db) -> list[bytes | None]:
    return [db.get(k) for k in keys(10)]


# ---- item 7: holes in the WAL at open -------------------------------------------------------
def test_open_refuses_a_hole_below_the_window_instead_of_dropping_later_wal_ssts(
    store: ObjectStore,
) -> None:
    """The review's case: max_parallel_writes 1, WAL SST 13 (the put of k01=new) gone. The old
    code fenced into id 13 and replayed nothing after it: 8 acknowledged, stored writes came
    back "old".

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    ids = write_old_then_new(store)
    assert ids == list(range(1, 22))  # 1: the fence, 2..11: old, 12..21: new
    wal = WalLog(store, "db")
    saved = store.get(wal.path(13)).data
    store.delete(wal.path(13))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts())
    err = ei.value
    assert isinstance(err, CorruptionError)
    assert err.wal_ids == [13] and err.holes == ((13, 13),)
    assert wal.path(13) in str(err)
    assert wal.list_ids() == [i for i in range(1, 22) if i != 13]  # nothing fenced into it
    # restoring the object repairs the database: every acknowledged write is back
    store.put(wal.path(13), saved)
    with Db.open("db", store, opts()) as db:
        assert values(db) == [b"new"] * 10


def test_every_missing_id_is_named(store: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    write_old_then_new(store)
    wal = WalLog(store, "db")
    for wal_id in (3, 4, 5, 9):
        store.delete(wal.path(wal_id))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts())
    assert ei.value.holes == ((3, 5), (9, 9))
    assert ei.value.wal_ids == [3, 4, 5, 9]


def test_a_hole_within_the_last_writers_window_is_filled_by_the_fence(
    store: ObjectStore,
) -> None:
    """max_parallel_writes 4: id top-1 (in flight when the writer died, SlateDB RFC 0001) is legal;
    the next writer fences it and replays the SST after it (acknowledged ahead of it).

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    ids = write_old_then_new(store, window=4)
    top = ids[-1]
    wal = WalLog(store, "db")
    lost = wal.read(top - 3).entries.column("key")[0].as_py()
    store.delete(wal.path(top - 3))  # its put was in flight, never acknowledged
    with Db.open("db", store, opts(window=4)) as db:
        got = values(db)
    assert got == [b"old" if k == lost else b"new" for k in keys(10)]
    assert wal.read(top - 3).is_fence


def test_a_hole_just_below_the_window_is_damage(store: ObjectStore) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    ids = write_old_then_new(store, window=4)
    top = ids[-1]
    store.delete(WalLog(store, "db").path(top - 4))
    with pytest.raises(WalSstMissing) as ei:
        Db.open("db", store, opts(window=4))
    assert ei.value.wal_ids == [top - 4]


def test_wal_ssts_collected_behind_the_replay_point_are_not_holes(store: ObjectStore) -> None:
    """GC deletes WAL SSTs below every manifest's replay_after_wal_id (behind gc/wal.boundary):
    the next open starts after them.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    with Db.open("db", store, opts()) as db:
        for k in keys(10):
            db.put(k, b"old")
        db.flush_memtable()
        for k in keys(5):
            db.put(k, b"new")
    wal = WalLog(store, "db")
    before = wal.list_ids()
    stats = run_gc_once("db", store, GarbageCollectorOptions(min_age=timedelta(0)))
    assert stats.wal.deleted > 0
    assert wal.list_ids()[0] > before[0]
    with Db.open("db", store, opts()) as db:
        assert values(db) == [b"new"] * 5 + [b"old"] * 5


def test_a_projected_clone_reopens_over_the_wal_it_did_not_copy(store: ObjectStore) -> None:
    """A clone copies its parent's WAL only up to the last SST with data for it but keeps the
    parent's next_wal_sst_id: the ids in between never existed in the clone. Not damage.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    db = Db.open("parent", store, opts(l0_sst_size_bytes=4096))
    db.put(b"z1", b"v")
    db.put(b"z2", b"x" * 8192)  # freezes the memtable: the L0 flusher commits it
    deadline = time.monotonic() + 10
    while not db.manifest.manifest.l0 and time.monotonic() < deadline:
        time.sleep(0.01)
    db.close()
    parent = ManifestStore(store, "parent").read_latest().manifest
    assert parent.next_wal_sst_id > parent.replay_after_wal_id + 1  # a flush not yet confirmed
    create_clone("clone", "parent", store, projection=KeyRange(b"a", b"m"))
    for value in (b"1", b"2", b"3"):
        with Db.open("clone", store, opts()) as clone:
            assert clone.get(b"b") == (None if value == b"1" else bytes([value[0] - 1]))
            clone.put(b"b", value)
    with Db.open("clone", store, opts()) as clone:
        assert clone.get(b"b") == b"3"


@pytest.mark.parametrize(
    ("existing", "replay_after", "next_id", "window", "last_seen", "holes"),
    [
        ([], 0, 1, 1, 0, []),
        ([1, 2, 3], 0, 1, 1, 0, []),
        ([1, 2, 4], 0, 1, 1, 0, [(3, 3)]),  # below the top: damage with a window of 1
        ([1, 2, 4], 0, 1, 2, 0, []),  # SlateDB RFC 0001's example: 3 in flight, 4 acknowledged
        ([1, 2, 5, 6], 0, 1, 2, 0, [(3, 4)]),
        ([1, 2, 5, 6], 0, 1, 4, 0, []),
        ([6, 7], 5, 1, 1, 0, []),  # ids <= replay_after: collected by GC
        ([7, 8], 5, 1, 1, 0, [(6, 6)]),
        ([1, 3, 9], 0, 5, 8, 0, [(2, 2), (4, 4)]),  # below next_wal_sst_id
        ([1, 9], 0, 5, 8, 0, [(2, 4)]),  # a tail below next_wal_sst_id not after a clone's copy
        ([1, 9], 0, 5, 8, 1, []),  # ... after it: the ids the clone did not copy
        ([1, 2, 9, 10], 0, 5, 1, 2, [(5, 8)]),
        ([1, 2, 9, 10], 0, 5, 1, 0, [(3, 8)]),
    ],
)
def test_damaged_holes(
    existing: list[int],
    replay_after: int,
    next_id: int,
    window: int,
    last_seen: int,
    holes: list[tuple[int, int]],
) -> None:
    """Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    assert damaged_holes(existing, replay_after, next_id, window, last_seen) == holes


# ---- item 7 for readers: a FOLLOW_LATEST or MANAGED reader never steps over damage ---------
@pytest.mark.parametrize("mode", ["follow", "managed"])
def test_a_reader_refuses_a_wal_hole_instead_of_serving_older_values(
    store: ObjectStore, mode: str
) -> None:
    """The same damage as above, seen by a reader that replays the WAL: it used to stop at the
    hole and serve "old" for k01..k09 for good, though "new" is stored and was acknowledged.

    Found by the review of RELIABILITY.md, findings 7, 8, 15 (was test_review_wal_writer.py)."""
    from slatedb_core.options import DbReaderOptions, ReaderMode
    from slatedb_core.reader.reader import DbReader

    write_old_then_new(store)
    wal = WalLog(store, "db")
    saved = store.get(wal.path(13)).data
    store.delete(wal.path(13))
    reader_mode = ReaderMode.FOLLOW_LATEST if mode == "follow" else ReaderMode.MANAGED
    options = DbReaderOptions(mode=reader_mode)
    with pytest.raises(WalSstMissing) as ei:
        DbReader.open("db", store, options=options)
    assert ei.value.wal_ids == [13]
    store.put(wal.path(13), saved)
    with DbReader.open("db", store, options=options) as reader:
        assert [reader.get(k) for k in keys(10)] == [b"new"] * 10
