from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa
import pytest
from ulid import ULID

from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    InvalidArgument,
    ReaderClosed,
    SstMissing,
)
from slatedb_core.layout import sst_path
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.lsm.entries import KV_SCHEMA, batch_from_lists
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest, SortedRun, SstView
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.reader.wal_tables import WalTables
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.wal.log import WalLog, encode_wal_sst
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

WRITER = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)
# Readers that only move when the test calls refresh(): deterministic.
MANUAL = DbReaderOptions(manifest_poll_interval=timedelta(minutes=5), checkpoint_lifetime=None)
POLLING = DbReaderOptions(
    manifest_poll_interval=timedelta(milliseconds=50), checkpoint_lifetime=timedelta(minutes=1)
)
WRITE_OPS = ("put", "put_if_absent", "put_if_match", "delete")


def wait_until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def latest(store: ObjectStore, path: str = "db") -> Manifest:
    return ManifestStore(store, path).read_latest().manifest


def add_checkpoint(
    store: ObjectStore, path: str = "db", expire_time_s: int | None = None
) -> uuid.UUID:
    """A checkpoint of the latest manifest made as an operator would (no wal_id_last_seen)."""
    cp_id = uuid.uuid4()

    def change(m: Manifest, next_id: int) -> Manifest:
        cp = Checkpoint(cp_id, next_id, int(time.time()), expire_time_s)
        return dataclasses.replace(m, checkpoints=(*m.checkpoints, cp))

    ManifestStore(store, path).update_at(change)
    return cp_id


def write_counts(store: ObjectStore) -> dict[str, int]:
    snap = store.counters.snapshot()
    return {op: snap[op] for op in WRITE_OPS}


# ---- the three modes -------------------------------------------------------------------------
def test_managed_reader_sees_l0_data_and_wal_writes_after_a_poll(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"in-l0", b"1")
        db.flush_memtable()
        db.put(b"in-wal", b"2")
        with DbReader.open("db", store, options=POLLING) as reader:
            assert reader.mode is ReaderMode.MANAGED
            assert reader.get(b"in-l0") == b"1" and reader.get(b"in-wal") == b"2"
            db.put(b"later", b"3")
            db.delete(b"in-wal")
            wait_until(lambda: reader.get(b"later") == b"3")
            wait_until(lambda: reader.get(b"in-wal") is None)
            assert list(reader.scan()) == [(b"in-l0", b"1"), (b"later", b"3")]
            assert reader.get_many([b"later", b"nope"]) == [b"3", None]


def test_reader_does_not_see_writes_that_are_not_durable(store: ObjectStore) -> None:
    slow = dataclasses.replace(WRITER, flush_interval=timedelta(hours=1))
    with Db.open("db", store, slow) as db, DbReader.open("db", store, options=MANUAL) as reader:
        db.put(b"k", b"buffered", await_durable=False)
        reader.refresh()
        assert reader.get(b"k") is None
        db.flush()
        reader.refresh()
        assert reader.get(b"k") == b"buffered"


def test_checkpoint_reader_keeps_its_snapshot_while_the_writer_moves_on(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        for i in range(20):
            db.put(f"k{i:02}".encode(), b"old", await_durable=False)
        db.flush_memtable()
        db.put(b"k00", b"old-in-wal")
        with DbReader.open("db", store, options=MANUAL) as managed:
            cp = managed.checkpoint_id
            assert cp is not None
            with DbReader.open("db", store, cp) as snap:
                assert snap.mode is ReaderMode.CHECKPOINT and snap.checkpoint_id == cp
                counts = write_counts(store)
                for i in range(20):
                    db.put(f"k{i:02}".encode(), b"new", await_durable=False)
                db.put(b"extra", b"x")
                db.flush_memtable()
                db.put(b"k01", b"newer")
                snap.refresh()
                assert snap.get(b"k00") == b"old-in-wal"
                assert snap.get(b"k01") == b"old" and snap.get(b"extra") is None
                assert dict(snap.scan()) == {
                    f"k{i:02}".encode(): b"old-in-wal" if i == 0 else b"old" for i in range(20)
                }
                # the writer wrote meanwhile; the checkpoint reader's share of writes is zero
                assert write_counts(store)["put_if_absent"] > counts["put_if_absent"]
            managed.refresh()
            assert managed.get(b"k01") == b"newer" and managed.get(b"extra") == b"x"


def test_checkpoint_without_wal_id_last_seen_serves_only_its_ssts(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"flushed", b"1")
        db.flush_memtable()
        db.put(b"only-in-wal", b"2")
        cp = add_checkpoint(store)
        db.put(b"after", b"3")
    with DbReader.open("db", store, cp) as snap:
        assert snap.get(b"flushed") == b"1"
        assert snap.get(b"only-in-wal") is None and snap.get(b"after") is None


def test_follow_latest_reader_makes_no_write_requests(store: ObjectStore) -> None:
    own = FaultyStore(store)  # counts the reader's requests only
    options = DbReaderOptions(
        mode=ReaderMode.FOLLOW_LATEST, manifest_poll_interval=timedelta(milliseconds=50)
    )
    with Db.open("db", store, WRITER) as db:
        db.put(b"a", b"1")
        with DbReader.open("db", own, options=options) as reader:
            assert reader.checkpoint_id is None
            assert reader.get(b"a") == b"1"
            db.put(b"b", b"2")
            db.flush_memtable()
            db.put(b"c", b"3")
            wait_until(lambda: reader.get(b"c") == b"3")
            assert reader.stats().l0_views == 1
            assert dict(reader.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    before = write_counts(store)
    with DbReader.open("db", store, options=options) as reader:
        reader.refresh()
        assert reader.get(b"c") == b"3"
    assert write_counts(store) == before
    assert write_counts(own) == dict.fromkeys(WRITE_OPS, 0)
    assert own.counters.snapshot()["get"] > 0
    assert not latest(store).checkpoints or all(
        c.writer_epoch is not None for c in latest(store).checkpoints
    )


# ---- checkpoint maintenance ------------------------------------------------------------------
def test_managed_checkpoint_is_refreshed_before_half_its_lifetime(store: ObjectStore) -> None:
    options = DbReaderOptions(
        manifest_poll_interval=timedelta(milliseconds=200), checkpoint_lifetime=timedelta(seconds=2)
    )
    with Db.open("db", store, WRITER), DbReader.open("db", store, options=options) as reader:
        cp_id = reader.checkpoint_id
        assert cp_id is not None
        cp = latest(store).checkpoint(cp_id)
        assert cp is not None and cp.expire_time_s is not None
        first_expiry = cp.expire_time_s
        assert first_expiry >= time.time() + 2 - 0.5

        def refreshed() -> bool:
            c = latest(store).checkpoint(cp_id)
            assert c is not None, "the checkpoint must never lapse"
            assert c.expire_time_s is not None and c.expire_time_s >= time.time()
            return c.expire_time_s > first_expiry

        wait_until(refreshed, timeout=4)
        assert reader.checkpoint_id == cp_id, "no SST change: refreshed, not re-established"


def test_managed_checkpoint_is_reestablished_when_l0_changes(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db, DbReader.open("db", store, options=MANUAL) as reader:
        db.put(b"k", b"v")
        old = reader.checkpoint_id
        old_manifest = reader.manifest_id
        assert old is not None and latest(store).checkpoint(old) is not None
        reader.refresh()  # new WAL only: same checkpoint
        assert reader.checkpoint_id == old and reader.get(b"k") == b"v"
        db.flush_memtable()
        reader.refresh()
        new = reader.checkpoint_id
        assert new is not None and new != old
        m = latest(store)
        assert m.checkpoint(old) is None
        cp = m.checkpoint(new)
        assert cp is not None and cp.manifest_id == reader.manifest_id > old_manifest
        pinned = ManifestStore(store, "db").read(reader.manifest_id).manifest
        assert len(pinned.l0) == 1 and pinned.checkpoint(new) is not None
        assert reader.get(b"k") == b"v"
        assert reader.stats().memtables == 0, "WAL now in L0 is dropped from memory"


def test_managed_open_records_the_last_contiguous_wal_id(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        for i in range(3):
            db.put(f"k{i}".encode(), b"v")
        last = WalLog(store, "db").list_ids()[-1]
        with DbReader.open("db", store, options=MANUAL) as reader:
            pinned = ManifestStore(store, "db").read(reader.manifest_id).manifest
            assert pinned.wal_id_last_seen == last == reader.stats().last_wal_id


def test_close_deletes_the_managed_checkpoint_and_is_idempotent(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"k", b"v")
    reader = DbReader.open("db", store, options=MANUAL)
    cp = reader.checkpoint_id
    assert cp is not None and latest(store).checkpoint(cp) is not None
    reader.close()
    reader.close()
    assert latest(store).checkpoint(cp) is None
    with pytest.raises(ReaderClosed):
        reader.get(b"k")
    with pytest.raises(ReaderClosed):
        reader.refresh()


def test_open_scan_keeps_the_old_checkpoint_until_it_finishes(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db, DbReader.open("db", store, options=MANUAL) as reader:
        for i in range(5):
            db.put(f"k{i}".encode(), b"v", await_durable=False)
        db.flush_memtable()
        reader.refresh()
        old = reader.checkpoint_id
        assert old is not None
        batches = reader.scan_arrow(batch_size=1)
        assert batches.read_next_batch().num_rows == 1
        db.put(b"k9", b"v")
        db.flush_memtable()
        reader.refresh()
        assert reader.checkpoint_id != old
        assert latest(store).checkpoint(old) is not None, "kept while the scan is open"
        rest = batches.read_all()
        assert rest.column("key").to_pylist() == [b"k1", b"k2", b"k3", b"k4"]
        del batches
        reader.refresh()
        assert latest(store).checkpoint(old) is None
        assert reader.get(b"k9") == b"v"


# ---- consistency under concurrent writes -------------------------------------------------------
@pytest.mark.parametrize("mode", [ReaderMode.MANAGED, ReaderMode.FOLLOW_LATEST])
def test_reads_see_whole_write_batches_and_never_go_back(mode: ReaderMode) -> None:
    """Every batch rewrites all keys with the next version: any state that is a prefix of the
    history shows one version for all keys, and a later read never shows an older version. The
    writer flushes memtables meanwhile, so readers re-establish and purge WAL tables under load."""
    store = open_store(f"memory://reader-{uuid.uuid4().hex}")
    keys = [f"k{i}".encode() for i in range(10)]
    options = DbReaderOptions(
        mode=mode,
        manifest_poll_interval=timedelta(milliseconds=20),
        checkpoint_lifetime=timedelta(seconds=30),
        max_memtable_bytes=2048,
    )
    stop = threading.Event()
    failures: list[str] = []
    observed: set[int] = set()
    newest = [-1]  # the newest version a reader saw (observed is a set other threads grow)

    def read(reader: DbReader) -> None:
        last = -1
        while not stop.is_set():
            for values in (
                reader.get_many(keys),
                [v for _, v in reader.scan()],
                reader.scan_arrow().read_all().column("value").to_pylist(),
            ):
                seen = {v for v in values if v is not None}
                if len(seen) > 1 or (seen and len(values) != len(keys)):
                    failures.append(f"torn state: {sorted(seen)}")
                version = int(seen.pop()) if seen else -1
                if version < last:
                    failures.append(f"went back from {last} to {version}")
                last = max(last, version)
                observed.add(version)
                newest[0] = max(newest[0], version)

    with Db.open("db", store, WRITER) as db:
        db.write(WriteBatch().put(b"k0", b"00000").delete(b"k0"))
        with DbReader.open("db", store, options=options) as reader:
            threads = [threading.Thread(target=read, args=(reader,)) for _ in range(2)]
            for t in threads:
                t.start()
            for version in range(1, 121):
                batch = WriteBatch()
                for k in keys:
                    batch.put(k, f"{version:05}".encode())
                db.write(batch)
                if version % 25 == 0:
                    db.flush_memtable()
                if version % 10 == 0:
                    # the readers see the writer's progress however loaded the machine is:
                    # without this wait, at load 15 they once saw only 7 versions of 120
                    def seen(v: int = version) -> bool:
                        return newest[0] >= v

                    wait_until(seen)
            db.flush()
            wait_until(lambda: reader.get(b"k9") == b"00120")
            stop.set()
            for t in threads:
                t.join()
            assert reader.stats().l0_views >= 4
    assert failures == []
    assert len(observed) > 10, "the readers saw the writer's progress"


def test_get_many_paused_midway_by_a_replay_still_answers_from_one_state(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torn read above, made deterministic: a get_many paused after its first key while the
    reader replays a WAL SST with a batch over both keys must answer both from the state it
    started on. (The replay table used to be shared with the published state and grow in place,
    so the second key saw the new batch and the first did not.)"""
    keys = [b"a", b"b"]
    result: list[list[bytes | None]] = []
    paused, resume = threading.Event(), threading.Event()
    get = DbState.get

    def pausing_get(self: DbState, key: bytes) -> bytes | None:
        value = get(self, key)
        if key == b"a" and threading.current_thread() is worker:
            paused.set()
            assert resume.wait(10)
        return value

    worker = threading.Thread(target=lambda: result.append(reader.get_many(keys)))
    with Db.open("db", store, WRITER) as db:
        db.write(WriteBatch().put(b"a", b"1").put(b"b", b"1"))
        with DbReader.open("db", store, options=MANUAL) as reader:
            monkeypatch.setattr(DbState, "get", pausing_get)
            worker.start()
            assert paused.wait(10)
            db.write(WriteBatch().put(b"a", b"2").put(b"b", b"2"))
            reader.refresh()
            assert reader.get_many(keys) == [b"2", b"2"]  # this thread does not pause
            resume.set()
            worker.join(10)
    assert result == [[b"1", b"1"]]


@pytest.mark.parametrize("arrow", [False, True], ids=["scan", "scan_arrow"])
def test_a_scan_keeps_reading_the_state_it_began_on(store: ObjectStore, arrow: bool) -> None:
    """Batches replayed (and tables merged) while a scan is half read do not reach it."""
    keys = [f"k{i:02}".encode() for i in range(20)]
    with Db.open("db", store, WRITER) as db:
        batch = WriteBatch()
        for k in keys:
            batch.put(k, b"old")
        db.write(batch)
        with DbReader.open("db", store, options=MANUAL) as reader:
            if arrow:
                batches = iter(reader.scan_arrow(batch_size=1))
                seen = batches.__next__().column(1).to_pylist()
            else:
                rows = reader.scan()
                seen = [next(rows)[1]]
            for _ in range(3):
                batch = WriteBatch()
                for k in keys:
                    batch.put(k, b"new")
                db.write(batch)
                reader.refresh()
            if arrow:
                seen += [v for b in batches for v in b.column(1).to_pylist()]
            else:
                seen += [v for _, v in rows]
            assert dict(reader.scan()) == dict.fromkeys(keys, b"new")
    assert seen == [b"old"] * len(keys)


# ---- WAL replay ------------------------------------------------------------------------------
def test_wal_replay_fills_several_bounded_memtables(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        for chunk in range(12):
            keys = [f"k{chunk:02}{i:03}".encode() for i in range(50)]
            db.put_arrow(pa.table({"key": keys, "value": [b"x" * 40] * 50}))  # one WAL SST each
    options = dataclasses.replace(MANUAL, max_memtable_bytes=8 * 1024)
    with DbReader.open("db", store, options=options) as reader:
        stats = reader.stats()
        assert stats.memtables >= 4
        assert stats.memtable_bytes >= 12 * 50 * 40
        assert reader.get(b"k00000") == b"x" * 40 and reader.get(b"k11049") == b"x" * 40
        assert sum(1 for _ in reader.scan()) == 600
        sizes = [i.size_bytes for i in reader._current.state.imm]
        assert sizes and max(sizes) <= 8 * 1024


def test_reader_waits_for_a_gap_in_the_wal_to_fill(store: ObjectStore) -> None:
    # a writer with 2 WAL writes in flight may leave a gap of 1 (a wider gap is damage, see
    # tests/wal/test_holes.py)
    with Db.open("db", store, dataclasses.replace(WRITER, max_parallel_writes=2)) as db:
        db.put(b"a", b"1")
    wal = WalLog(store, "db")
    last = wal.list_ids()[-1]

    def write_wal(wal_id: int, key: bytes, seq: int) -> None:
        data = encode_wal_sst(batch_from_lists([key], [seq], [0], [b"v"]), SstOptions())
        store.put_if_absent(wal.path(wal_id), data)

    options = dataclasses.replace(MANUAL, mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open("db", store, options=options) as reader:
        write_wal(last + 2, b"c", 1002)
        reader.refresh()
        assert reader.get(b"c") is None and reader.stats().last_wal_id == last
        write_wal(last + 1, b"b", 1001)
        reader.refresh()
        assert reader.get(b"b") == b"v" and reader.get(b"c") == b"v"
        assert reader.stats().last_wal_id == last + 2


def test_reestablish_drops_replayed_wal_that_a_bulk_ingest_overwrote(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db, DbReader.open("db", store, options=MANUAL) as reader:
        db.put(b"k", b"from-wal")
        reader.refresh()
        assert reader.get(b"k") == b"from-wal"
        db.bulk_ingest(pa.table({"key": [b"k"], "value": [b"from-bulk"]}))
        reader.refresh()
        assert reader.get(b"k") == b"from-bulk"
        assert dict(reader.scan()) == {b"k": b"from-bulk"}


def test_purging_a_table_that_spans_the_replay_point_keeps_only_newer_entries() -> None:
    tables = WalTables(max_bytes=1 << 20)
    tables.add([(1, batch_from_lists([b"a", b"b"], [1, 2], [0, 0], [b"a1", b"b1"]))])
    tables.add([(2, batch_from_lists([b"b", b"c"], [3, 4], [0, 1], [b"b2", b""]))])
    tables.add([(3, batch_from_lists([b"d"], [5], [0], [b"d3"]))])
    tables.purge(2)
    assert tables.get(b"a") is None and tables.get(b"b") is None
    assert tables.get(b"d") == (5, b"d3") and tables.last_wal_id == 3
    tables.add([(4, batch_from_lists([b"e"], [6], [0], [b"e4"]))])
    tables.purge(9)
    assert tables.count() == 0 and tables.last_wal_id == 9


def test_replayed_tables_never_change_once_published() -> None:
    """Every add builds new tables (merging the newest ones into new tables): what an earlier
    state holds keeps answering as it did, so no read of it can see a later batch."""

    def lookup(imms: tuple[ImmutableMemtable, ...], key: bytes) -> bytes | None:
        for t in imms:  # newest first, as DbState reads them
            found = t.get(key)
            if found is not None:
                return found[1]
        return None

    tables = WalTables(max_bytes=4096)
    published = []
    for i in range(1, 301):
        keys, values = [b"k", f"x{i:03}".encode()], [f"v{i}".encode(), b"x" * 20]
        tables.add([(i, batch_from_lists(keys, [2 * i - 1, 2 * i], [0, 0], values))])
        imms = tables.imms()
        published.append((i, imms, [(t.entry_count, t.size_bytes) for t in imms]))
        assert tables.count() <= 12, "size-tiered: few tables"
    for i, imms, figures in published:
        assert [(t.entry_count, t.size_bytes) for t in imms] == figures
        assert lookup(imms, b"k") == f"v{i}".encode()
        assert lookup(imms, f"x{i:03}".encode()) == b"x" * 20
        assert lookup(imms, f"x{i + 1:03}".encode()) is None
    assert max(t.size_bytes for t in tables.imms()) <= 4096
    # a merged table accounts its size as a memtable holding the same entries would
    for t in tables.imms():
        fresh = Memtable()
        fresh.put_batch(t.batch)
        assert t.size_bytes == fresh.size_bytes > 0 and t.entry_count == fresh.entry_count


def test_wal_ssts_applied_together_keep_id_order() -> None:
    tables = WalTables(max_bytes=1 << 20)
    tables.add(
        [
            (1, batch_from_lists([b"k", b"x"], [1, 2], [0, 0], [b"old", b"x"])),
            (2, batch_from_lists([], [], [], [])),  # a fencing SST
            (3, batch_from_lists([b"k"], [3], [1], [b""])),
            (4, batch_from_lists([b"x"], [4], [0], [b"new"])),
        ]
    )
    assert tables.get(b"k") == (3, None) and tables.get(b"x") == (4, b"new")
    assert tables.last_wal_id == 4 and sorted(tables.seq_by_wal) == [1, 3, 4]
    with pytest.raises(AssertionError):
        tables.add([(6, batch_from_lists([b"y"], [5], [0], [b"y"]))])


# ---- errors ----------------------------------------------------------------------------------
def test_missing_or_expired_checkpoint_raises_checkpoint_not_found(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"k", b"v")
    with pytest.raises(CheckpointNotFound):
        DbReader.open("db", store, uuid.uuid4())
    expired = add_checkpoint(store, expire_time_s=int(time.time()) - 10)
    with pytest.raises(CheckpointNotFound):
        DbReader.open("db", store, expired)


@pytest.mark.parametrize(
    ("manifest", "error"),
    [
        (Manifest(initialized=False), DatabaseNotInitialized),
        (Manifest(destroyed_at_s=1_700_000_000), DatabaseDestroyed),
    ],
)
@pytest.mark.parametrize("mode", [ReaderMode.MANAGED, ReaderMode.FOLLOW_LATEST])
def test_unusable_databases_are_refused(
    store: ObjectStore, manifest: Manifest, error: type[Exception], mode: ReaderMode
) -> None:
    ManifestStore(store, "db").create_initial(manifest)
    with pytest.raises(error):
        DbReader.open("db", store, options=dataclasses.replace(MANUAL, mode=mode))
    assert latest(store).checkpoints == (), "nothing written"
    with pytest.raises(DatabaseNotFound):
        DbReader.open("missing", store, options=dataclasses.replace(MANUAL, mode=mode))


def test_sst_deleted_under_a_checkpoint_reader_raises_sst_missing(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    cp = add_checkpoint(store)
    with DbReader.open("db", store, cp) as snap:
        view = latest(store).l0[0]
        store.delete(sst_path("db", view.sst_id))
        with pytest.raises(SstMissing) as err:
            snap.get(b"k")
        assert str(view.sst_id) in str(err.value)
        with pytest.raises(SstMissing):
            list(snap.scan())


def compact_l0_into_a_run(store: ObjectStore) -> ULID:
    """What a compactor + GC do: L0's SST moves to a sorted run under a new id, the old object
    is deleted. Returns the deleted SST's id."""
    m = latest(store)
    old = m.l0[0]
    old_sst = m.sst(old.sst_id)
    assert old_sst is not None
    new_id = ULID()
    store.put_if_absent(sst_path("db", new_id), store.get(sst_path("db", old.sst_id)).data)
    moved = CompactedSst(new_id, old_sst.info)

    def compact(m: Manifest) -> Manifest:
        return dataclasses.replace(
            m,
            ssts=(*(s for s in m.ssts if s.id != old.sst_id), moved),
            l0=(),
            compacted=(SortedRun(0, (SstView(new_id, new_id),)),),
        )

    ManifestStore(store, "db").update(compact)
    store.delete(sst_path("db", old.sst_id))
    return old.sst_id


@pytest.mark.parametrize("mode", [ReaderMode.MANAGED, ReaderMode.FOLLOW_LATEST])
@pytest.mark.parametrize("op", ["get", "scan"])
def test_reader_reloads_once_when_a_compacted_away_sst_disappears(
    store: ObjectStore, mode: ReaderMode, op: str
) -> None:
    with Db.open("db", store, WRITER) as db:
        for i in range(10):
            db.put(f"k{i}".encode(), b"v", await_durable=False)
        db.flush_memtable()
    with DbReader.open("db", store, options=dataclasses.replace(MANUAL, mode=mode)) as reader:
        first, first_manifest = reader.checkpoint_id, reader.manifest_id
        compact_l0_into_a_run(store)
        if op == "get":
            assert reader.get(b"k3") == b"v"
        else:
            assert [k for k, _ in reader.scan(b"k5")] == [b"k5", b"k6", b"k7", b"k8", b"k9"]
        assert reader.manifest_id > first_manifest and reader.stats().sorted_runs == 1
        if mode is ReaderMode.MANAGED:
            assert first is not None and reader.checkpoint_id != first
            reader.refresh()  # a scan that held the old checkpoint released it: deleted now
            assert latest(store).checkpoint(first) is None


def test_sst_still_missing_after_a_reload_raises_sst_missing(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    with DbReader.open("db", store, options=MANUAL) as reader:
        store.delete(sst_path("db", latest(store).l0[0].sst_id))
        with pytest.raises(SstMissing):
            reader.get(b"k")
        with pytest.raises(SstMissing):
            list(reader.scan())


def test_bad_arguments_are_rejected(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        db.put(b"k", b"v")
    with pytest.raises(InvalidArgument):
        DbReader.open("db", store, options=dataclasses.replace(MANUAL, mode=ReaderMode.CHECKPOINT))
    with pytest.raises(InvalidArgument):
        DbReader.open(
            "db", store, uuid.uuid4(), dataclasses.replace(MANUAL, mode=ReaderMode.MANAGED)
        )
    with pytest.raises(InvalidArgument):
        DbReader.open("../db", store)
    with DbReader.open("db", store, options=MANUAL) as reader:
        with pytest.raises(InvalidArgument):
            reader.get("k")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            reader.get(b"")
        with pytest.raises(InvalidArgument):
            reader.scan(b"b", b"a")
        assert list(reader.scan(b"k", b"k")) == []
        assert reader.get(bytearray(b"k")) == b"v"  # type: ignore[arg-type]


def test_scan_arrow_has_the_writer_schema_and_bounds(store: ObjectStore) -> None:
    with Db.open("db", store, WRITER) as db:
        for k in [b"a", b"b", b"c", b"d"]:
            db.put(k, k * 2, await_durable=False)
        db.flush_memtable()
        db.put(b"bb", b"new")
        with DbReader.open("db", store, options=MANUAL) as reader:
            got = reader.scan_arrow(b"b", b"d", batch_size=2).read_all()
            assert got.schema.equals(KV_SCHEMA)
            assert got.column("key").to_pylist() == [b"b", b"bb", b"c"]
            assert got.equals(db.scan_arrow(b"b", b"d").read_all())
