"""Key-range subcompactions: planned and committed by one compactor, executed anywhere."""

from __future__ import annotations

import pytest

from slatedb_core.compactor import read_latest_state, run_compaction_once
from slatedb_core.compactor.distributed import (
    DistributedCompactor,
    execute_subcompaction,
)
from slatedb_core.errors import InvalidArgument
from slatedb_core.gc import run_gc_once
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from tests.compactor.subcompaction_steps import (
    GC_NOW,
    PATH,
    SMALL_SSTS,
    contents,
    fill,
    run_all,
)


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


def test_same_result_as_the_single_process_compactor(store: ObjectStore) -> None:
    expected = fill(store)
    dc = DistributedCompactor(PATH, store, SMALL_SSTS)
    while (plan := dc.plan(3)) is not None:
        dc.commit(plan, run_all(store, plan))
    assert run_compaction_once(PATH, store, SMALL_SSTS) is None  # nothing left to do
    assert contents(store) == {k: v for k, v in expected.items() if v is not None}
