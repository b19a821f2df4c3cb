from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from slatedb_core.errors import (
    CommitRetriesExhausted,
    CorruptionError,
    DatabaseDestroyed,
    DatabaseNotFound,
    DatabaseNotInitialized,
    Fenced,
    InjectedFault,
    InvalidArgument,
    ManifestVersionExists,
    ObjectVersionBehindBoundary,
)
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.meta.versioned import RetryPolicy
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore


def incr(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1)


def new_db(store: ObjectStore, path: str = "db") -> ManifestStore:
    ms = ManifestStore(store, path)
    ms.create_initial(Manifest())
    return ms


def test_missing_database_is_a_typed_error(store: ObjectStore) -> None:
    ms = ManifestStore(store, "nothing-here")
    assert ms.try_read_latest() is None
    with pytest.raises(DatabaseNotFound):
        ms.read_latest()


def test_create_initial_twice_loses(store: ObjectStore) -> None:
    new_db(store)
    with pytest.raises(ManifestVersionExists):
        ManifestStore(store, "db").create_initial(Manifest())


def test_update_commits_the_next_id(store: ObjectStore) -> None:
    ms = new_db(store)
    stored = ms.update(incr)
    assert stored.id == 2
    assert ms.read_latest() == stored
    assert ms.read(1).manifest.last_l0_seq == 0


def test_a_change_that_changes_nothing_commits_nothing(store: ObjectStore) -> None:
    ms = new_db(store)
    assert ms.update(lambda m: m).id == 1
    assert ms.update(lambda m: None).id == 1
    assert ms.latest_id() == 1


def test_racing_threads_apply_every_update_exactly_once(store: ObjectStore) -> None:
    new_db(store)
    threads, per_thread = 8, 12
    errors: list[BaseException] = []

    def work() -> None:
        ms = ManifestStore(store, "db")
        try:
            for _ in range(per_thread):
                ms.update(incr)
        except BaseException as e:  # pragma: no cover - surfaced by the assert
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    ms = ManifestStore(store, "db")
    latest = ms.read_latest()
    total = threads * per_thread
    assert latest.id == total + 1
    assert latest.manifest.last_l0_seq == total
    ids = [e.id for e in ms.list()]
    assert ids == list(range(1, total + 2)), "ids must be contiguous"
    # every commit added exactly one: no update lost, none applied twice
    assert [ms.read(i).manifest.last_l0_seq for i in ids] == list(range(total + 1))


def test_older_writer_is_fenced(store: ObjectStore) -> None:
    ms = new_db(store)
    a = FencedManifest.init_writer(ms)
    b = FencedManifest.init_writer(ManifestStore(store, "db"))
    assert (a.epoch, b.epoch) == (1, 2)
    with pytest.raises(Fenced) as ei:
        a.update(incr)
    assert (ei.value.our_epoch, ei.value.current_epoch) == (1, 2)
    with pytest.raises(Fenced):
        a.refresh()
    assert b.update(incr).manifest.last_l0_seq == 1
    assert ms.read_latest().manifest.last_l0_seq == 1


def test_older_compactor_is_fenced_but_writers_and_compactors_coexist(store: ObjectStore) -> None:
    ms = new_db(store)
    w = FencedManifest.init_writer(ms)
    c1 = FencedManifest.init_compactor(ManifestStore(store, "db"))
    c1.update(incr)
    w.update(incr)  # a new compactor does not fence the writer
    c2 = FencedManifest.init_compactor(ManifestStore(store, "db"))
    with pytest.raises(Fenced):
        c1.update(incr)
    c2.update(incr)
    w.update(incr)
    assert ms.read_latest().manifest.last_l0_seq == 4


def test_racing_writer_inits_get_distinct_epochs(store: ObjectStore) -> None:
    new_db(store)
    epochs: list[int] = []
    lock = threading.Lock()

    def open_writer() -> None:
        h = FencedManifest.init_writer(ManifestStore(store, "db"))
        with lock:
            epochs.append(h.epoch)

    workers = [threading.Thread(target=open_writer) for _ in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(epochs) == [1, 2, 3, 4, 5, 6]


def test_destroyed_or_uninitialized_databases_refuse_writers(store: ObjectStore) -> None:
    ms = new_db(store)
    ms.update(lambda m: dataclasses.replace(m, destroyed_at_s=123))
    with pytest.raises(DatabaseDestroyed):
        FencedManifest.init_writer(ms)
    clone = ManifestStore(store, "clone")
    clone.create_initial(Manifest(initialized=False))
    with pytest.raises(DatabaseNotInitialized):
        FencedManifest.init_compactor(clone)


def test_retries_exhausted_is_a_typed_error(store: ObjectStore) -> None:
    new_db(store)
    rival = ManifestStore(store, "db")
    ms = ManifestStore(store, "db", retry=RetryPolicy(max_attempts=3, max_backoff_s=0.001))

    def change_and_lose(m: Manifest) -> Manifest:
        rival.update(incr)  # someone else always commits first
        return incr(m)

    with pytest.raises(CommitRetriesExhausted) as ei:
        ms.update(change_and_lose)
    assert ei.value.attempts == 3


def test_ambiguous_create_is_resolved_without_double_application(store: ObjectStore) -> None:
    new_db(store)
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "*/manifest/*", after_effect=True)
    ms = ManifestStore(faulty, "db")
    stored = ms.update(incr)
    assert stored.id == 2
    assert ("fail_after", "put_if_absent", ms.seq.path(2)) in faulty.events
    latest = ManifestStore(store, "db").read_latest()
    assert latest.id == 2 and latest.manifest.last_l0_seq == 1


def test_create_failing_before_effect_is_retried(store: ObjectStore) -> None:
    new_db(store)
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "*/manifest/*", times=2)
    stored = ManifestStore(faulty, "db").update(incr)
    assert stored.id == 2 and stored.manifest.last_l0_seq == 1
    assert ManifestStore(store, "db").latest_id() == 2


def test_ambiguous_fenced_writer_init_never_double_bumps(store: ObjectStore) -> None:
    new_db(store)
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "*/manifest/*", after_effect=True)
    h = FencedManifest.init_writer(ManifestStore(faulty, "db"))
    assert h.epoch == 1
    assert ManifestStore(store, "db").read_latest().manifest.writer_epoch == 1


def test_unresolvable_create_surfaces_the_store_error(store: ObjectStore) -> None:
    new_db(store)
    faulty = FaultyStore(store)
    faulty.fail_next("put_if_absent", "*/manifest/*", times=100)
    with pytest.raises(InjectedFault):
        ManifestStore(faulty, "db").update(incr)
    assert ManifestStore(store, "db").latest_id() == 1


def _stall_then_collect(store: ObjectStore) -> tuple[FaultyStore, ManifestStore]:
    """SlateDB RFC 0026's race, steps 1-4: the stalled actor has read N=1 and prepared N+1=2."""
    new_db(store)
    faulty = FaultyStore(store)
    return faulty, ManifestStore(faulty, "db")


def _advance_and_collect(store: ObjectStore, upto: int) -> None:
    """What GC does: advance the boundary, then delete at or behind it (never the latest)."""
    gc = ManifestStore(store, "db")
    gc.advance_boundary(upto)
    latest = gc.latest_id()
    for e in gc.list(end=upto + 1):
        gc.delete(e.id, latest=latest)


def test_seed_004_stalled_sequenced_write_is_rejected_after_gc(store: ObjectStore) -> None:
    faulty, stalled = _stall_then_collect(store)
    pp = faulty.pause("stall", "put_if_absent", "*/manifest/*", when="before")
    outcome: list[BaseException | str] = []
    data_holder: list[bytes] = []

    def stalled_writer() -> None:
        from slatedb_core.manifest.codec import encode_manifest

        data = encode_manifest(incr(Manifest()))
        data_holder.append(data)
        try:
            stalled.seq.create(2, data)
            outcome.append("committed")
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=stalled_writer)
    t.start()
    assert pp.wait_reached(10)
    live = ManifestStore(store, "db")
    for _ in range(3):
        live.update(incr)  # ids 2, 3, 4
    _advance_and_collect(store, 3)  # deletes 1..3, keeps latest 4
    assert not store.exists(live.seq.path(2))
    pp.release()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], ObjectVersionBehindBoundary)
    assert live.read_latest().id == 4


def test_seed_004_stalled_zombie_writer_never_reports_success(store: ObjectStore) -> None:
    faulty, stalled_ms = _stall_then_collect(store)
    zombie = FencedManifest.init_writer(stalled_ms)  # epoch 1, manifest 2
    pp = faulty.pause("stall", "put_if_absent", "*/manifest/*", when="before")
    outcome: list[BaseException | str] = []

    def run() -> None:
        try:
            zombie.update(incr)  # prepares manifest 3 from manifest 2, then stalls
            outcome.append("committed")
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=run)
    t.start()
    assert pp.wait_reached(10)
    live = FencedManifest.init_writer(ManifestStore(store, "db"))  # epoch 2 at manifest 3
    for _ in range(3):
        live.update(lambda m: dataclasses.replace(m, wal_id_last_seen=m.wal_id_last_seen + 1))
    _advance_and_collect(store, 4)  # deletes 1..4 (3 was the zombie's target), latest is 6
    pp.release()
    t.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], Fenced), outcome
    latest = ManifestStore(store, "db").read_latest()
    assert latest.id == 6
    assert latest.manifest.writer_epoch == 2 and latest.manifest.last_l0_seq == 0
    assert not store.exists(live.store.seq.path(3)), "the zombie's stale object must not remain"


def test_seed_004_stalled_live_updater_reapplies_on_the_true_latest(store: ObjectStore) -> None:
    faulty, stalled_ms = _stall_then_collect(store)
    compactor = FencedManifest.init_compactor(stalled_ms)  # manifest 2
    pp = faulty.pause("stall", "put_if_absent", "*/manifest/*", when="before")
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(compactor.update(incr)))
    t.start()
    assert pp.wait_reached(10)
    live = ManifestStore(store, "db")
    for _ in range(3):
        live.update(lambda m: dataclasses.replace(m, wal_id_last_seen=m.wal_id_last_seen + 1))
    _advance_and_collect(store, 4)  # the compactor's target id 3 is collected
    pp.release()
    t.join(10)
    latest = live.read_latest()
    # never committed at the dead id 3; applied once, on top of the true latest (5)
    assert latest.id == 6
    assert latest.manifest.last_l0_seq == 1 and latest.manifest.wal_id_last_seen == 3
    assert result and result[0] == latest


def test_corrupted_latest_manifest_is_a_typed_error_naming_it(store: ObjectStore) -> None:
    ms = new_db(store)
    ms.update(incr)
    path = ms.seq.path(2)
    data = bytearray(store.get(path).data)
    data[len(data) // 2] ^= 0x40
    store.put(path, bytes(data))
    with pytest.raises(CorruptionError) as ei:
        ManifestStore(store, "db").read_latest()
    assert path in str(ei.value)
    assert ManifestStore(store, "db").read(1).manifest.last_l0_seq == 0  # older one intact


def test_truncated_manifest_is_a_typed_error(store: ObjectStore) -> None:
    ms = new_db(store)
    path = ms.seq.path(1)
    store.put(path, store.get(path).data[:-7])
    with pytest.raises(CorruptionError):
        ms.read_latest()


def test_only_slatedbs_format_version_is_written(store: ObjectStore) -> None:
    """One format (docs/format.md, "Manifest"): a store asked for another version refuses."""
    with pytest.raises(InvalidArgument, match="format version 1"):
        ManifestStore(store, "db", format_version=1)
    ms = ManifestStore(store, "db", format_version=2)
    stored = ms.create_initial(Manifest())
    assert stored.version == 2 and store.get(ms.seq.path(1)).data[:2] == b"\x00\x02"


def test_update_cost_in_requests_when_uncontended(store: ObjectStore) -> None:
    ms = new_db(store)
    h = FencedManifest.init_writer(ms)
    store.counters.reset()
    n = 32
    t0 = time.perf_counter()
    for _ in range(n):
        h.update(incr)
    assert time.perf_counter() - t0 < 60
    # create + boundary check per commit, plus the pointer every 16 commits
    assert store.counters.total() <= 2 * n + n // 16 + 1
