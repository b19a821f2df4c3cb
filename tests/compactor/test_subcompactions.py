"""Key-range subcompactions: planned and committed by one compactor, executed anywhere."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.compactor import Compactor, read_latest_state, run_compaction_once
from slatedb_core.compactor.distributed import (
    DistributedCompactor,
    DistributedPlan,
    SubcompactionResult,
    execute_subcompaction,
)
from slatedb_core.errors import Fenced, InvalidArgument
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

PATH = "db"
SMALL_SSTS = CompactorOptions(l0_trigger=2, max_sst_size_bytes=64 * 1024, block_size=4096)
GC_NOW = GarbageCollectorOptions(min_age=timedelta(0))


def keys(lo: int, hi: int) -> list[bytes]:
    return [b"k%08d" % i for i in range(lo, hi)]


def fill(store: ObjectStore, batches: int = 4, rows: int = 3000) -> dict[bytes, bytes | None]:
    """``batches`` bulk ingests into L0, overlapping so that later batches overwrite and delete
    earlier keys; returns the expected contents."""
    expected: dict[bytes, bytes | None] = {}
    rng = np.random.default_rng(7)
    with Db.open(PATH, store, DbOptions(l0_sst_size_bytes=48 * 1024)) as db:
        for b in range(batches):
            ks = keys(b * rows // 2, b * rows // 2 + rows)
            vals: list[bytes | None] = [
                None if rng.random() < 0.05 else b"v%d-" % b + k for k in ks
            ]
            db.bulk_ingest(
                pa.table({"key": pa.array(ks, pa.binary()), "value": pa.array(vals, pa.binary())})
            )
            expected.update(zip(ks, vals, strict=True))
    return expected


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Db.open(PATH, store) as db:
        return dict(db.scan())


def run_all(store: ObjectStore, plan: DistributedPlan) -> list[SubcompactionResult]:
    return [execute_subcompaction(store, plan, i) for i in range(plan.subcompactions)]


def test_subcompactions_produce_the_same_database_as_one_compaction(store: ObjectStore) -> None:
    expected = fill(store)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = dc.plan(4)
    assert plan is not None and plan.plan.kind == "l0"
    assert plan.subcompactions == 4
    results = run_all(store, plan)
    assert all(r.rows_out > 0 for r in results), "split keys should cut the input evenly"
    result = dc.commit(plan, results)
    m = ManifestStore(store, PATH).read_latest().manifest
    assert m.l0 == ()
    assert len(m.compacted) == 1
    assert [v.sst_id for v in m.compacted[0].views] == [s.id for s in result.outputs]
    assert result.rows_out == sum(1 for v in expected.values() if v is not None)
    assert contents(store) == {k: v for k, v in expected.items() if v is not None}
    state = read_latest_state(store, PATH)
    assert state is not None
    record = state[1].get(plan.compaction_id)
    assert record is not None and record.status == "committed"
    assert set(record.outputs) == {s.id for s in result.outputs}


def test_split_keys_balance_overlapping_l0_ssts(store: ObjectStore) -> None:
    fill(store, batches=3, rows=4000)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = dc.plan(3)
    assert plan is not None
    rows = [r.rows_in for r in run_all(store, plan)]
    assert min(rows) > 0.5 * max(rows), rows


def test_a_retried_subcompaction_leaves_only_the_committed_attempt(store: ObjectStore) -> None:
    expected = fill(store)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = dc.plan(2)
    assert plan is not None
    abandoned = execute_subcompaction(store, plan, 0)  # a speculative copy that lost
    results = run_all(store, plan)
    dc.commit(plan, results)
    live = {
        v.sst_id
        for r in ManifestStore(store, PATH).read_latest().manifest.compacted
        for v in r.views
    }
    assert not live & {s.id for s in abandoned.outputs}
    run_gc_once(PATH, store, GC_NOW)
    for s in abandoned.outputs:
        assert not store.exists(f"{PATH}/compacted/{s.id}.sst")
    assert contents(store) == {k: v for k, v in expected.items() if v is not None}


def test_commit_needs_one_result_per_subcompaction(store: ObjectStore) -> None:
    fill(store, batches=2)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = dc.plan(2)
    assert plan is not None
    first = execute_subcompaction(store, plan, 0)
    with pytest.raises(InvalidArgument):
        dc.commit(plan, [first])
    with pytest.raises(InvalidArgument):
        dc.commit(plan, [first, first])


def test_a_stale_compactors_commit_is_fenced_and_its_outputs_collected(
    store: ObjectStore,
) -> None:
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
    fill(store, batches=2)
    stale = DistributedCompactor(PATH, store, SMALL_SSTS)
    plan = stale.plan(2)
    assert plan is not None
    Compactor(PATH, store, SMALL_SSTS).close()
    before = {m.path for m in store.list(f"{PATH}/compacted/")}
    with pytest.raises(Fenced):
        execute_subcompaction(store, plan, 0)
    assert {m.path for m in store.list(f"{PATH}/compacted/")} == before


def test_same_result_as_the_single_process_compactor(store: ObjectStore) -> None:
    expected = fill(store)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    while (plan := dc.plan(3)) is not None:
        dc.commit(plan, run_all(store, plan))
    assert run_compaction_once(PATH, store, SMALL_SSTS) is None  # nothing left to do
    assert contents(store) == {k: v for k, v in expected.items() if v is not None}
