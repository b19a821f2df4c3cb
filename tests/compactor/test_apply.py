"""The manifest change of a compaction: pure, re-applied to whatever manifest is latest."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from ulid import ULID

from slatedb_core.compactor.executor import apply_compaction
from slatedb_core.compactor.scheduler import CompactionPlan, plan_compaction
from slatedb_core.errors import CompactionSourceChanged
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest.model import (
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.options import CompactorOptions


def sst() -> CompactedSst:
    return CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z", size_bytes=10))


def view(s: CompactedSst) -> SstView:
    return SstView(s.id, s.id)


def l0_manifest(n: int, runs: int = 0) -> Manifest:
    ssts = [sst() for _ in range(n + runs)]
    l0 = tuple(view(s) for s in reversed(ssts[:n]))  # newest first
    compacted = tuple(SortedRun(runs - 1 - i, (view(s),)) for i, s in enumerate(ssts[n:]))
    return Manifest(ssts=tuple(ssts), l0=l0, compacted=compacted)


L0_ALL = CompactorOptions(l0_trigger=1)


def test_l0_compaction_keeps_views_the_writer_added_meanwhile() -> None:
    m = l0_manifest(3)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None
    fresh = sst()
    later = dataclasses.replace(m, ssts=(*m.ssts, fresh), l0=(view(fresh), *m.l0))
    out = [sst(), sst()]
    new = apply_compaction(later, plan, out)
    assert new.l0 == (view(fresh),)
    assert [r.id for r in new.compacted] == [0]
    assert [v.sst_id for v in new.compacted[0].views] == [o.id for o in out]
    assert {s.id for s in new.ssts} == {fresh.id, *(o.id for o in out)}
    assert new.last_compacted_l0_view_id == m.l0[0].view_id


def test_l0_output_goes_above_every_existing_run() -> None:
    m = l0_manifest(2, runs=2)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None and not plan.drop_tombstones
    new = apply_compaction(m, plan, [sst()])
    assert [r.id for r in new.compacted] == [2, 1, 0]


def test_a_vanished_l0_view_refuses_the_commit() -> None:
    m = l0_manifest(3)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None
    gone = dataclasses.replace(m, l0=m.l0[:2])
    with pytest.raises(CompactionSourceChanged):
        apply_compaction(gone, plan, [sst()])


def test_a_narrowed_l0_view_refuses_the_commit() -> None:
    m = l0_manifest(2)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None
    narrowed = dataclasses.replace(
        m.l0[1], visible_range=BytesRange(BytesBound.included(b"c"), BytesBound.unbounded())
    )
    with pytest.raises(CompactionSourceChanged):
        apply_compaction(dataclasses.replace(m, l0=(m.l0[0], narrowed)), plan, [sst()])


def test_dropped_tombstones_refuse_a_commit_above_a_new_older_run() -> None:
    m = l0_manifest(2)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None and plan.drop_tombstones
    s = sst()
    below = dataclasses.replace(m, ssts=(*m.ssts, s), compacted=(SortedRun(5, (view(s),)),))
    with pytest.raises(CompactionSourceChanged):
        apply_compaction(below, plan, [sst()])


def run_merge_plan(m: Manifest, i: int, j: int) -> CompactionPlan:
    return CompactionPlan(
        kind="sorted-runs",
        source_views=(),
        source_runs=m.compacted[i:j],
        destination=max(r.id for r in m.compacted) + 1,
        drop_tombstones=j == len(m.compacted),
    )


def test_merged_runs_are_replaced_at_the_newest_source_position() -> None:
    m = l0_manifest(0, runs=5)  # ids 4 3 2 1 0
    plan = run_merge_plan(m, 1, 4)
    out = [sst()]
    new = apply_compaction(m, plan, out)
    assert [r.id for r in new.compacted] == [4, 5, 0]
    kept = {m.compacted[0].views[0].sst_id, m.compacted[4].views[0].sst_id, out[0].id}
    assert {s.id for s in new.ssts} == kept


def test_a_changed_source_run_refuses_the_commit() -> None:
    m = l0_manifest(0, runs=3)
    plan = run_merge_plan(m, 0, 2)
    s = sst()
    changed = dataclasses.replace(
        m, ssts=(*m.ssts, s), compacted=(SortedRun(2, (view(s),)), *m.compacted[1:])
    )
    with pytest.raises(CompactionSourceChanged):
        apply_compaction(changed, plan, [sst()])
    with pytest.raises(CompactionSourceChanged):
        apply_compaction(dataclasses.replace(m, compacted=m.compacted[1:]), plan, [sst()])


def test_an_empty_output_removes_the_sources_and_adds_no_run() -> None:
    m = l0_manifest(2)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None
    new = apply_compaction(m, plan, [])
    assert new.l0 == () and new.compacted == () and new.ssts == ()


def test_dereferenced_external_ssts_leave_external_dbs() -> None:
    m = l0_manifest(2, runs=1)
    ext_ids = tuple(s.id for s in m.ssts)
    ext = ExternalDb(path="parent", source_checkpoint_id=uuid.uuid4(), sst_ids=ext_ids)
    m = dataclasses.replace(m, external_dbs=(ext,))
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None
    new = apply_compaction(m, plan, [sst()])
    run_sst = m.compacted[0].views[0].sst_id
    assert new.external_dbs[0].sst_ids == (run_sst,)  # the entry stays for the GC to detach


def test_a_new_run_never_reuses_an_id_that_appeared_meanwhile() -> None:
    m = l0_manifest(2)
    plan = plan_compaction(m, L0_ALL)
    assert plan is not None and plan.destination == 0
    s = sst()
    # someone else's run appeared; tombstones are not dropped in this variant
    keep = dataclasses.replace(plan, drop_tombstones=False)
    other = dataclasses.replace(m, ssts=(*m.ssts, s), compacted=(SortedRun(0, (view(s),)),))
    new = apply_compaction(other, keep, [sst()])
    assert [r.id for r in new.compacted] == [1, 0]
