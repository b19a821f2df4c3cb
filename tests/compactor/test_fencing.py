"""A compactor replaced by a newer one (a higher compactor epoch) is fenced: its commit and its
later passes raise ``Fenced``, its outputs are left for the GC, and a replaced compactor whose base
GC collected is fenced, not committed (the manifest update loop)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from ulid import ULID

from slatedb_core.compactor import Compactor, read_latest_state
from slatedb_core.compactor.compactions import CompactionRecord, CompactionsStore, compactions_seq
from slatedb_core.compactor.distributed import DistributedCompactor, execute_subcompaction
from slatedb_core.errors import Fenced, ObjectNotFound
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedEntry
from slatedb_core.meta.versioned import collect_old_versions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore
from tests.compactor.compactor_steps import MANIFEST_CREATE, OPTS, latest_state
from tests.compactor.subcompaction_steps import GC_NOW, PATH, SMALL_SSTS, contents, fill, run_all

from . import read_back, seed_l0s


# ---- the shared update loop: attacks it survives -----------------------------------------------
def _running_record() -> CompactionRecord:
    return CompactionRecord(
        id=ULID(),
        kind="l0",
        source_view_ids=(),
        source_run_ids=(),
        destination=0,
        outputs=(ULID(),),
    )


def test_held_a_stale_compactor_whose_base_gc_collected_is_fenced_not_committed(
    mem: ObjectStore,
) -> None:
    """A replaced compactor (epoch 1) still holds id 1 as its base; the new one (epoch 2) wrote
    2..4 and GC collected 1..3. The stale put re-creates id 2 behind the boundary: it must be
    void (deleted) and the retry must meet the fence, never report success.

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    stale = CompactionsStore(mem, "db", epoch=1)
    stale.put(_running_record())  # id 1
    newer = CompactionsStore(mem, "db", epoch=2)
    for _ in range(3):
        newer.put(_running_record())  # ids 2, 3, 4
    seq = compactions_seq(mem, "db")
    entries = seq.list()

    def delete(doomed: Sequence[SequencedEntry]) -> None:
        for e in doomed:
            mem.delete(e.path)

    collect_old_versions(
        seq.boundary, entries, entries[-1].id, min_age_s=0, now_s=time.time() + 60, delete=delete
    )
    assert [e.id for e in seq.list()] == [4]
    with pytest.raises(Fenced):
        stale.put(_running_record())
    assert [e.id for e in seq.list()] == [4]
    with pytest.raises(ObjectNotFound):
        seq.read(2)


# ---- a compactor fenced by a newer one ---------------------------------------------------------
def test_an_older_compactor_is_fenced_and_only_the_newer_ones_work_lands(
    store: ObjectStore,
) -> None:
    model = seed_l0s(store)
    faulty = FaultyStore(store)
    a = Compactor("db", faulty, OPTS)
    pause = faulty.pause("a-commit", "put_if_absent", MANIFEST_CREATE)
    raised: list[BaseException] = []

    def run_a() -> None:
        try:
            a.run_once()
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=run_a)
    t.start()
    assert pause.wait_reached(30)  # A has written its outputs and is about to commit
    a_outputs = {o for r in latest_state(store).running() for o in r.outputs}
    assert a_outputs
    b = Compactor("db", store, OPTS)
    assert b.epoch == a.epoch + 1
    pause.release()
    t.join(30)
    assert len(raised) == 1 and isinstance(raised[0], Fenced)
    with pytest.raises(Fenced):
        a.run_once()  # stays fenced

    b_stats = b.run_once()
    assert b_stats.compactions >= 1
    got, m = read_back(store)
    assert got == model
    assert not a_outputs & {s.id for s in m.ssts}
    b_outputs = {s.id for r in b.results for s in r.outputs}
    run_ssts = {v.sst_id for r in m.compacted for v in r.views}
    assert run_ssts <= b_outputs
    # B's takeover closed A's compaction as failed, so its outputs are garbage for the GC
    state = latest_state(store)
    assert state.compactor_epoch == b.epoch and not state.running()
    assert any(c.status == "failed" and set(c.outputs) == a_outputs for c in state.compactions)


def test_a_compactor_finding_a_newer_epoch_in_the_record_is_fenced(store: ObjectStore) -> None:
    seed_l0s(store, flushes=1)
    old = CompactionsStore(store, "db", epoch=1)
    new = CompactionsStore(store, "db", epoch=2)
    manifest = ManifestStore(store, "db").read_latest().manifest
    old.take_over(manifest)
    new.take_over(manifest)
    with pytest.raises(Fenced):
        old.take_over(manifest)


# ---- key-range subcompactions of a stale compactor ---------------------------------------------
def test_a_stale_compactors_commit_is_fenced_and_its_outputs_collected(
    store: ObjectStore,
) -> None:
    """Was tests/test_distributed_compaction.py."""
    expected = fill(store)
    stale = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = stale.plan(3)
    assert plan is not None
    results = run_all(store, plan)
    written = {s.id for r in results for s in r.outputs}
    assert written
    Compactor(PATH, store, SMALL_SSTS).close()  # a successor takes over the epoch
    with pytest.raises(Fenced):
        stale.commit(plan, results)
    m = ManifestStore(store, PATH).read_latest().manifest
    assert not written & {s.id for s in m.ssts}
    state = read_latest_state(store, PATH)
    assert state is not None
    record = state[1].get(plan.compaction_id)
    assert record is not None and record.status == "failed"
    run_gc_once(PATH, store, GC_NOW)
    for sst_id in written:
        assert not store.exists(f"{PATH}/compacted/{sst_id}.sst")
    assert contents(store) == {k: v for k, v in expected.items() if v is not None}


def test_a_stale_compactors_subcompaction_stops_before_writing(store: ObjectStore) -> None:
    """Was tests/test_distributed_compaction.py."""
    fill(store, batches=2)
    stale = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = stale.plan(2)
    assert plan is not None
    Compactor(PATH, store, SMALL_SSTS).close()
    before = {m.path for m in store.list(f"{PATH}/compacted/")}
    with pytest.raises(Fenced):
        execute_subcompaction(store, plan, 0)
    assert {m.path for m in store.list(f"{PATH}/compacted/")} == before
