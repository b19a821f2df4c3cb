"""``.compactions`` against SlateDB 0.17's own engine (the ``slatedb`` wheel): we decode every
record its compactor writes, it decodes ours, and its compactor runs on a database whose latest
record we wrote (docs/format.md, "Compactions")."""

from __future__ import annotations

import asyncio
import time

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed
from ulid import ULID

from slatedb_core.compactor import run_compaction_once
from slatedb_core.compactor.compactions import (
    CompactionRecord,
    CompactionsState,
    CompactionsStore,
    compactions_seq,
    decode_state,
    encode_state,
    now_ms,
    read_latest_state,
)
from slatedb_core.compactor.compactions_model import WorkerSpec
from slatedb_core.manifest.model import CompactedSst, SstInfo
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore
from tests.interop import conftest as interop
from tests.interop.oracle import Oracle, SlateWriter, settings

pytestmark = pytest.mark.slatedb
# the cross-engine tests' fixtures: a directory both engines open, the wheel on it
oracle = interop.oracle
root = interop.root
store = interop.store

# the wheel's CompactionStatus names, ours beside them (its Completed is our committed)
STATUS = {
    "SUBMITTED": "submitted",
    "SCHEDULED": "scheduled",
    "RUNNING": "running",
    "COMPACTED": "compacted",
    "COMPLETED": "committed",
    "FAILED": "failed",
}


def fill(db: SlateWriter, rounds: int, tag: str) -> dict[bytes, bytes]:
    """``rounds`` L0 SSTs; a flush stalled on L0 backpressure (a stuck compactor) fails."""
    model: dict[bytes, bytes] = {}
    flush = sdb.FlushOptions(flush_type=sdb.FlushType.MEM_TABLE)
    for r in range(rounds):
        for i in range(20):
            k, v = b"key%03d" % i, f"{tag}-{i}-{r}".encode()
            db.put(k, v, durable=False)
            model[k] = v
        db.oracle.run(asyncio.wait_for(db.db.flush_with_options(flush), 60))
    return model


def slatedb_compacted_database(oracle: Oracle) -> None:
    """A database whose ``compactions/`` SlateDB's compactor wrote: one L0 compaction through
    every status (submitted, scheduled, running, compacted, completed)."""
    db = oracle.open_db()
    fill(db, 10, "a")
    oracle.admin().wait_until(lambda m: bool(m.compacted), timeout_s=60)
    db.shutdown()


def source_ids(spec: object) -> tuple[list[str], list[int]]:
    views = [str(s[0]) for s in spec.sources if s.is_SST_VIEW()]  # type: ignore[attr-defined]
    runs = [int(s[0]) for s in spec.sources if s.is_SORTED_RUN()]  # type: ignore[attr-defined]
    return views, runs


def assert_same(ours: CompactionsState, theirs: object) -> None:
    """Our decoding of a version equals what the wheel's Admin decodes of it."""
    assert ours.compactor_epoch == theirs.compactor_epoch  # type: ignore[attr-defined]
    wheel = theirs.recent_compactions  # type: ignore[attr-defined]
    assert [str(c.id) for c in ours.compactions] == [c.id for c in wheel]
    for c, w in zip(ours.compactions, wheel, strict=True):
        expected = STATUS[w.status.name]
        ours_running = c.status == "running" and c.worker is None  # its Submitted
        assert c.status == expected or (ours_running and expected == "submitted"), (c, w.status)
        views, runs = source_ids(w.spec)
        assert [str(v) for v in c.source_view_ids] == views
        assert list(c.source_run_ids) == runs
        assert c.drain == w.spec.is_DRAIN_SEGMENT() and c.segment == w.spec.segment
        if w.spec.is_TIERED():
            assert c.destination == w.spec.destination
        if c.status in ("compacted", "committed", "failed"):  # the wheel drops the rest's
            assert [str(s.id) for s in c.output_ssts] == [h.id.value for h in w.output_ssts]
            for s, h in zip(c.output_ssts, w.output_ssts, strict=True):
                assert (s.info.first_key, s.info.last_key) == (
                    h.info.first_entry,
                    h.info.last_entry,
                )
                assert s.info.index_offset == h.info.index_offset


def test_we_decode_every_record_slatedbs_compactor_writes(
    oracle: Oracle, store: ObjectStore
) -> None:
    slatedb_compacted_database(oracle)
    seq = compactions_seq(store, "db")
    entries = seq.list()
    versions = {v.id: v for v in oracle.admin().compactions()}
    assert len(entries) >= 5 and set(versions) == {e.id for e in entries}
    seen: set[str] = set()
    for e in entries:
        state = decode_state(seq.read(e.id), e.path)
        assert_same(state, versions[e.id])
        for c in state.compactions:
            seen.add(c.status)
            if c.status == "committed":
                assert c.worker is not None and c.output_ssts
                assert c.output_ssts[0].format_version == 2
    assert {"submitted", "scheduled", "running", "compacted", "committed"} <= seen


def test_slatedb_decodes_what_we_write(oracle: Oracle, store: ObjectStore) -> None:
    """Every status and field of both engines, on top of SlateDB's own latest version."""
    slatedb_compacted_database(oracle)
    found = read_latest_state(store, "db")
    assert found is not None
    last_id, theirs = found
    info = SstInfo(
        first_key=b"a",
        last_key=b"z",
        index_offset=10,
        index_len=5,
        entry_count=3,
        size_bytes=90,
        stats_offset=15,
        stats_len=4,
        filter_format=1,
    )
    ours = (
        CompactionRecord(ULID(), "l0", (ULID(), ULID()), (), 3, (ULID(),), "running", 5, 6),
        CompactionRecord(ULID(), "sorted-runs", (), (2, 1), 1, (ULID(),), "committed", 5, 6),
        CompactionRecord(ULID(), "l0", (ULID(),), (4,), 4, status="failed", error="boom"),
        CompactionRecord(
            ULID(),
            "l0",
            (ULID(),),
            (),
            9,
            status="compacted",
            worker=WorkerSpec("w1", 123),
            output_ssts=(CompactedSst(ULID(), info, 2),),
        ),
        CompactionRecord(
            ULID(), "sorted-runs", (), (7,), 0, status="scheduled", segment=b"seg/", drain=True
        ),
    )
    state = CompactionsState(theirs.compactor_epoch, theirs.compactions + ours)
    compactions_seq(store, "db").create(last_id + 1, encode_state(state))
    wheel = oracle.run(oracle.admin().admin.read_compactions(None))
    assert wheel.id == last_id + 1
    assert_same(state, wheel)
    assert wheel.recent_compactions[len(theirs.compactions)].status.name == "SUBMITTED"


def test_slatedbs_compactor_runs_over_our_records(oracle: Oracle, store: ObjectStore) -> None:
    """SlateDB's Db (its compactor in-process) opens a database whose latest record we wrote:
    one of our compactions left running after its commit landed (sources gone), one left
    running before it (sources still in the manifest), one committed, one failed. Its
    coordinator fences ours, revalidates both running ones (ours are its Submitted): the first
    fails, the second runs again; its own L0 compactions carry on, and every key reads back.
    (Written as its Running, the first was reclaimed and released forever and blocked its L0
    compactions, so writes stalled on L0 backpressure.)"""
    slatedb_compacted_database(oracle)
    found = read_latest_state(store, "db")
    assert found is not None
    epoch = found[1].compactor_epoch
    db = oracle.open_db(s=settings(compactor=False))
    fill(db, 4, "b")
    db.shutdown()
    manifest = oracle.admin().latest()
    l0 = [v.id for v in manifest.l0]
    assert len(l0) >= 2
    next_run = max((r.id for r in manifest.compacted), default=-1) + 1
    old = now_ms() - 60_000
    gone = CompactionRecord(
        ULID(), "l0", (ULID(), ULID()), (), next_run, (ULID(),), "running", old, old
    )
    present = CompactionRecord(
        ULID(),
        "l0",
        tuple(ULID.from_str(v) for v in l0[-2:]),
        (),
        next_run,
        (ULID(),),
        "running",
        old,
        old,
    )
    records = CompactionsStore(store, "db", epoch=epoch)
    for r in (
        gone,
        present,
        CompactionRecord(ULID(), "sorted-runs", (), (0,), 0, (ULID(),), "committed", old, old),
        CompactionRecord(ULID(), "l0", (ULID(),), (), 0, status="failed", error="x"),
    ):
        records.put(r)

    db = oracle.open_db()
    model = fill(db, 10, "c")
    admin = oracle.admin()
    deadline = time.monotonic() + 60  # generous: the 2-core test machine is shared
    while True:
        history = admin.compactions()
        latest = history[-1]
        seen: dict[str, set[str]] = {}
        for version in history:
            for c in version.recent_compactions:
                seen.setdefault(c.id, set()).add(c.status.name)
        active = {c.id for c in latest.recent_compactions if c.active}
        # SlateDB keeps only its last finished compaction, so ours may leave without a trace
        settled = not {str(gone.id), str(present.id)} & active
        if settled and len(admin.latest().l0) < 8:
            break
        assert time.monotonic() < deadline, f"SlateDB's compactor is stuck: {seen}"
        time.sleep(0.1)
    assert latest.compactor_epoch > epoch
    assert seen[str(gone.id)] <= {"SUBMITTED", "FAILED"}  # never claimed: failed validation
    assert "COMPACTED" in seen[str(present.id)]  # run again by SlateDB's worker
    for k, v in model.items():
        assert db.get(k) == v
    db.shutdown()
    path, data = _latest_bytes(store)
    assert decode_state(data, path).compactor_epoch > epoch  # SlateDB's rewrite, read by us


def _latest_bytes(store: ObjectStore) -> tuple[str, bytes]:
    seq = compactions_seq(store, "db")
    found = seq.read_latest()
    assert found is not None
    return seq.path(found[0]), found[1]


def test_the_compactors_take_turns(oracle: Oracle, store: ObjectStore) -> None:
    """SlateDB's compactor, then ours, then SlateDB's again on one database: ours takes over
    SlateDB's record (its epoch stamped, nothing left under way, its compaction recorded
    committed), and SlateDB's coordinator then decodes our record, fences ours and goes on."""
    slatedb_compacted_database(oracle)
    found = read_latest_state(store, "db")
    assert found is not None
    slatedb_epoch = found[1].compactor_epoch
    db = oracle.open_db(s=settings(compactor=False))
    model = fill(db, 3, "ours")
    db.shutdown()

    stats = run_compaction_once("db", store, CompactorOptions(l0_trigger=2, min_merge_width=2))
    assert stats is not None and stats.compactions >= 1
    after = read_latest_state(store, "db")
    assert after is not None
    ours = after[1]
    assert ours.compactor_epoch > slatedb_epoch and ours.running() == ()
    mine = [c for c in ours.compactions if c.created_at_ms]
    assert mine and all(c.status == "committed" and c.outputs for c in mine)
    wheel = oracle.run(oracle.admin().admin.read_compactions(None))
    assert_same(ours, wheel)

    db = oracle.open_db()
    model.update(fill(db, 10, "slatedb-again"))
    admin = oracle.admin()
    admin.wait_until(lambda m: len(m.l0) < 8, timeout_s=60)
    assert admin.compactions()[-1].compactor_epoch > ours.compactor_epoch
    for k, v in model.items():
        assert db.get(k) == v
    db.shutdown()
