"""Size-tiered compaction scheduling: a pure function from a manifest to at most one plan.

Pure so that it can be tested exhaustively and re-run on every poll at no cost: no I/O, no clock,
no randomness. The executor re-validates the plan against the latest manifest when it commits, so a
plan computed from a manifest that has since moved on is safe (it fails cleanly or still applies).

Rules, in priority order:

1. **L0.** Once ``len(l0) >= l0_trigger``, the L0 views (the oldest MAX_L0_SOURCES of them) go
   into a NEW sorted run placed newest (first in ``compacted``). Taking the OLDEST views keeps the
   order right: L0 views are newer than every run, views left behind are newer than the ones we
   take, and the writer only ever adds views at the front, so the views we take are still the
   oldest L0 views when we commit.
2. **Tiers.** Runs are ordered by age, so only ADJACENT runs may merge (merging around a run would
   put its entries under older ones). A tier is a maximal window of adjacent runs whose largest is
   at most ``size_ratio`` times its smallest; tiers of ``min_merge_width`` or more runs qualify and
   the cheapest (fewest bytes) is merged, newest first on ties.
3. **Too many runs.** With more than ``max_sorted_runs`` runs and no qualifying tier, the adjacent
   window with the fewest bytes is merged, wide enough to get back under the limit.

Tombstones may be dropped only when the output is the bottom of the tree (no older run remains),
since below it there is nothing left for a tombstone to hide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ulid import ULID

from slatedb_core.compactor.compactions import Kind
from slatedb_core.manifest.model import Manifest, SortedRun, SstView
from slatedb_core.options import CompactorOptions

MAX_L0_SOURCES = 32
"""At most this many L0 views per compaction: every source holds a read-ahead buffer of up to
8 MiB during the merge, so an L0 swollen by a union or a long compactor outage is worked off in
several bounded compactions instead of one that needs gigabytes."""


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    kind: Kind
    source_views: tuple[SstView, ...]
    """L0 views to compact, newest first: the oldest views of ``l0`` (empty for run merges)."""
    source_runs: tuple[SortedRun, ...]
    """Adjacent runs to merge, newest first (empty for L0 compactions)."""
    destination: int
    """Id of the run to create: one past the largest run id in the manifest planned on."""
    drop_tombstones: bool
    """True only when the output will be the oldest run of the database."""

    @property
    def source_run_ids(self) -> tuple[int, ...]:
        return tuple(r.id for r in self.source_runs)

    @property
    def source_view_ids(self) -> tuple[ULID, ...]:
        return tuple(v.view_id for v in self.source_views)


def next_run_id(manifest: Manifest) -> int:
    return max((r.id for r in manifest.compacted), default=-1) + 1


def run_sizes(manifest: Manifest) -> list[int]:
    """Bytes of each run in ``compacted`` order (physical SST sizes; views count in full)."""
    size_of = {s.id: s.info.estimated_size for s in manifest.ssts}
    return [sum(size_of.get(v.sst_id, 0) for v in r.views) for r in manifest.compacted]


def tier_windows(sizes: Sequence[int], size_ratio: float) -> list[tuple[int, int]]:
    """Maximal windows ``[i, j)`` of adjacent sizes with ``max <= size_ratio * min``.

    Sizes of 0 count as 1 byte, so empty runs tier with tiny ones instead of with nothing.
    """
    n = len(sizes)
    out: list[tuple[int, int]] = []
    last_end = 0
    for i in range(n):
        lo = hi = max(1, sizes[i])
        j = i + 1
        while j < n:
            s = max(1, sizes[j])
            lo2, hi2 = min(lo, s), max(hi, s)
            if hi2 > size_ratio * lo2:
                break
            lo, hi = lo2, hi2
            j += 1
        if j > last_end:  # not contained in the window that started before it
            out.append((i, j))
            last_end = j
    return out


def _cheapest(windows: Sequence[tuple[int, int]], sizes: Sequence[int]) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    best_total = 0
    for i, j in windows:
        total = sum(sizes[i:j])
        if best is None or total < best_total:
            best, best_total = (i, j), total
    return best


def choose_runs(sizes: Sequence[int], options: CompactorOptions) -> tuple[int, int] | None:
    """The window ``[i, j)`` of runs (newest first) to merge next, or None."""
    n = len(sizes)
    if n < 2:
        return None
    tiers = [
        (i, j)
        for i, j in tier_windows(sizes, options.size_ratio)
        if j - i >= options.min_merge_width
    ]
    chosen = _cheapest(tiers, sizes)
    if chosen is not None:
        return chosen
    if n > options.max_sorted_runs:
        width = min(n, max(2, options.min_merge_width, n - options.max_sorted_runs + 1))
        return _cheapest([(i, i + width) for i in range(n - width + 1)], sizes)
    return None


def plan_compaction(manifest: Manifest, options: CompactorOptions) -> CompactionPlan | None:
    """The next compaction for ``manifest``, or None when nothing needs doing."""
    destination = next_run_id(manifest)
    if manifest.l0 and len(manifest.l0) >= options.l0_trigger:
        return CompactionPlan(
            kind="l0",
            source_views=manifest.l0[-MAX_L0_SOURCES:],
            source_runs=(),
            destination=destination,
            drop_tombstones=not manifest.compacted,
        )
    window = choose_runs(run_sizes(manifest), options)
    if window is None:
        return None
    i, j = window
    return CompactionPlan(
        kind="sorted-runs",
        source_views=(),
        source_runs=manifest.compacted[i:j],
        destination=destination,
        drop_tombstones=j == len(manifest.compacted),
    )
