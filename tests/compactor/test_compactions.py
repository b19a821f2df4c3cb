"""The .compactions namespace: sequenced, boundary-checked, fenced, and honest after crashes."""

from __future__ import annotations

import threading
import uuid

import pytest
from ulid import ULID

from slatedb_core.compactor import (
    CompactionExecutor,
    CompactionRecord,
    CompactionsState,
    CompactionsStore,
    in_flight_output_ids,
    plan_compaction,
    read_latest_state,
)
from slatedb_core.compactor.compactions import compactions_seq, decode_state, encode_state
from slatedb_core.errors import CompactionCancelled, CorruptionError, ObjectNotFound
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.options import CompactorOptions
from slatedb_core.store.faults import FaultRule, FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

from . import seed_l0s


def latest(store: ObjectStore) -> tuple[int, CompactionsState]:
    found = read_latest_state(store, "db")
    assert found is not None
    return found


def running(outputs: tuple[ULID, ...], views: tuple[ULID, ...] = ()) -> CompactionRecord:
    return CompactionRecord(
        id=ULID(), kind="l0", source_view_ids=views, source_run_ids=(), destination=0,
        outputs=outputs,
    )


def test_records_round_trip_and_damage_is_a_typed_error() -> None:
    state = CompactionsState(3, (running((ULID(), ULID()), (ULID(),)),))
    data = encode_state(state)
    assert decode_state(data, "x") == state
    broken = bytearray(data)
    broken[-10] ^= 1
    with pytest.raises(CorruptionError):
        decode_state(bytes(broken), "x")


def test_only_a_bounded_history_of_finished_compactions_is_kept() -> None:
    state = CompactionsState(1)
    live = running((ULID(),))
    state = state.with_record(live)
    for _ in range(50):
        state = state.with_record(
            CompactionRecord(ULID(), "l0", (), (), 0, status="committed")
        )
    assert len(state.compactions) == 33 and state.running() == (live,)


def test_a_successor_closes_running_records_by_what_the_manifest_holds(
    store: ObjectStore,
) -> None:
    seed_l0s(store, flushes=1)
    m = ManifestStore(store, "db").read_latest().manifest
    in_manifest = (m.ssts[0].id,)
    landed = running(in_manifest)  # its commit landed, its "committed" record did not
    lost = running((ULID(),))  # died before its commit
    old = CompactionsStore(store, "db", epoch=1)
    old.put(landed)
    old.put(lost)
    assert in_flight_output_ids(store, "db") == {*in_manifest, *lost.outputs}
    CompactionsStore(store, "db", epoch=2).take_over(m)
    _, state = latest(store)
    assert state.compactor_epoch == 2
    statuses = {c.id: c.status for c in state.compactions}
    assert statuses == {landed.id: "committed", lost.id: "failed"}
    assert in_flight_output_ids(store, "db") == set()


def test_a_record_landing_behind_the_gc_boundary_is_void_and_retried_on_top(
    store: ObjectStore,
) -> None:
    seed_l0s(store, flushes=1)
    m = ManifestStore(store, "db").read_latest().manifest
    stale = CompactionsStore(store, "db", epoch=1)
    stale.take_over(m)  # id 1; this handle now believes 1 is the latest
    other = CompactionsStore(store, "db", epoch=1)
    for _ in range(3):
        other.put(running((ULID(),)))  # ids 2, 3, 4
    seq = compactions_seq(store, "db")
    seq.advance_boundary(3)
    seq.delete(2)
    seq.delete(3)
    rec = running((ULID(),))
    stale.put(rec)  # tries id 2, which GC declared dead, then lands on top of 4
    object_id, state = latest(store)
    assert object_id == 5 and state.get(rec.id) is not None
    with pytest.raises(ObjectNotFound):
        seq.read(2)


def test_a_cancelled_compaction_commits_nothing_and_is_recorded_failed(
    store: ObjectStore,
) -> None:
    seed_l0s(store, flushes=3)
    opts = CompactorOptions(l0_trigger=2)
    fm = FencedManifest.init_compactor(ManifestStore(store, "db"))
    records = CompactionsStore(store, "db", fm.epoch)
    records.take_over(fm.stored.manifest)
    cancel = threading.Event()
    cancel.set()
    executor = CompactionExecutor(store, "db", fm, records, opts, cancel=cancel)
    planned_on = fm.refresh()
    plan = plan_compaction(planned_on.manifest, opts)
    assert plan is not None
    with pytest.raises(CompactionCancelled):
        executor.execute(plan, planned_on)
    after = ManifestStore(store, "db").read_latest()
    assert after.id == planned_on.id
    _, state = latest(store)
    assert [c.status for c in state.compactions] == ["failed"]


def test_eight_contending_compactors_all_commit_without_exhausting_their_retries() -> None:
    """Distributed compaction puts every executor's records through one ``.compactions``
    namespace. A loser must back off before retrying (the shared update loop of
    slatedb_core.meta.versioned): the winner's next update builds on its cached copy without a
    read, so a loser that retries at once reads, loses and reads again while the winner commits
    record after record, and gives up with CommitRetriesExhausted (on the loop that retried 50
    times at once, 7 runs in 7 failed so; with the backoff the longest losing streak is ~20).

    Each request takes a millisecond, as over a network (so threads interleave as they would
    there), and reading a record takes 3 ms more; the store under the latency is in memory."""
    threads, per_thread = 8, 40
    store = FaultyStore(
        open_store(f"memory://contention-{uuid.uuid4().hex}"),
        rules=[
            FaultRule(latency_s=0.001),
            FaultRule(op="get", path_glob="db/compactions/0*", latency_s=0.003),
        ],
    )
    start = threading.Barrier(threads)
    errors: list[BaseException] = []
    records = [[running((ULID(),)) for _ in range(per_thread)] for _ in range(threads)]

    def run(t: int) -> None:
        writer = CompactionsStore(store, "db", epoch=1)
        start.wait()
        try:
            for rec in records[t]:
                writer.put(rec)
        except BaseException as e:  # reported below, with every other thread's
            errors.append(e)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    object_id, state = latest(store)
    assert object_id == threads * per_thread
    assert {c.id for c in state.running()} == {r.id for rs in records for r in rs}
