"""Two-phase CAS (SlateDB RFC 0001 pattern 5) over a store without conditional writes.

The ``txn`` fixture is a real SQLite file or a real PostgreSQL database (a throwaway cluster on
127.0.0.1); the object store is memory behind :class:`NoConditionalWrites`, which ignores
If-None-Match / If-Match, so every "exactly one winner" below comes from the protocol, and the
first test shows that without it there are several.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from slatedb_core.errors import (
    CorruptionError,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    UnsupportedOperation,
    VersionExists,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.meta.envelope import seal
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import ObjectVersion
from slatedb_core.store.twophase import TwoPhaseStore, open_two_phase, two_phase_of
from slatedb_core.store.twophase_keys import is_temp_name, temp_name
from slatedb_core.store.txn import SqliteTxnStore, TxnStore, open_txn_store
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.wal import WalLog
from tests.gc import bump, commit, new_db


@pytest.fixture
def raw() -> FaultyStore:
    """The object store under the protocol: memory, no conditional writes, faults on demand."""
    return FaultyStore(NoConditionalWrites(open_store("memory://")))


@pytest.fixture
def tp(raw: FaultyStore, txn: TxnStore) -> TwoPhaseStore:
    return TwoPhaseStore(raw, txn, namespace="ns")


def payload(i: int) -> bytes:
    return seal(b"TEST", 1, f"v{i}".encode())


def race(n: int, create: Callable[[int], None]) -> list[int]:
    winners: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(n)

    def run(t: int) -> None:
        start.wait()
        try:
            create(t)
        except (VersionExists, ObjectAlreadyExists):
            return
        with lock:
            winners.append(t)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return winners


# ---- the point of it ------------------------------------------------------------------------


def test_without_two_phase_racing_creates_all_win() -> None:
    store = NoConditionalWrites(open_store("memory://"))
    datas = [payload(t) for t in range(8)]
    winners = race(
        8, lambda t: SequencedStore(store, "db", "manifest", "manifest").create(1, datas[t])
    )
    assert len(winners) > 1  # the store "accepted" every create: several writers own id 1


def test_with_two_phase_racing_creates_have_exactly_one_winner(
    raw: FaultyStore, txn_url: str
) -> None:
    datas = [payload(t) for t in range(8)]

    def create(t: int) -> None:  # one TwoPhaseStore (and connection pool) per writer
        store = TwoPhaseStore(raw, open_txn_store(txn_url), namespace="ns")
        try:
            SequencedStore(store, "db", "manifest", "manifest").create(1, datas[t])
        finally:
            store.close()

    winners = race(8, create)
    assert len(winners) == 1
    check = TwoPhaseStore(raw, open_txn_store(txn_url), namespace="ns")
    assert check.get("db/manifest/00000000000000000001.manifest").data == datas[winners[0]]
    check.close()
    # every loser removed its temporary object; the winner its own
    assert [m.path for m in raw.list("db")] == [
        "db/manifest/00000000000000000001.manifest",
        "db/manifest/_latest_version",
    ]


def test_racing_boundary_updates_from_one_version_have_one_winner(tp: TwoPhaseStore) -> None:
    path = "db/gc/manifest.boundary"
    tp.put_if_absent(path, b"1")
    version = tp.get(path).version
    wins = race(8, lambda t: _update(tp, path, str(10 + t).encode(), version))
    assert len(wins) == 1
    assert tp.get(path).data == str(10 + wins[0]).encode()
    assert list(tp.inner.list("db/gc")) == []  # cells live in the transactional store only
    assert [m.path for m in tp.list("db/gc")] == [path]


def _update(tp: TwoPhaseStore, path: str, data: bytes, version: ObjectVersion) -> None:
    try:
        tp.put_if_match(path, data, version)
    except PreconditionFailed:
        raise ObjectAlreadyExists(path) from None


def test_concurrent_boundary_advances_end_at_the_maximum(tp: TwoPhaseStore) -> None:
    path = "db/gc/wal.boundary"

    def advance(t: int) -> None:
        BoundaryObject(tp, path).advance(t + 1)

    race(12, advance)
    assert BoundaryObject(tp, path).read() == 12


def test_put_if_match_on_an_immutable_object_is_refused(tp: TwoPhaseStore) -> None:
    v = tp.put_if_absent("db/manifest/00000000000000000001.manifest", b"x")
    with pytest.raises(UnsupportedOperation):
        tp.put_if_match("db/manifest/00000000000000000001.manifest", b"y", v)


# ---- the write, step by step ----------------------------------------------------------------


def test_a_write_costs_two_puts_two_statements_and_a_delete(tp: TwoPhaseStore) -> None:
    raw = tp.inner
    tp.txn.counters.reset()  # opening checked the key migration marker (one select)
    tp.put_if_absent("db/wal/00000000000000000001.sst", b"data")
    assert raw.counters.snapshot() == {
        **dict.fromkeys(raw.counters.snapshot(), 0),
        "put": 2,
        "delete": 1,
    }
    assert tp.txn.counters.snapshot() == {"select": 0, "insert": 1, "update": 1, "delete": 0}
    assert [m.path for m in raw.list("db")] == ["db/wal/00000000000000000001.sst"]
    intent = tp.txn.get_intent("ns", "db/wal/00000000000000000001.sst")
    assert intent is not None and intent.committed and is_temp_name(intent.source)
    with pytest.raises(ObjectAlreadyExists):
        tp.put_if_absent("db/wal/00000000000000000001.sst", b"other")
    assert tp.get("db/wal/00000000000000000001.sst").data == b"data"
    assert [m.path for m in raw.list("db")] == ["db/wal/00000000000000000001.sst"]


def test_the_write_is_durable_at_the_insert_and_readers_complete_it(tp: TwoPhaseStore) -> None:
    """The copy stalls after the insert: a second writer loses, a reader and a listing see the
    object (the reader completes the copy), and the stalled writer then finishes harmlessly."""
    raw: FaultyStore = tp.inner  # type: ignore[assignment]
    path = "db/manifest/00000000000000000007.manifest"
    stall = raw.pause("copy", "put", path)
    done: list[ObjectVersion] = []
    writer = threading.Thread(target=lambda: done.append(tp.put_if_absent(path, b"first")))
    writer.start()
    assert stall.wait_reached()
    assert not raw.inner.exists(path)
    with pytest.raises(ObjectAlreadyExists):
        tp.put_if_absent(path, b"second")
    seq = SequencedStore(tp, "db", "manifest", "manifest")
    assert [e.id for e in seq.list()] == [7]
    assert seq.latest_id() == 7
    assert tp.get(path).data == b"first"  # rolled forward by this read
    assert raw.inner.get(path).data == b"first"
    stall.release()
    writer.join()
    assert len(done) == 1
    intent = tp.txn.get_intent("ns", path)
    assert intent is not None and intent.committed
    assert [m.path for m in raw.inner.list("db")] == [path]


def test_a_failed_copy_does_not_fail_the_write(tp: TwoPhaseStore) -> None:
    raw: FaultyStore = tp.inner  # type: ignore[assignment]
    path = "db/wal/00000000000000000003.sst"
    raw.fail_next("put", path)
    tp.put_if_absent(path, b"w3")  # durable: the intent was inserted
    assert not raw.exists(path)
    assert tp.head(path).size == 2  # rolls forward
    assert raw.get(path).data == b"w3"


def test_a_crashed_writer_is_recovered(tp: TwoPhaseStore) -> None:
    """The state a writer leaves when it dies right after the insert."""
    path = "db/manifest/00000000000000000002.manifest"
    data = payload(2)
    source = temp_name(path, data)
    tp.inner.put(source, data)
    assert tp.txn.insert_intent("ns", path, source, len(data))
    listed = list(tp.list("db/manifest"))
    assert [m.path for m in listed] == [path, source]  # the temporary is a real object
    assert SequencedStore(tp, "db", "manifest", "manifest").latest_id() == 2
    assert tp.recover("db") == 1
    assert tp.inner.get(path).data == data and not tp.inner.exists(source)
    assert tp.recover("db") == 0


def test_a_corrupt_temporary_is_not_copied(tp: TwoPhaseStore) -> None:
    path = "db/wal/00000000000000000004.sst"
    source = temp_name(path, b"good")
    tp.inner.put(source, b"evil")
    tp.txn.insert_intent("ns", path, source, 4)
    with pytest.raises(CorruptionError):
        tp.get(path)
    assert not tp.inner.exists(path)


class FlakyInsert(SqliteTxnStore):
    """The insert takes effect and then the connection drops (an ambiguous outcome)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.fail_after = 1

    def insert_intent(self, ns: str, dest: str, source: str, size: int) -> bool:
        took = super().insert_intent(ns, dest, source, size)
        if self.fail_after > 0:
            self.fail_after -= 1
            raise StoreError("connection reset after the insert")
        return took


def test_an_ambiguous_insert_is_resolved_by_reading_the_intent(tmp_path: Path) -> None:
    txn = FlakyInsert(tmp_path / "t.sqlite")
    tp = TwoPhaseStore(NoConditionalWrites(open_store("memory://")), txn)
    seq = SequencedStore(tp, "db", "manifest", "manifest")
    data = payload(1)
    seq.create(1, data)
    assert seq.read(1) == data
    assert txn.fail_after == 0  # the failure happened, and was resolved
    txn.fail_after = 1
    with pytest.raises(VersionExists):
        seq.create(1, payload(9))  # the insert "failed", but someone else owns id 1


def test_an_ambiguous_create_above_the_wrapper_is_recognised_by_content(tp: TwoPhaseStore) -> None:
    faulty = FaultyStore(tp)
    faulty.fail_next("put_if_absent", "db/manifest/*", after_effect=True)
    seq = SequencedStore(faulty, "db", "manifest", "manifest")
    seq.create(1, payload(1))
    assert seq.latest_id() == 1


def test_a_failed_temporary_put_leaves_nothing_durable(tp: TwoPhaseStore) -> None:
    raw: FaultyStore = tp.inner  # type: ignore[assignment]
    raw.fail_next("put", "*.*.*.*")
    with pytest.raises(StoreError):
        tp.put_if_absent("db/wal/00000000000000000001.sst", b"x")
    assert tp.txn.get_intent("ns", "db/wal/00000000000000000001.sst") is None
    tp.put_if_absent("db/wal/00000000000000000001.sst", b"x")


def test_delete_then_create_again_like_a_native_store(tp: TwoPhaseStore) -> None:
    path = "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst"
    tp.put_if_absent(path, b"a")
    tp.delete(path)
    assert tp.txn.get_intent("ns", path) is None
    with pytest.raises(ObjectNotFound):
        tp.get(path)
    tp.put_if_absent(path, b"b")
    assert tp.get(path).data == b"b"


def test_an_intent_left_by_an_unfinished_delete_does_not_block_a_create(tp: TwoPhaseStore) -> None:
    path = "db/wal/00000000000000000009.sst"
    tp.put_if_absent(path, b"a")
    tp.inner.delete(path)  # a delete that crashed between the object and the intent
    with pytest.raises(ObjectNotFound):
        tp.get(path)
    tp.put_if_absent(path, b"b")
    assert tp.get(path).data == b"b"


def test_deleting_an_uncommitted_write_completes_it_then_deletes_it(
    tp: TwoPhaseStore,
) -> None:
    path = "db/wal/00000000000000000005.sst"
    source = temp_name(path, b"x")
    tp.inner.put(source, b"x")
    tp.txn.insert_intent("ns", path, source, 1)
    tp.delete(path)
    assert list(tp.list("db")) == []
    with pytest.raises(ObjectNotFound):
        tp.get(path)


def test_copy_if_absent_is_a_two_phase_create(tp: TwoPhaseStore, raw: FaultyStore) -> None:
    data = payload(1)  # payloads are sealed with a fresh nonce: keep the bytes to compare
    raw.put("stage/part.sst", data)
    tp.copy_if_absent("stage/part.sst", "db/compacted/a.sst")
    assert tp.get("db/compacted/a.sst").data == data
    assert tp.txn.get_intent("ns", "db/compacted/a.sst") is not None  # created by an intent
    assert tp.counters.snapshot()["copy"] == 1
    with pytest.raises(ObjectAlreadyExists):
        tp.copy_if_absent("stage/part.sst", "db/compacted/a.sst")
    with pytest.raises(ObjectNotFound):
        tp.copy_if_absent("stage/missing.sst", "db/compacted/b.sst")
    assert not tp.exists("db/compacted/b.sst")
    # the store below ignores If-None-Match: racing copies still have one winner
    datas = [payload(t) for t in range(8)]
    for t, d in enumerate(datas):
        raw.put(f"stage/{t}", d)
    winners = race(8, lambda t: tp.copy_if_absent(f"stage/{t}", "db/compacted/r.sst"))
    assert len(winners) == 1
    assert tp.get("db/compacted/r.sst").data == datas[winners[0]]
    # and a copy of a write the reader must complete first sees its bytes
    pending = payload(9)
    raw.fail_next("put", "db/compacted/u.sst")  # the copy step of the two-phase write fails
    tp.put_if_absent("db/compacted/u.sst", pending)
    assert not raw.inner.exists("db/compacted/u.sst")
    tp.copy_if_absent("db/compacted/u.sst", "db/compacted/v.sst")
    assert tp.get("db/compacted/v.sst").data == pending


def test_temporary_names_are_ignored_by_the_listings_that_parse_names(tp: TwoPhaseStore) -> None:
    seq = SequencedStore(tp, "db", "manifest", "manifest")
    seq.create(1, payload(1))
    wal = WalLog(tp, "db")
    tp.put_if_absent(wal.path(1), b"w")
    for path in (seq.path(2), wal.path(2), "db/compacted/01ARZ3NDEKTSV4RRFFQ69G5FAV.sst"):
        tp.inner.put(temp_name(path, b"t"), b"t")  # orphans of writers that died
    assert [e.id for e in seq.list()] == [1] and seq.latest_id() == 1
    assert wal.list_ids() == [1]
    with pytest.raises(InvalidArgument):
        tp.put_if_absent(temp_name(seq.path(3), b"x"), b"x")


def test_open_txn_store_urls(tmp_path: Path) -> None:
    for bad in [
        "sqlite://rel.db",
        "sqlite:///:memory:",
        "sqlite:///tmp/",
        "mysql://h/db",
        "postgresql://host",
        "postgresql:///db",
        "nonsense",
    ]:
        with pytest.raises(InvalidArgument):
            open_txn_store(bad)
    store = open_txn_store(f"sqlite:///{tmp_path}/a/b.sqlite")
    assert isinstance(store, SqliteTxnStore) and (tmp_path / "a" / "b.sqlite").exists()
    store.close()


def test_two_stores_in_one_database_do_not_share_paths(txn: TxnStore) -> None:
    a = TwoPhaseStore(NoConditionalWrites(open_store("memory://")), txn, namespace="s3://a")
    b = TwoPhaseStore(NoConditionalWrites(open_store("memory://")), txn, namespace="s3://b")
    a.put_if_absent("db/wal/00000000000000000001.sst", b"a")
    b.put_if_absent("db/wal/00000000000000000001.sst", b"b")
    assert b.get("db/wal/00000000000000000001.sst").data == b"b"


# ---- GC -------------------------------------------------------------------------------------


def test_gc_deletes_records_of_collected_manifests_and_wal_and_orphaned_temporaries(
    tp: TwoPhaseStore,
) -> None:
    ms = new_db(tp)
    latest = commit(ms, 5)  # 1..6
    wal = WalLog(tp, "db")
    for i in range(1, 6):
        tp.put_if_absent(wal.path(i), b"w")
    commit(ms, 1, lambda m: bump(_replay_after(m, 4)))
    latest += 1
    orphan = temp_name(wal.path(9), b"o")
    tp.inner.put(orphan, b"o")
    pending_path = wal.path(10)
    pending_source = temp_name(pending_path, b"p")
    tp.inner.put(pending_source, b"p")
    tp.txn.insert_intent("ns", pending_path, pending_source, 1)
    tp.temp_min_age_s = 0
    stats = run_gc_once(
        "db", tp, GarbageCollectorOptions(min_age=timedelta(0)), now=lambda: time.time() + 5
    )
    assert stats.two_phase is not None
    assert stats.two_phase.recovered == 1 and stats.two_phase.temps_deleted == 1
    assert stats.manifest.deleted == latest - 1 and stats.wal.deleted == 3
    rows = {r.path for r in tp.txn.listed_rows("ns", "", None, None)}
    assert "db/gc/manifest.boundary" in rows
    remaining = [m.path for m in tp.inner.list("db") if not m.path.startswith("db/gc")]
    assert not any(is_temp_name(p) for p in remaining)
    # the intents left are those of objects that still exist
    for p in remaining:
        if p.endswith((".manifest", ".sst")):
            assert tp.txn.get_intent("ns", p) is not None, p
    assert tp.txn.get_intent("ns", ms.seq.path(1)) is None
    assert tp.txn.get_intent("ns", wal.path(1)) is None


def _replay_after(m: object, wal_id: int) -> object:
    import dataclasses

    return dataclasses.replace(m, replay_after_wal_id=wal_id)  # type: ignore[type-var]


def test_gc_deletes_intents_the_collector_could_not(tp: TwoPhaseStore) -> None:
    """SlateDB RFC 0001 rules: records of dead manifests go even if their objects' deletes were lost."""
    ms = new_db(tp)
    commit(ms, 4)  # 1..5
    for i in (1, 2):
        tp.inner.delete(ms.seq.path(i))  # deleted behind the wrapper's back: intents remain
    assert tp.txn.get_intent("ns", ms.seq.path(1)) is not None
    stats = run_gc_once("db", tp, GarbageCollectorOptions(min_age=timedelta(0)))
    assert stats.two_phase is not None and stats.two_phase.intents_deleted >= 2
    for i in (1, 2, 3, 4):
        assert tp.txn.get_intent("ns", ms.seq.path(i)) is None
    assert tp.txn.get_intent("ns", ms.seq.path(5)) is not None


def test_two_phase_of_finds_the_wrapper_under_other_wrappers(tp: TwoPhaseStore) -> None:
    assert two_phase_of(FaultyStore(FaultyStore(tp))) is tp
    assert two_phase_of(tp.inner) is None


def test_manifest_store_over_two_phase(tp: TwoPhaseStore) -> None:
    ms = new_db(tp)
    commit(ms, 20)
    again = ManifestStore(tp, "db")
    assert again.read_latest().id == 21


# ---- the engine on top ----------------------------------------------------------------------


def test_the_engine_over_two_phase_cas(tp: TwoPhaseStore) -> None:
    """Writes, fencing, memtable flushes, compaction, GC and a reopen, all over the wrapper."""
    from slatedb_core.compactor import Compactor
    from slatedb_core.errors import Fenced
    from slatedb_core.options import CompactorOptions, DbOptions
    from slatedb_core.writer.db import Db

    opts = DbOptions(
        flush_interval=timedelta(milliseconds=10),
        manifest_poll_interval=timedelta(milliseconds=200),
    )
    first = Db.open("db", tp, opts)
    for i in range(30):
        first.put(f"k{i:02}".encode(), b"first")
        if i % 10 == 9:
            first.flush_memtable()
    second = Db.open("db", tp, opts)
    with pytest.raises(Fenced):
        first.put(b"late", b"x")
    with pytest.raises(
        Fenced
    ):  # a fenced writer's close() says so (RELIABILITY.md, review finding 8)
        first.close()
    second.put(b"k00", b"second")
    second.flush_memtable()
    with Compactor("db", tp, CompactorOptions(l0_trigger=2, min_merge_width=2)) as compactor:
        assert compactor.run_once().compactions > 0
    stats = run_gc_once("db", tp, GarbageCollectorOptions(min_age=timedelta(0)))
    assert stats.deleted > 0 and stats.two_phase is not None and not stats.two_phase.failed
    second.close()
    with Db.open("db", tp, opts) as third:
        assert third.get(b"k00") == b"second" and third.get(b"k29") == b"first"
        assert third.get(b"late") is None
    # every create went through an intent, and no write was left half-done
    assert tp.txn.pending_intents("ns") == []
    assert not any(is_temp_name(m.path) for m in tp.inner.list("db"))


def _create_in_process(args: tuple[str, str, int], results: Any) -> None:
    store_dir, txn_url, t = args
    store = open_two_phase(NoConditionalWrites(open_store(store_dir)), txn_url)
    try:
        SequencedStore(store, "db", "manifest", "manifest").create(1, f"process {t}".encode())
        results.put((t, True))
    except VersionExists:
        results.put((t, False))
    finally:
        store.close()


def test_racing_processes_on_one_machine_have_one_winner(tmp_path: Path) -> None:
    """The single-machine setup: a local directory without conditional writes and one SQLite
    file, shared by separate processes.

    Plain processes with a bounded wait, killed in ``finally``: a ``multiprocessing.Pool`` whose
    worker dies waits forever, and a test timeout then left its children holding the run's
    output pipe open."""
    import multiprocessing

    store_dir, txn_url = str(tmp_path / "store"), f"sqlite:///{tmp_path}/txn.sqlite"
    open_txn_store(txn_url).close()  # create the tables once, outside the race
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_create_in_process, args=((store_dir, txn_url, t), results), daemon=True)
        for t in range(4)
    ]
    for p in procs:
        p.start()
    try:
        outcome = dict(results.get(timeout=240) for _ in procs)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(10)
    won = [t for t, w in outcome.items() if w]
    assert len(won) == 1
    store = open_two_phase(NoConditionalWrites(open_store(store_dir)), txn_url)
    assert store.get("db/manifest/00000000000000000001.manifest").data == (
        f"process {won[0]}".encode()
    )
    store.close()


def test_a_listing_cannot_miss_a_write_that_completes_while_it_runs(tp: TwoPhaseStore) -> None:
    """The listing reads the uncommitted intents before it lists the objects. Here the write
    is inserted before the listing starts and copied + committed between the listing's two
    reads; read the other way round, the object would be in neither."""
    raw: FaultyStore = tp.inner  # type: ignore[assignment]
    path = "db/manifest/00000000000000000003.manifest"
    copy = raw.pause("copy", "put", path)
    writer = threading.Thread(target=lambda: tp.put_if_absent(path, b"x"))
    writer.start()
    assert copy.wait_reached()
    listed = raw.pause("listed", "list", "db/manifest", when="after")
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(m.path for m in tp.list("db/manifest")))
    reader.start()
    assert listed.wait_reached()
    copy.release()
    writer.join()
    intent = tp.txn.get_intent("ns", path)
    assert intent is not None and intent.committed
    listed.release()
    reader.join()
    assert path in seen


def test_background_completion_acknowledges_at_the_insert(raw: FaultyStore, txn_url: str) -> None:
    tp = TwoPhaseStore(raw, open_txn_store(txn_url), namespace="ns", complete_in_background=2)
    path = "db/manifest/00000000000000000001.manifest"
    copy = raw.pause("copy", "put", path)
    seq = SequencedStore(tp, "db", "manifest", "manifest")
    data = payload(1)
    seq.create(1, data)  # returns while the copy is parked
    assert copy.wait_reached() and not raw.inner.exists(path)
    assert seq.latest_id() == 1 and seq.read(1) == data  # the read completes it
    copy.release()
    for i in range(2, 21):
        seq.create(i, payload(i))
    tp.close()  # waits for the background completions
    txn = open_txn_store(txn_url)
    assert txn.pending_intents("ns") == []
    txn.close()
    assert [e.id for e in SequencedStore(raw, "db", "manifest", "manifest").list()] == list(
        range(1, 21)
    )
    assert not any(is_temp_name(m.path) for m in raw.list("db"))


@pytest.mark.s3
def test_an_s3_url_with_a_txn_key_opens_two_phase_cas_for_every_caller(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI, Dagster and Spark all take a store URL: ``txn`` (URL-encoded) or SLATEDB_TXN_URL
    puts two-phase CAS under them; a bad transactional URL is refused before anything is written."""
    from urllib.parse import quote

    from click.testing import CliRunner

    from slatedb_core.cli.main import cli
    from slatedb_core.writer.db import Db

    txn = f"sqlite:///{tmp_path}/txn.db"
    url = f"{s3_url}{'&' if '?' in s3_url else '?'}txn={quote(txn, safe='')}"
    store = open_store(url)
    assert isinstance(store, TwoPhaseStore)
    try:
        path = "db/manifest/00000000000000000001.manifest"
        store.put_if_absent(path, b"first")
        with pytest.raises(ObjectAlreadyExists):
            store.put_if_absent(path, b"second")
        assert store.get(path).data == b"first"
        with Db.open("orders", store) as db:
            db.put(b"k", b"v")
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["--url", url, "--path", "orders", "get", "k"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "v"

    monkeypatch.setenv("SLATEDB_TXN_URL", txn)
    from_env = open_store(s3_url)
    assert isinstance(from_env, TwoPhaseStore)
    from_env.close()
    monkeypatch.delenv("SLATEDB_TXN_URL")

    before = [(m.path, m.e_tag) for m in open_store(s3_url).list("")]
    bad = f"{s3_url}{'&' if '?' in s3_url else '?'}txn=mysql%3A%2F%2Fh%2Fdb"
    with pytest.raises(InvalidArgument, match="transactional store URL"):
        open_store(bad)
    assert [(m.path, m.e_tag) for m in open_store(s3_url).list("")] == before


def test_background_completion_keeps_the_bytes_of_a_reused_buffer(
    raw: FaultyStore, txn_url: str
) -> None:
    """A caller's buffer (a memoryview of scratch, as the bulk SST encoder hands out) may change
    as soon as put_if_absent returns; the background copy still writes the bytes it was given."""
    tp = TwoPhaseStore(raw, open_txn_store(txn_url), namespace="ns", complete_in_background=1)
    copy = raw.pause("copy", "put", "bulk/a.sst")
    buf = bytearray(b"A" * 4096)
    tp.put_if_absent("bulk/a.sst", memoryview(buf))  # type: ignore[arg-type]
    assert copy.wait_reached()
    buf[:] = b"B" * 4096  # the next SST is encoded into the same scratch
    copy.release()
    tp.close()
    assert raw.inner.get("bulk/a.sst").data == b"A" * 4096
