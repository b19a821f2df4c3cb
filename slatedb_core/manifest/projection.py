"""Projection and union of manifests (SlateDB RFC 0004, "Manifest Projection and Union").

Both are pure functions over :class:`Manifest` values; the admin operations that read source
manifests, create checkpoints and write the result live elsewhere. They exist for rescaling: a
database is split into key-range shards by projecting it, and shards are merged back by union.

Rules chosen where the seed leaves room (the module's contract):

* **WAL.** A union input is refused when ``wal_id_last_seen > replay_after_wal_id`` or
  ``next_wal_sst_id > replay_after_wal_id + 1``: either says the manifest knows of a WAL SST past
  the point flushed into L0, whose data the union would silently lose. The manifest cannot see WAL
  SSTs written after its last update, so the caller should also list the WAL directory.
* **Ranges.** An input's range is its explicit ``key_range``, else its manifest's ``key_range``,
  else the hull of its views' effective ranges. Explicit ranges must be given for every input or
  for none, and must then be adjacent (so they tile one interval). Inputs are projected onto their
  declared range first, so no view reaches past the range that the overlap check approved.
* **Result key_range.** None (all keys) if some input declares no range (neither explicit nor a
  manifest ``key_range``); otherwise the hull of the inputs' projected ``key_range`` values, empty
  ranges ignored. A gap between declared ranges holds no visible data, so the hull exposes nothing
  that a projection hid.
* **External databases.** Entries are deduplicated by ``(path, source_checkpoint_id)`` with their
  ids unioned; entries left with no SST ids are dropped, including a source's own entry when it
  owns none of the referenced SSTs: an empty entry pins a checkpoint for nothing (GC would detach
  it), and keeping them would let project/union cycles accumulate entries.
* **Re-id'd SSTs.** ``external_dbs[].sst_ids`` list the SST's id *in this manifest*; the file name
  stays in ``original_id``. Listing the old id instead would make two different files with the same
  old id indistinguishable. Entries are ordered so that path resolution, which takes the first
  entry matching either id, meets a re-id'd SST's own entry before one naming its file id.
* **Sorted runs.** Runs with the same id in different inputs are merged into one run when the ids
  are ordered consistently in every input (projections keep run ids for exactly this); otherwise
  runs are aligned by depth from the oldest. Inputs never overlap, so either keeps each input's
  relative run order, which is all reads need. Ids are renumbered from 0 at the oldest run.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ulid import ULID

from slatedb_core.errors import CorruptionError, UnionError
from slatedb_core.keys import BytesRange, KeyRange
from slatedb_core.manifest.model import CompactedSst, ExternalDb, Manifest, SortedRun, SstView


def effective_range(view: SstView, sst: CompactedSst) -> KeyRange:
    """The keys a read may take from ``view``: the SST's physical range cut by the visible range."""
    last = sst.info.last_key
    physical = KeyRange(sst.info.first_key, None if last is None else last + b"\x00")
    return physical.intersect(KeyRange.of(view.visible_range))


def _sst_of(ssts: dict[ULID, CompactedSst], view: SstView) -> CompactedSst:
    sst = ssts.get(view.sst_id)
    if sst is None:
        raise CorruptionError("manifest", f"view {view.view_id} names unknown SST {view.sst_id}")
    return sst


def _run_ranges(run: SortedRun, ssts: dict[ULID, CompactedSst]) -> list[KeyRange]:
    """Ranges of the run's views (in run order), each also cut at the next view's start.

    Views of a run never overlap, so a view can own nothing at or past the next view's start; the
    cut matters for SSTs whose last key is unknown.
    """
    ranges = [effective_range(v, _sst_of(ssts, v)) for v in run.views]
    # an empty view owns nothing, so its start (an artefact of the cut) must not bound another
    live = (i for i in range(len(ranges)) if not ranges[i].is_empty())
    order = sorted(live, key=lambda i: _start_key(ranges[i]))
    for i, nxt in itertools.pairwise(order):
        if ranges[nxt].start is not None:
            ranges[i] = ranges[i].intersect(KeyRange(None, ranges[nxt].start))
    return ranges


def _start_key(r: KeyRange) -> tuple[bool, bytes]:
    return (r.start is not None, r.start or b"")


def _stored(r: KeyRange) -> BytesRange | None:
    """The manifest form of a range; None stands for "all keys", as in the model's defaults."""
    return None if r == KeyRange() else r.to_bytes_range()


def _narrowed(current: BytesRange | None, key_range: KeyRange) -> BytesRange | None:
    cur = KeyRange.of(current)
    new = cur.intersect(key_range)
    return current if new == cur else _stored(new)  # unchanged: keep the exact bound kinds


def project_manifest(m: Manifest, key_range: KeyRange) -> Manifest:
    """``m`` restricted to ``key_range``: the start of a new database over those keys only.

    Checkpoints are not carried (they pin versions of the source database); epochs and WAL fields
    are left for the caller, which knows whether the result is a clone or a union input.
    """
    ssts = {s.id: s for s in m.ssts}

    def keep(view: SstView, rng: KeyRange) -> SstView | None:
        if rng.intersect(key_range).is_empty():
            return None
        return dataclasses.replace(view, visible_range=_narrowed(view.visible_range, key_range))

    l0 = tuple(
        v
        for v in (keep(view, effective_range(view, _sst_of(ssts, view))) for view in m.l0)
        if v is not None
    )
    runs: list[SortedRun] = []
    for run in m.compacted:
        views = tuple(v for v in map(keep, run.views, _run_ranges(run, ssts)) if v is not None)
        if views:
            runs.append(SortedRun(run.id, views))  # ids kept, gaps allowed: union matches on them
    ssts_kept, external = _referenced_only(m, l0, runs)
    return dataclasses.replace(
        m,
        ssts=ssts_kept,
        external_dbs=external,
        l0=l0,
        compacted=tuple(runs),
        checkpoints=(),
        key_range=_narrowed(m.key_range, key_range),
    )


def _referenced_only(
    m: Manifest, l0: Sequence[SstView], runs: Sequence[SortedRun]
) -> tuple[tuple[CompactedSst, ...], tuple[ExternalDb, ...]]:
    """``ssts`` and ``external_dbs`` pruned to what the views still use, so that checkpoints on
    external databases can be released once nothing needs their files."""
    used = {v.sst_id for v in l0} | {v.sst_id for r in runs for v in r.views}
    ssts = tuple(s for s in m.ssts if s.id in used)
    # an entry may name a re-id'd SST by its file id, unless that id is another SST's own id
    by_file = {s.original_id for s in ssts if s.original_id is not None} - {s.id for s in m.ssts}
    external = tuple(
        dataclasses.replace(e, sst_ids=kept)
        for e in m.external_dbs
        if (kept := tuple(i for i in e.sst_ids if i in used or i in by_file))
    )
    return ssts, external


@dataclass(frozen=True)
class UnionInput:
    manifest: Manifest  # the source manifest (the one its checkpoint pins)
    path: str  # source database path
    source_checkpoint_id: uuid.UUID
    key_range: KeyRange | None = None  # optional explicit range of this source


@dataclass(frozen=True)
class _Source:
    input: UnionInput
    manifest: Manifest  # projected onto its declared range
    range: KeyRange | None  # for ordering and the overlap check; None = holds nothing
    declared: KeyRange | None  # its share of the result key_range; None = all keys


def _label(i: UnionInput) -> str:
    return f"{i.path!r} (checkpoint {i.source_checkpoint_id})"


def union_manifests(inputs: Sequence[UnionInput]) -> Manifest:
    """One manifest over the combined key space of non-overlapping inputs (SlateDB RFC 0004, "Union").

    The result is a new, uninitialized database that references every input's SSTs where they
    lie; the caller creates the final checkpoints on the external databases and then sets
    ``initialized``.
    """
    if not inputs:
        raise UnionError("union needs at least one input")
    explicit = [i.key_range is not None for i in inputs]
    if any(explicit) and not all(explicit):
        raise UnionError("explicit key ranges must be given for every union input or for none")
    sources = sorted(
        (_prepare(i) for i in inputs),
        key=lambda s: (s.range is None, _start_key(s.range or KeyRange())),
    )
    _check_layout(sources, adjacent=all(explicit))

    fresh = _FreshIds(sources)
    ssts, id_maps = _assign_sst_ids(sources, fresh)
    seen_views: set[ULID] = set()

    def view(v: SstView, ids: dict[ULID, ULID]) -> SstView:
        # pieces of one projected view share its id; the compactor tells views apart by id
        vid = fresh() if v.view_id in seen_views else v.view_id
        seen_views.add(vid)
        return SstView(vid, ids[v.sst_id], v.visible_range)

    l0 = tuple(view(v, ids) for s, ids in zip(sources, id_maps, strict=True) for v in s.manifest.l0)
    runs = _merge_runs(
        [
            [SortedRun(r.id, tuple(view(v, ids) for v in r.views)) for r in s.manifest.compacted]
            for s, ids in zip(sources, id_maps, strict=True)
        ]
    )
    return Manifest(
        writer_epoch=0,
        compactor_epoch=0,
        initialized=False,
        external_dbs=_merge_external(sources, id_maps, ssts),
        ssts=tuple(ssts),
        l0=l0,
        compacted=runs,
        last_l0_seq=max(s.manifest.last_l0_seq for s in sources),
        key_range=_result_key_range(sources),
    )


def _prepare(i: UnionInput) -> _Source:
    m = i.manifest
    if not m.initialized:
        raise UnionError(f"union input {_label(i)} is not initialized")
    if m.wal_id_last_seen > m.replay_after_wal_id or m.next_wal_sst_id > m.replay_after_wal_id + 1:
        raise UnionError(
            f"union input {_label(i)} has WAL data not yet flushed to L0 (replay_after_wal_id="
            f"{m.replay_after_wal_id}, wal_id_last_seen={m.wal_id_last_seen}, next_wal_sst_id="
            f"{m.next_wal_sst_id}); flush its memtable first"
        )
    declared = (
        i.key_range
        if i.key_range is not None
        else (None if m.key_range is None else KeyRange.of(m.key_range))
    )
    if declared is None:
        ssts, external = _referenced_only(m, m.l0, m.compacted)
        return _Source(i, dataclasses.replace(m, ssts=ssts, external_dbs=external), _hull(m), None)
    projected = project_manifest(m, declared)
    return _Source(i, projected, declared, KeyRange.of(projected.key_range))


def _hull(m: Manifest) -> KeyRange | None:
    """The smallest range holding every view's keys; None when no view holds any key."""
    ssts = {s.id: s for s in m.ssts}
    ranges = [effective_range(v, _sst_of(ssts, v)) for v in m.l0]
    for run in m.compacted:
        ranges += _run_ranges(run, ssts)
    ranges = [r for r in ranges if not r.is_empty()]
    return _hull_of(ranges) if ranges else None


def _hull_of(ranges: Sequence[KeyRange]) -> KeyRange:
    starts = [r.start for r in ranges]
    ends = [r.end for r in ranges]
    return KeyRange(
        None if None in starts else min(s for s in starts if s is not None),
        None if None in ends else max(e for e in ends if e is not None),
    )


def _check_layout(sources: Sequence[_Source], adjacent: bool) -> None:
    for i, a in enumerate(sources):
        for b in sources[i + 1 :]:
            if a.range and b.range and not a.range.intersect(b.range).is_empty():
                names = f"{_label(a.input)} and {_label(b.input)}"
                raise UnionError(f"union inputs {names} overlap: {a.range} and {b.range}")
    if adjacent:
        for a, b in itertools.pairwise(sources):
            assert a.range is not None and b.range is not None  # explicit ranges
            if a.range.end is None or a.range.end != b.range.start:
                names = f"{_label(a.input)} and {_label(b.input)}"
                raise UnionError(
                    f"explicit ranges of union inputs {names} are not adjacent: "
                    f"{a.range} and {b.range}"
                )


def _result_key_range(sources: Sequence[_Source]) -> BytesRange | None:
    declared = [s.declared for s in sources]
    if any(d is None for d in declared):
        return None
    ranges = [d for d in declared if d is not None]
    nonempty = [r for r in ranges if not r.is_empty()]
    return _stored(_hull_of(nonempty) if nonempty else ranges[0])


class _FreshIds:
    """New ULIDs above every id of every input, increasing, so a re-id'd SST sorts after the
    SSTs it was written after (SlateDB RFC 0004: ULID order within one database is kept)."""

    def __init__(self, sources: Sequence[_Source]) -> None:
        top = 0
        for s in sources:
            m = s.manifest
            views = [*m.l0, *(v for r in m.compacted for v in r.views)]
            ids = [x.id for x in m.ssts] + [v.view_id for v in views]
            top = max([top, *map(int, ids)])
        self._next = max(int(ULID()), top + 1)

    def __call__(self) -> ULID:
        out = ULID.from_int(self._next)
        self._next += 1
        return out


def _assign_sst_ids(
    sources: Sequence[_Source], fresh: Callable[[], ULID]
) -> tuple[list[CompactedSst], list[dict[ULID, ULID]]]:
    """Result SSTs and, per source, a map from its SST ids to result ids.

    An SST is identified by where its file lies (database path, file id). Two inputs naming the
    same file share one entry (projections of one database); two different files with the same id
    (a ULID clash between databases) make the later source's SST, and its newer ones, take fresh
    ids, with the file id kept in ``original_id``.
    """
    by_location: dict[tuple[str, ULID], ULID] = {}
    taken: set[ULID] = set()
    out: list[CompactedSst] = []
    maps: list[dict[ULID, ULID]] = []
    for src in sources:
        where = _locations(src)
        pending = {s.id: s for s in src.manifest.ssts if where[s.id] not in by_location}
        clashes = [i for i in pending if i in taken]
        threshold = min(clashes) if clashes else None
        placed: dict[ULID, CompactedSst] = {}
        for sst_id in sorted(pending):
            s = pending[sst_id]
            if threshold is not None and sst_id >= threshold:
                s = CompactedSst(fresh(), s.info, s.format_version, s.original_id or s.id)
            placed[sst_id] = s
            by_location[where[sst_id]] = s.id
            taken.add(s.id)
        out.extend(placed[s.id] for s in src.manifest.ssts if s.id in placed)
        maps.append({s.id: by_location[where[s.id]] for s in src.manifest.ssts})
    return out, maps


def _locations(src: _Source) -> dict[ULID, tuple[str, ULID]]:
    """Where each SST's file lies, by the source's own ``external_dbs`` (as path resolution does,
    but preferring an entry that lists the SST's own id over one listing only its file id)."""
    exact: dict[ULID, str] = {}
    for e in reversed(src.manifest.external_dbs):
        exact.update(dict.fromkeys(e.sst_ids, e.path))
    own_ids = {s.id for s in src.manifest.ssts}
    out: dict[ULID, tuple[str, ULID]] = {}
    for s in src.manifest.ssts:
        physical = s.original_id or s.id
        path = exact.get(s.id)
        if path is None and physical not in own_ids:
            path = exact.get(physical)
        out[s.id] = (path or src.input.path, physical)
    return out


def _merge_external(
    sources: Sequence[_Source], id_maps: Sequence[dict[ULID, ULID]], ssts: Sequence[CompactedSst]
) -> tuple[ExternalDb, ...]:
    merged: dict[tuple[str, uuid.UUID], dict[ULID, None]] = {}
    for src, ids in zip(sources, id_maps, strict=True):
        m = src.manifest
        by_any = dict(ids)  # entries may list an SST by its file id
        for s in m.ssts:
            if s.original_id is not None:
                by_any.setdefault(s.original_id, ids[s.id])
        listed: set[ULID] = set()
        for e in m.external_dbs:
            listed.update(e.sst_ids)
            bucket = merged.setdefault((e.path, e.source_checkpoint_id), {})
            bucket.update(dict.fromkeys(by_any[i] for i in e.sst_ids if i in by_any))
        owned = [
            ids[s.id]
            for s in m.ssts
            if s.id not in listed
            and (s.original_id is None or s.original_id in ids or s.original_id not in listed)
        ]
        key = (src.input.path, src.input.source_checkpoint_id)
        merged.setdefault(key, {}).update(dict.fromkeys(owned))
    entries = [
        ExternalDb(path, cp, uuid.uuid4(), tuple(ids)) for (path, cp), ids in merged.items() if ids
    ]
    return tuple(entries[i] for i in _resolution_order(entries, ssts))


def _resolution_order(entries: Sequence[ExternalDb], ssts: Sequence[CompactedSst]) -> list[int]:
    """Entry order for path resolution, which takes the first entry naming an SST by its id *or*
    its file id: an entry holding a re-id'd SST must come before any entry holding another SST
    whose id is that file id. Kept as merged where possible; a cycle (only from several ULID
    clashes pointing both ways) keeps the merged order."""
    holder = {i: n for n, e in enumerate(entries) for i in e.sst_ids}
    after: dict[int, set[int]] = {n: set() for n in range(len(entries))}
    for s in ssts:
        if s.original_id is not None and s.id in holder and s.original_id in holder:
            if holder[s.id] != holder[s.original_id]:
                after[holder[s.id]].add(holder[s.original_id])
    return _topological(after, first=lambda n: n) or list(range(len(entries)))


def _merge_runs(per_source: Sequence[Sequence[SortedRun]]) -> tuple[SortedRun, ...]:
    """Runs of all sources, newest first, with at most one run of each source per result run."""
    levels = _levels_by_id(per_source)
    if levels is None:  # inconsistent id orders: align by depth from the oldest run instead
        depth = max((len(r) for r in per_source), default=0)
        levels = [
            [runs[len(runs) - 1 - d] for runs in per_source if len(runs) > d]
            for d in reversed(range(depth))
        ]
    n = len(levels)
    return tuple(
        SortedRun(n - 1 - i, tuple(v for run in level for v in run.views))
        for i, level in enumerate(levels)
    )


def _levels_by_id(per_source: Sequence[Sequence[SortedRun]]) -> list[list[SortedRun]] | None:
    """Group runs by id, ordered so that every source's runs keep their order; None if no order
    does (a source repeats an id, or two sources order the same ids differently)."""
    after: dict[int, set[int]] = {}
    for runs in per_source:
        ids = [r.id for r in runs]
        if len(set(ids)) != len(ids):
            return None
        for i in ids:
            after.setdefault(i, set())
        for newer, older in itertools.pairwise(ids):
            after[newer].add(older)
    order = _topological(after, first=lambda i: -i)  # newer (larger) ids first among equals
    if order is None:
        return None
    by_id = [{r.id: r for r in runs} for runs in per_source]
    return [[runs[i] for runs in by_id if i in runs] for i in order]


def _topological(after: dict[int, set[int]], first: Callable[[int], int]) -> list[int] | None:
    """Every node of ``after`` ordered before the nodes it maps to, smallest ``first`` key
    first among the ready ones; None when the constraints form a cycle."""
    waiting = dict.fromkeys(after, 0)
    for later in after.values():
        for o in later:
            waiting[o] += 1
    ready = [(first(i), i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for o in after[i]:
            waiting[o] -= 1
            if waiting[o] == 0:
                heapq.heappush(ready, (first(o), o))
    return order if len(order) == len(after) else None
