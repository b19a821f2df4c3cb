"""The .compactions namespace: sequenced, boundary-checked, fenced, and honest after crashes."""

from __future__ import annotations

import dataclasses
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
from slatedb_core.compactor.compactions_codec import (
    CHECKSUM_SLOT,
    COMPACTION,
    COMPACTIONS,
    TIERED_SPEC,
)
from slatedb_core.compactor.compactions_model import (
    CompactionContext,
    Subcompaction,
    WorkerSpec,
)
from slatedb_core.errors import (
    CompactionCancelled,
    CorruptionError,
    InvalidArgument,
    ObjectNotFound,
)
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest.flatbuf import FbReader, FbWriter
from slatedb_core.manifest.model import CompactedSst, SstInfo
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.manifest.tables import read_ulid, write_ulid
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore

from . import seed_l0s


def latest(store: ObjectStore) -> tuple[int, CompactionsState]:
    found = read_latest_state(store, "db")
    assert found is not None
    return found


def running(outputs: tuple[ULID, ...], views: tuple[ULID, ...] = ()) -> CompactionRecord:
    return CompactionRecord(
        id=ULID(),
        kind="l0",
        source_view_ids=views,
        source_run_ids=(),
        destination=0,
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


def _sst(sst_id: ULID | None = None) -> CompactedSst:
    info = SstInfo(
        first_key=b"a",
        last_key=b"z",
        index_offset=100,
        index_len=20,
        filter_offset=120,
        filter_len=8,
        compression=3,
        entry_count=7,
        size_bytes=200,
        stats_offset=128,
        stats_len=16,
        filter_format=1,
    )
    return CompactedSst(sst_id or ULID(), info, format_version=2)


def _every_kind_of_record() -> CompactionsState:
    """Ours in each of our statuses, and SlateDB's with every field its 0.17 writer fills."""
    ctx = CompactionContext(
        (
            Subcompaction(BytesRange(BytesBound.unbounded(), BytesBound.excluded(b"m")), (_sst(),)),
            Subcompaction(BytesRange(BytesBound.included(b"m"), BytesBound.unbounded())),
        ),
        retention_min_seq=42,
    )
    return CompactionsState(
        7,
        (
            running((ULID(),), (ULID(), ULID())),
            CompactionRecord(ULID(), "sorted-runs", (), (3, 2), 2, (ULID(),), "committed", 1, 2),
            CompactionRecord(ULID(), "l0", (ULID(),), (), 4, status="failed", error="boom"),
            CompactionRecord(
                ULID(),
                "l0",
                (ULID(),),
                (1,),
                1,
                status="compacted",
                worker=WorkerSpec("01M86BHEHJH5B5G160ZSA7SN9H", 17),
                output_ssts=(_sst(), _sst()),
                context=ctx,
            ),
            CompactionRecord(
                ULID(), "l0", (ULID(),), (), 5, status="scheduled", segment=b"tenant/"
            ),
            CompactionRecord(
                ULID(), "sorted-runs", (), (6,), 0, status="submitted", segment=b"old/", drain=True
            ),
            CompactionRecord(
                ULID(), "l0", (ULID(),), (), 3, status="running", worker=WorkerSpec("w", 1)
            ),
        ),
    )


def test_every_field_of_both_engines_round_trips() -> None:
    state = _every_kind_of_record()
    assert decode_state(encode_state(state), "x") == state
    assert decode_state(encode_state(CompactionsState()), "x") == CompactionsState()


def test_the_bytes_are_slatedb_0_17s_compactions_v1() -> None:
    """SlateDB's schemas/compactor.fbs, as its 0.17 wheel lays it out (docs/format.md,
    "Compactions"): a big-endian u16 version 2, then the FlatBuffer; our running compaction is
    its Submitted (0) with our slot 21 set; committed is its Completed (2), failed its Failed (3)."""
    views = (ULID(), ULID())
    ours = running((ULID(),), views)
    done = CompactionRecord(ULID(), "sorted-runs", (), (4, 3), 3, status="committed")
    data = encode_state(CompactionsState(9, (ours, done)))
    assert data[:2] == b"\x00\x02"
    r = FbReader(data[2:])
    epoch, records, *_, nonce, crc = r.table(COMPACTIONS, r.root())
    assert epoch == 9
    first, second = (r.table(COMPACTION, p) for p in r.tables(records, "Compaction"))
    assert read_ulid(r, first[0]) == ours.id
    assert first[1] == 1  # TieredCompactionSpec
    assert first[3] == 0 and first[21] == 1
    legacy, runs, views_at, segment, destination = r.table(TIERED_SPEC, first[2])
    assert tuple(read_ulid(r, p) for p in r.tables(views_at, "l0_view_ids")) == views
    assert legacy is None and runs is None and r.blob(segment) == b"" and destination == 0
    assert r.tables(first[4], "output_ssts") == []
    assert [read_ulid(r, p) for p in r.tables(first[16], "outputs")] == list(ours.outputs)
    assert nonce is not None and r.slot_position(COMPACTIONS, r.root(), CHECKSUM_SLOT) is not None
    assert crc != 0
    assert second[3] == 2 and second[21] is None
    _, runs2, _, _, destination2 = r.table(TIERED_SPEC, second[2])
    assert r.u32s(runs2) == (4, 3) and destination2 == 3
    failed = dataclasses.replace(done, status="failed")
    again = FbReader(encode_state(CompactionsState(9, (failed,)))[2:])
    (only,) = again.tables(again.table(COMPACTIONS, again.root())[1], "Compaction")
    assert again.table(COMPACTION, only)[3] == 3


def _slatedb_style(version: int, *, legacy_ssts: bool = False) -> bytes:
    """An object as SlateDB writes it: none of our slots, no nonce, no checksum."""
    w = FbWriter()
    views = w.tables([write_ulid(w, VIEW)])
    runs = w.u32s([5, 4])
    destination = 9 if version >= 2 else None
    spec_fields = [None, runs, None, w.blob(b""), destination]
    spec_fields[0 if legacy_ssts else 2] = views
    spec = w.table(TIERED_SPEC, spec_fields)
    compaction = w.table(COMPACTION, (write_ulid(w, CID), 1, spec, 5, w.tables([])))
    root = w.table(COMPACTIONS, (3, w.tables([compaction])))
    return version.to_bytes(2, "big") + w.finish(root)


VIEW, CID = ULID(), ULID()


@pytest.mark.parametrize("version", [1, 2])
def test_records_slatedb_wrote_decode_as_slatedb_reads_them(version: int) -> None:
    """Version 1 has no destination: SlateDB takes the lowest source run; the deprecated ``ssts``
    field stands in for ``l0_view_ids``."""
    for legacy in (False, True):
        state = decode_state(_slatedb_style(version, legacy_ssts=legacy), "x")
        (c,) = state.compactions
        assert state.compactor_epoch == 3 and c.id == CID and c.status == "scheduled"
        assert c.source_view_ids == (VIEW,) and c.source_run_ids == (5, 4)
        assert c.destination == (9 if version == 2 else 4) and c.kind == "l0"
        assert c.outputs == () and c.created_at_ms == 0 and c.error is None


def test_every_bit_flip_is_a_typed_error() -> None:
    """The CRC-32 in our root slot 3 covers every byte; a flip that hides it (a cut vtable)
    leaves our compaction slots without it, which is refused too."""
    data = encode_state(CompactionsState(3, (running((ULID(),), (ULID(),)),)))
    for i in range(len(data)):
        for bit in (0, 3, 7):
            broken = bytearray(data)
            broken[i] ^= 1 << bit
            with pytest.raises(CorruptionError):
                decode_state(bytes(broken), "x")


def test_values_past_slatedbs_field_widths_are_refused() -> None:
    """Sorted run ids are u32 in SlateDB's schema."""
    too_big = CompactionRecord(ULID(), "sorted-runs", (), (2**32,), 0)
    with pytest.raises(InvalidArgument):
        encode_state(CompactionsState(1, (too_big,)))
    with pytest.raises(InvalidArgument):
        encode_state(CompactionsState(2**64, ()))


def test_only_a_bounded_history_of_finished_compactions_is_kept() -> None:
    state = CompactionsState(1)
    live = running((ULID(),))
    state = state.with_record(live)
    for _ in range(50):
        state = state.with_record(CompactionRecord(ULID(), "l0", (), (), 0, status="committed"))
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


def test_a_successor_closes_slatedbs_unfinished_compactions_and_keeps_its_requests(
    store: ObjectStore,
) -> None:
    """A compactor that takes over from SlateDB's coordinator (fenced by the epoch bump) closes
    what that coordinator had under way, judged like ours; a ``submitted`` request is left for
    a SlateDB coordinator to validate later."""
    seed_l0s(store, flushes=2)
    m = ManifestStore(store, "db").read_latest().manifest
    landed_sst = m.ssts[0]
    landed = CompactionRecord(
        ULID(),
        "l0",
        (ULID(),),
        (),
        0,
        status="compacted",
        worker=WorkerSpec("w", 1),
        output_ssts=(_sst(landed_sst.id),),
    )
    lost = CompactionRecord(
        ULID(), "l0", (ULID(),), (), 0, status="compacted", output_ssts=(_sst(),)
    )
    claimed = CompactionRecord(
        ULID(),
        "l0",
        (m.l0[0].view_id,),
        (),
        0,
        status="running",
        worker=WorkerSpec("w", 1),
        context=CompactionContext((Subcompaction(BytesRange(), (_sst(),)),), 0),
    )
    waiting = CompactionRecord(ULID(), "l0", (m.l0[0].view_id,), (), 0, status="scheduled")
    asked = CompactionRecord(ULID(), "l0", (m.l0[0].view_id,), (), 0, status="submitted")
    old = CompactionsStore(store, "db", epoch=1)
    for r in (landed, lost, claimed, waiting, asked):
        old.put(r)
    assert in_flight_output_ids(store, "db") == {
        landed_sst.id,
        *lost.written_output_ids(),
        *claimed.written_output_ids(),
    }
    CompactionsStore(store, "db", epoch=2).take_over(m)
    _, state = latest(store)
    statuses = {c.id: c.status for c in state.compactions}
    assert statuses == {
        landed.id: "committed",
        lost.id: "failed",
        claimed.id: "failed",
        waiting.id: "failed",
        asked.id: "submitted",
    }
    assert state.get(landed.id) == dataclasses.replace(
        landed,
        status="committed",
        updated_at_ms=state.get(landed.id).updated_at_ms,  # type: ignore[union-attr]
    )
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
