"""The scheduler is a pure function, so it is checked exhaustively against a brute-force oracle."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.compactor.scheduler import (
    MAX_L0_SOURCES,
    choose_runs,
    next_run_id,
    plan_compaction,
    run_sizes,
    tier_windows,
)
from slatedb_core.manifest.model import CompactedSst, Manifest, SortedRun, SstInfo, SstView
from slatedb_core.options import CompactorOptions


def sst(size: int) -> CompactedSst:
    return CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z", size_bytes=size))


def manifest(
    run_sizes_: Sequence[int], l0: int = 0, run_ids: Sequence[int] | None = None
) -> Manifest:
    """Runs newest first with the given byte sizes (one SST each) and ``l0`` L0 views."""
    ssts: list[CompactedSst] = []
    runs: list[SortedRun] = []
    ids = list(run_ids) if run_ids is not None else list(range(len(run_sizes_) - 1, -1, -1))
    for rid, size in zip(ids, run_sizes_, strict=True):
        s = sst(size)
        ssts.append(s)
        runs.append(SortedRun(rid, (SstView(ULID(), s.id),)))
    views: list[SstView] = []
    for _ in range(l0):
        s = sst(100)
        ssts.append(s)
        views.append(SstView(s.id, s.id))
    return Manifest(ssts=tuple(ssts), l0=tuple(views), compacted=tuple(runs))


OPTS = CompactorOptions(l0_trigger=4, min_merge_width=4, size_ratio=2.0, max_sorted_runs=12)


def test_an_empty_database_needs_no_compaction() -> None:
    assert plan_compaction(Manifest(), OPTS) is None


def test_l0_below_the_trigger_is_left_alone() -> None:
    assert plan_compaction(manifest([], l0=3), OPTS) is None


def test_l0_at_the_trigger_goes_into_a_new_run_with_every_view() -> None:
    m = manifest([], l0=4)
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.kind == "l0"
    assert plan.source_views == m.l0 and plan.source_runs == ()
    assert plan.destination == 0
    assert plan.drop_tombstones  # no run below: the output is the bottom


def test_a_huge_l0_is_compacted_oldest_views_first_in_bounded_steps() -> None:
    m = manifest([], l0=MAX_L0_SOURCES + 8)
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.source_views == m.l0[8:]  # l0 is newest first


def test_l0_compaction_keeps_tombstones_when_runs_exist_below() -> None:
    plan = plan_compaction(manifest([10], l0=5), OPTS)
    assert plan is not None and plan.kind == "l0" and not plan.drop_tombstones
    assert len(plan.source_views) == 5


def test_l0_takes_priority_over_a_ready_tier() -> None:
    plan = plan_compaction(manifest([10, 10, 10, 10], l0=4), OPTS)
    assert plan is not None and plan.kind == "l0"


def test_new_run_ids_are_one_past_the_largest_existing_id() -> None:
    m = manifest([1, 1000], l0=4, run_ids=[7, 9])
    assert next_run_id(m) == 10
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.destination == 10


def test_similar_adjacent_runs_merge_into_one_at_the_bottom() -> None:
    m = manifest([10, 12, 15, 19])
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.kind == "sorted-runs"
    assert plan.source_runs == m.compacted and plan.drop_tombstones


def test_a_tier_above_an_older_run_keeps_tombstones() -> None:
    m = manifest([10, 10, 10, 10, 5000])
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.source_runs == m.compacted[:4]
    assert not plan.drop_tombstones


def test_too_few_similar_runs_do_not_merge() -> None:
    assert plan_compaction(manifest([10, 10, 10, 1000]), OPTS) is None


def test_runs_out_of_ratio_do_not_tier() -> None:
    assert plan_compaction(manifest([10, 21, 43, 87]), OPTS) is None


def test_only_adjacent_runs_merge() -> None:
    # four runs of 10 bytes exist, but a big run separates them: merging around it would put the
    # big run's entries above newer ones
    assert plan_compaction(manifest([10, 10, 5000, 10, 10]), OPTS) is None


def test_the_cheapest_tier_is_merged_first() -> None:
    m = manifest([100, 100, 100, 100, 1, 1, 1, 1])
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.source_runs == m.compacted[4:]


def test_a_whole_tier_merges_not_just_min_merge_width_of_it() -> None:
    m = manifest([10] * 6 + [10_000])
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.source_runs == m.compacted[:6]


def test_too_many_runs_merge_the_smallest_adjacent_ones() -> None:
    sizes = [3**i for i in range(13)]  # no two within ratio 2: no tier
    m = manifest(sizes)
    plan = plan_compaction(m, OPTS)
    assert plan is not None and plan.source_runs == m.compacted[:4]
    assert not plan.drop_tombstones


def test_too_many_runs_merge_wide_enough_to_get_back_under_the_limit() -> None:
    opts = CompactorOptions(min_merge_width=2, size_ratio=1.0, max_sorted_runs=3)
    sizes = [5**i for i in range(6)]
    window = choose_runs(sizes, opts)
    assert window == (0, 4)  # 6 runs - 4 + 1 = 3


def test_empty_runs_tier_with_tiny_ones() -> None:
    assert tier_windows([0, 1, 2, 0], 2.0) == [(0, 4)]


def test_run_sizes_add_up_every_view() -> None:
    a, b = sst(3), sst(4)
    m = Manifest(ssts=(a, b), compacted=(SortedRun(0, (SstView(a.id, a.id), SstView(b.id, b.id))),))
    assert run_sizes(m) == [7]


# ---- exhaustive check against a brute-force oracle -----------------------------------------------


def _similar(sizes: Sequence[int], ratio: float) -> bool:
    s = [max(1, x) for x in sizes]
    return max(s) <= ratio * min(s)


def _oracle_has_tier(sizes: Sequence[int], opts: CompactorOptions) -> bool:
    n = len(sizes)
    return any(
        _similar(sizes[i:j], opts.size_ratio)
        for i in range(n)
        for j in range(i + opts.min_merge_width, n + 1)
    )


@settings(max_examples=400, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 2000), max_size=16),
    l0=st.integers(0, 6),
    width=st.integers(2, 5),
    ratio=st.sampled_from([1.0, 1.5, 2.0, 4.0]),
    max_runs=st.integers(1, 10),
    trigger=st.integers(1, 5),
)
def test_every_plan_obeys_the_scheduling_rules(
    sizes: list[int], l0: int, width: int, ratio: float, max_runs: int, trigger: int
) -> None:
    opts = CompactorOptions(
        l0_trigger=trigger, min_merge_width=width, size_ratio=ratio, max_sorted_runs=max_runs
    )
    m = manifest(sizes, l0=l0)
    plan = plan_compaction(m, opts)
    n = len(sizes)
    assert plan is None or plan.destination == next_run_id(m)
    assert plan is None or plan.destination not in {r.id for r in m.compacted}
    if l0 >= trigger:
        assert plan is not None and plan.kind == "l0" and plan.source_views == m.l0
        assert plan.drop_tombstones == (n == 0)
        return
    has_tier = _oracle_has_tier(sizes, opts)
    if plan is None:
        assert not has_tier and n <= max_runs
        return
    assert plan.kind == "sorted-runs" and plan.source_views == ()
    runs = list(m.compacted)
    i = runs.index(plan.source_runs[0])
    j = i + len(plan.source_runs)
    assert tuple(runs[i:j]) == plan.source_runs  # adjacent, in age order
    assert j - i >= 2
    assert plan.drop_tombstones == (j == n)
    if has_tier:
        assert j - i >= width and _similar(sizes[i:j], ratio)
        # maximal: neither neighbour could have joined the tier
        assert i == 0 or not _similar(sizes[i - 1 : j], ratio)
        assert j == n or not _similar(sizes[i : j + 1], ratio)
    else:
        assert (n > max_runs and n - (j - i) + 1 <= max(max_runs, 1)) or j - i == n
        totals = [sum(sizes[a : a + j - i]) for a in range(n - (j - i) + 1)]
        assert sum(sizes[i:j]) == min(totals)


@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0])
def test_tier_windows_cover_every_run_and_never_nest(ratio: float) -> None:
    sizes = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 0, 0, 7]
    windows = tier_windows(sizes, ratio)
    assert windows[0][0] == 0 and max(j for _, j in windows) == len(sizes)
    for (a, b), (c, d) in itertools.pairwise(windows):
        assert a < c and b < d  # starts and ends strictly increase: no window inside another
    for i, j in windows:
        assert _similar(sizes[i:j], ratio)
