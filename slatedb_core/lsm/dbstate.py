"""The read side of a database: an immutable snapshot of everything a read consults, and the
lookups over it.

A ``DbState`` is never changed in place; writers build a new one and swap the reference under the
Db's lock (as mini-lsm does), so a reader that grabbed a state sees one consistent set of
memtables and SSTs for its whole get or scan. The active memtable is the one mutable part: it only
grows, and a get or scan of it is atomic under the GIL (see ``slatedb_core.lsm.memtable``), but
several gets of it are not: a read of several keys must take their memtable entries at one
instant (``Db.get_many`` does so under the writer lock, then uses :meth:`DbState.get_immutable`).
A ``DbReader`` publishes states whose memtable is empty and frozen: no part of them changes.

Read order, newest first: active memtable, immutable memtables (newest first), L0 SST views
(newest first), then sorted runs (newest first). The first source that knows a key decides it; a
tombstone decides "absent". A merge operand (SlateDB RFC 0006) decides nothing alone: a read that
finds one walks the key's older versions, in that source and the older ones, to its first value
or tombstone and folds the operands onto it with the state's ``merge_operator``
(:func:`~slatedb_core.lsm.merge_operator.resolve`; none: ``MergeOperatorMissing`` for that key).
SlateDB 0.17 reads do not apply ``expire_ts`` (only its compaction does), and neither do these.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from slatedb_core.keys import KeyRange
from slatedb_core.layout import sst_path
from slatedb_core.lsm.entries import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.lsm.iterators import merge_sorted, newest_versions
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.lsm.merge_operator import MergeOperator, Unresolved, resolve
from slatedb_core.lsm.row_model import Version, concat_rows, has_merges, has_timestamps
from slatedb_core.lsm.sorted_rows import entries_batch
from slatedb_core.lsm.version_table import VersionTable
from slatedb_core.manifest.model import CompactedSst, Manifest, SstView
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.sst import BlockCache, SstReader, probe_blooms_first
from slatedb_core.store.objectstore import ObjectStore

Found = tuple[int, int, bytes | None]  # (seq, kind, value) of a key's newest row in a table
MemEntry = tuple[int, bytes | None] | Version  # a memtable entry (slatedb_core.lsm.row_model)


def resolve_sst_path(db_path: str, manifest: Manifest, sst: CompactedSst) -> str:
    """SSTs owned by an external database (clones, union) live under that database's path."""
    physical = sst.original_id or sst.id
    # Match the manifest's own id first: after a union renames a clashing SST, its old id may be
    # listed by another external database for a different file.
    for ext in manifest.external_dbs:
        if sst.id in ext.sst_ids:
            return sst_path(ext.path, physical)
    if sst.original_id is not None:
        for ext in manifest.external_dbs:
            if sst.original_id in ext.sst_ids:
                return sst_path(ext.path, physical)
    return sst_path(db_path, physical)


def view_bounds(sst: CompactedSst, view: SstView) -> tuple[bytes | None, bytes | None]:
    """``(lo, hi)``: the keys ``[lo, hi)`` a read may find in ``view`` of ``sst``, its physical
    key range clipped to the view's visible range (None: unbounded). A view without a visible
    range (most views) is its SST's range, taken without a :class:`KeyRange` (issue 42: three
    per view were a seventh of an open at 10k SSTs); any other, or keys out of order, through
    :meth:`KeyRange.intersect` (which refuses the latter as it always did)."""
    info = sst.info
    lo, last = info.first_key, info.last_key
    hi = None if last is None else last + b"\x00"
    if view.visible_range is None and (lo is None or hi is None or lo <= hi):
        return lo, hi
    r = KeyRange(lo, hi).intersect(KeyRange.of(view.visible_range))
    return r.start, r.end


def run_bounds(
    ssts: Sequence[CompactedSst], views: Sequence[SstView]
) -> tuple[list[bytes | None], list[bytes | None]]:
    """:func:`view_bounds` of each of ``views`` (of ``ssts``), as the list of ``lo`` and the
    list of ``hi``: in C passes when no view has a visible range and every SST has both keys,
    in order (a sorted run's usual case: issue 42, a run of 100k views is built at each open)."""
    infos = list(map(_INFO, ssts))
    los: list[Any] = list(map(_FIRST_KEY, infos))
    lasts: list[Any] = list(map(_LAST_KEY, infos))
    plain = not any(map(operator.is_not, map(_VISIBLE, views), repeat(None)))
    if plain and not any(map(operator.is_, itertools.chain(los, lasts), repeat(None))):
        his: list[Any] = list(map(bytes.__add__, lasts, repeat(b"\x00")))
        if all(map(operator.le, los, his)):
            return los, his
    pairs = list(map(view_bounds, ssts, views))
    return [p[0] for p in pairs], [p[1] for p in pairs]


_INFO = operator.attrgetter("info")
_FIRST_KEY = operator.attrgetter("first_key")
_LAST_KEY = operator.attrgetter("last_key")
_VISIBLE = operator.attrgetter("visible_range")


class SstHandle:
    """One view of one SST; the reader is opened on first use and shared by later states."""

    __slots__ = (
        "_hi",
        "_lo",
        "_lock",
        "_range",
        "_reader",
        "cache",
        "path",
        "sst",
        "store",
        "view",
    )

    def __init__(
        self,
        store: ObjectStore,
        path: str,
        sst: CompactedSst,
        view: SstView,
        cache: BlockCache | None,
        bounds: tuple[bytes | None, bytes | None] | None = None,
    ) -> None:
        self.store = store
        self.path = path
        self.sst = sst
        self.view = view
        self.cache = cache
        # the range's bounds (:func:`view_bounds`, or given by a caller that computed them)
        self._lo, self._hi = view_bounds(sst, view) if bounds is None else bounds
        self._range: KeyRange | None = None
        self._reader: SstReader | None = None
        self._lock = threading.Lock()

    @property
    def range(self) -> KeyRange:
        """The keys a read may find in this view (its SST's, clipped to the visible range)."""
        r = self._range
        if r is None:
            r = self._range = KeyRange(self._lo, self._hi)
        return r

    def reader(self) -> SstReader:
        r = self._reader
        if r is None:
            with self._lock:
                if self._reader is None:
                    self._reader = SstReader.open(
                        self.store, self.path, self.sst.info, cache=self.cache
                    )
                r = self._reader
        return r

    def get(self, key: bytes) -> tuple[int, int, bytes] | None:
        lo, hi = self._lo, self._hi
        if (lo is not None and key < lo) or (hi is not None and key >= hi):
            return None
        return (self._reader or self.reader()).get(key)  # consults the bloom filter itself

    def get_sorted(self, keys: list[bytes]) -> list[tuple[int, int, bytes] | None]:
        """:meth:`get` of each of ``keys`` (sorted, distinct), each block read once."""
        lo, hi = self._lo, self._hi
        a = 0 if lo is None else bisect.bisect_left(keys, lo)
        z = len(keys) if hi is None else bisect.bisect_left(keys, hi)
        if a >= z:
            return [None] * len(keys)
        inside = (self._reader or self.reader()).get_sorted(keys[a:z])
        if a == 0 and z == len(keys):
            return inside
        return [None] * a + inside + [None] * (len(keys) - z)

    def scan(
        self, start: bytes | None, end: bytes | None, *, readahead: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        clip = self.range.intersect(KeyRange(start, end))
        if clip.is_empty():
            return iter(())
        return self.reader().scan(clip.start, clip.end, readahead=readahead, groups=True)


HandleKey = tuple[ULID, ULID]  # (view id, SST id)


class _Pending:
    """What a lazy :class:`SortedRunHandle` needs to build the handle of one of its views on
    first use: the views and SSTs in key order, their bounds, where the state's SSTs live, and
    the handles of the previous state (their open readers are kept)."""

    __slots__ = ("cache", "carry", "db_path", "his", "los", "manifest", "ssts", "store", "views")

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        manifest: Manifest,
        cache: BlockCache | None,
        views: list[SstView],
        ssts: list[CompactedSst],
        bounds: tuple[list[bytes | None], list[bytes | None]],
        carry: dict[HandleKey, SstHandle],
    ) -> None:
        self.store = store
        self.db_path = db_path
        self.manifest = manifest
        self.cache = cache
        self.views = views
        self.ssts = ssts
        self.los, self.his = bounds  # each view's (:func:`run_bounds`)
        self.carry = carry


class SortedRunHandle:
    """A sorted run: views ordered by key, non-overlapping.

    A run built by :func:`build_handles` is lazy (issue 42: building 10k handles was half of an
    open at 10k SSTs): it keeps its views' start keys (what a read bisects) and builds the
    handle of a view when a read first reaches it; :attr:`views` builds them all."""

    def __init__(self, run_id: int, views: list[SstHandle]) -> None:
        self.id = run_id
        handles = sorted(views, key=lambda h: h._lo or b"")
        self._handles: list[SstHandle | None] = list(handles)
        self._starts = [h._lo or b"" for h in handles]
        self.known: dict[HandleKey, SstHandle] = {
            (h.view.view_id, h.view.sst_id): h for h in handles
        }
        """The handles built so far, by view (what the next state may reuse)."""
        self._pending: _Pending | None = None
        self._lock = threading.Lock()

    @classmethod
    def lazy(
        cls,
        run_id: int,
        store: ObjectStore,
        db_path: str,
        manifest: Manifest,
        views: Sequence[SstView],
        cache: BlockCache | None,
        carry: dict[HandleKey, SstHandle],
    ) -> SortedRunHandle:
        """The run of ``views`` of ``manifest``, no handle built yet (``carry``: handles of the
        previous state, reused when a read reaches their view); KeyError for a view of an SST
        ``manifest`` does not list, as the eager build raised."""
        ssts = manifest.ssts_of(views)
        los, his = run_bounds(ssts, views)
        starts: list[bytes] = [lo or b"" for lo in los]  # a list comprehension: C-speed enough
        vs = list(views)
        if not all(map(operator.le, starts, itertools.islice(starts, 1, None))):
            order = sorted(range(len(starts)), key=starts.__getitem__)  # stable, as the eager
            vs = list(map(vs.__getitem__, order))
            ssts = list(map(ssts.__getitem__, order))
            los, his = list(map(los.__getitem__, order)), list(map(his.__getitem__, order))
            starts = list(map(starts.__getitem__, order))
        run = cls.__new__(cls)
        run.id = run_id
        run._handles = [None] * len(vs)
        run._starts = starts
        run.known = {}
        run._pending = _Pending(store, db_path, manifest, cache, vs, ssts, (los, his), carry)
        run._lock = threading.Lock()
        return run

    def view(self, i: int) -> SstHandle:
        """The handle of the ``i``-th view in key order, built on first use."""
        h = self._handles[i]
        if h is not None:
            return h
        with self._lock:
            h = self._handles[i]
            if h is None:
                p = self._pending
                assert p is not None  # an eager run has every handle
                view, sst = p.views[i], p.ssts[i]
                k = (view.view_id, view.sst_id)
                h = p.carry.get(k)
                if h is None or (h.view is not view and h.view != view):
                    path = resolve_sst_path(p.db_path, p.manifest, sst)
                    h = SstHandle(p.store, path, sst, view, p.cache, (p.los[i], p.his[i]))
                self.known[k] = h
                self._handles[i] = h
        return h

    @property
    def views(self) -> list[SstHandle]:
        """Every view's handle, in key order (each built now if it was not)."""
        return [h or self.view(i) for i, h in enumerate(self._handles)]

    def first_view(self, key: bytes) -> int:
        """The index of the first view that may hold ``key``: the last one starting below it.
        SlateDB's compactor cuts its output SSTs wherever the stream is, so one key's versions
        (several, while a snapshot keeps them) may span SSTs of a run, the newest in the first;
        the views starting exactly at ``key`` follow (the walk stops at the first view starting
        past it). 0 when none starts below ``key``."""
        return max(0, bisect.bisect_left(self._starts, key) - 1)

    def get(self, key: bytes) -> tuple[int, int, bytes] | None:
        """The newest ``(seq, kind, value)`` of ``key`` in the run (see :meth:`first_view`)."""
        starts, handles = self._starts, self._handles
        for i in range(self.first_view(key), len(starts)):
            if starts[i] > key:
                break
            e = (handles[i] or self.view(i)).get(key)
            if e is not None:
                return e
        return None

    def get_sorted(self, keys: list[bytes]) -> list[tuple[int, int, bytes] | None]:
        """:meth:`get` of each of ``keys`` (sorted, distinct): each view gets its share."""
        starts = self._starts
        n = len(keys)
        out: list[tuple[int, int, bytes] | None] = [None] * n
        # the views whose share is not empty: from the one holding the first key, stepping
        # over views no key falls in with a bisect of the starts, not a step per view
        a = bisect.bisect_left(keys, starts[0]) if starts else n
        i = 0
        while a < n:
            i = max(i, bisect.bisect_right(starts, keys[a]) - 1)
            z = bisect.bisect_left(keys, starts[i + 1], a) if i + 1 < len(starts) else n
            if z > a:
                out[a:z] = (self._handles[i] or self.view(i)).get_sorted(keys[a:z])
            a = z
            i += 1
        # a key equal to a view's start may have newer versions at the end of the view before
        # (see first_view): those few keys are read again, newest first
        for s in starts[1:]:
            j = bisect.bisect_left(keys, s)
            if j < n and keys[j] == s:
                out[j] = self.get(s)
        return out

    def scan(
        self, start: bytes | None, end: bytes | None, *, readahead: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        first = 0 if start is None else self.first_view(start)
        for i in range(first, len(self._starts)):
            h = self._handles[i] or self.view(i)
            if end is not None and h._lo is not None and h._lo >= end:
                break
            yield from h.scan(start, end, readahead=readahead)


@dataclass(frozen=True)
class DbState:
    manifest: StoredManifest
    memtable: Memtable
    imm: tuple[ImmutableMemtable, ...]  # newest first (a reader's may hold VersionTables)
    l0: tuple[SstHandle, ...]  # newest first
    runs: tuple[SortedRunHandle, ...]  # newest first

    merge_operator: MergeOperator | None = None

    def get(self, key: bytes) -> bytes | None:
        found = self.memtable.get(key)
        if found is None:
            for imm in self.imm:
                found = imm.get(key)
                if found is not None:
                    break
            else:
                return self._get_sst(key)
        return found[1] if len(found) == 2 else self.entry_value(key, found, active=True)

    def entry_value(self, key: bytes, entry: MemEntry, *, active: bool = False) -> bytes | None:
        """The value a read returns for a memtable ``entry`` of ``key`` that is a
        :class:`Version` (a plain ``(seq, value)`` pair is its own answer): a merge operand is
        folded over the key's older versions (``active``: the active memtable's too)."""
        if len(entry) == 2:
            return entry[1]
        kind = entry[1]
        if kind == KIND_MERGE:
            return self.resolve_key(key, active=active)
        return entry[2] if kind == KIND_VALUE else None

    def active_entry_value(self, key: bytes, entry: MemEntry) -> bytes | None:
        """:meth:`entry_value` of an ``entry`` read from the active memtable earlier (under the
        writer lock, with other keys' entries): a merge operand is folded over ``entry`` and the
        immutable part of the state, never a newer active entry."""
        if len(entry) == 2 or entry[1] != KIND_MERGE:
            return self.entry_value(key, entry)
        newest = _as_version(entry)
        versions = itertools.chain((newest,), self.versions(key, active=False))
        return resolve(key, versions, self.merge_operator)

    def resolve_key(self, key: bytes, *, active: bool = True) -> bytes | None:
        """The value of ``key`` from all of its versions, newest first (the slow path of a read
        that met a merge operand; ``active``: include the active memtable)."""
        return resolve(key, self.versions(key, active=active), self.merge_operator)

    def versions(self, key: bytes, *, active: bool = True) -> Iterator[Version]:
        """Every version of ``key`` in this state, newest first, read lazily (a read stops at
        the first value or tombstone)."""
        tables: list[Memtable | ImmutableMemtable | VersionTable] = (
            [self.memtable] if active else []
        )
        tables += self.imm
        for t in tables:
            many = getattr(t, "versions", None)
            entries = many(key) if many is not None else [t.get(key)]
            for e in entries:
                if e is not None:
                    yield _as_version(e)
        for h in self.l0:
            yield from _sst_versions(h, key)
        for run in self.runs:
            for i in range(run.first_view(key), len(run._starts)):
                h = run._handles[i] or run.view(i)
                if h._lo is not None and h._lo > key:
                    break
                yield from _sst_versions(h, key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """:meth:`get` of each of ``keys`` (any order, repeats allowed), the keys sorted once and
        each table walked once (:meth:`get_immutable_many`). One point in time only for a state
        whose active memtable nobody writes: a reader's (the Db reads its memtable under its
        writer lock instead, ``Db.get_many``)."""
        uniq = sorted(set(keys))
        if self.memtable.is_empty():
            got = self.get_immutable_many(uniq)
        else:
            found = self.memtable.get_many(uniq)
            todo = [k for k, f in zip(uniq, found, strict=True) if f is None]
            rest = iter(self.get_immutable_many(todo) if todo else ())
            got = [
                next(rest) if f is None else f[1] if len(f) == 2 else self.active_entry_value(k, f)
                for k, f in zip(uniq, found, strict=True)
            ]
        if len(uniq) == len(keys) and uniq == list(keys):
            return got
        values = dict(zip(uniq, got, strict=True))
        return list(map(values.__getitem__, keys))

    def get_immutable(self, key: bytes) -> bytes | None:
        """``get`` from everything but the active memtable: the part of a state that never
        changes. With the active memtable's entries for several keys read at one instant (the
        Db does it under its writer lock), this answers them all from one point in time."""
        for imm in self.imm:
            found = imm.get(key)
            if found is not None:
                return found[1] if len(found) == 2 else self.entry_value(key, found)
        return self._get_sst(key)

    def get_immutable_many(self, keys: list[bytes]) -> list[bytes | None]:
        """:meth:`get_immutable` of each of ``keys`` (sorted, distinct), walking each table
        once: every immutable memtable, then every L0 view and sorted run, over the keys still
        unresolved, each SST block read once (:meth:`SstReader.get_sorted`). Each walk is a
        C-level pass (``map``/``compress``) over the keys, not a Python loop."""
        n = len(keys)
        found: list[Found | None] = [None] * n
        todo: list[int] | None = None  # positions unresolved (None: all of them)
        for imm in self.imm:
            got = imm.get_many(keys if todo is None else list(map(keys.__getitem__, todo)))
            entries = [
                None
                if f is None
                else (f[0], KIND_VALUE if f[1] is not None else KIND_TOMBSTONE, f[1])
                if len(f) == 2
                else (f[0], f[1], f[2])
                for f in got
            ]
            todo = _fill(found, todo, entries)
            if not todo:
                break
        sources: tuple[SstHandle | SortedRunHandle, ...] = (*self.l0, *self.runs)
        for source in sources:
            if todo is not None and not todo:
                break
            got_sst = source.get_sorted(keys if todo is None else list(map(keys.__getitem__, todo)))
            todo = _fill(found, todo, got_sst)
        if todo is None or todo:
            if todo is None or len(todo) == n:
                return [None] * n
            hit = list(map(operator.is_not, found, repeat(None)))
            resolved = self._values(
                list(compress(keys, hit)), cast(list[Found], list(compress(found, hit)))
            )
            out: list[bytes | None] = [None] * n
            list(map(out.__setitem__, compress(range(n), hit), resolved))
            return out
        return self._values(keys, cast(list[Found], found))

    def _values(self, keys: list[bytes], entries: list[Found]) -> list[bytes | None]:
        """The values of found ``(seq, kind, value)`` entries (None for tombstones)."""
        if set(map(itemgetter(1), entries)) == {KIND_VALUE}:
            return list(map(itemgetter(2), entries))
        return list(map(self._resolved, keys, entries))

    def _resolved(self, key: bytes, entry: Found) -> bytes | None:
        """The value of a found ``(seq, kind, value)`` (outside the active memtable): None for
        a tombstone, a merge operand folded over the key's older versions."""
        if entry[1] == KIND_MERGE:
            return self.resolve_key(key, active=False)
        return None if entry[1] == KIND_TOMBSTONE else entry[2]

    def _get_sst(self, key: bytes) -> bytes | None:
        if len(self.l0) + len(self.runs) > 1:  # several SSTs may hold the key: blooms first
            probe_blooms_first(key)
        for h in self.l0:  # SstHandle.get, inlined: this is every point read's path
            lo, hi = h._lo, h._hi
            if (lo is not None and key < lo) or (hi is not None and key >= hi):
                continue
            e = (h._reader or h.reader()).get(key)
            if e is not None:
                return e[2] if e[1] == KIND_VALUE else self._resolved(key, e)
        for run in self.runs:  # SortedRunHandle.get, inlined
            starts, handles = run._starts, run._handles
            # the last view starting below the key, then any starting at it (first_view)
            i = max(0, bisect.bisect_left(starts, key) - 1)
            while i < len(starts) and starts[i] <= key:
                h = handles[i] or run.view(i)
                i += 1
                lo, hi = h._lo, h._hi
                if (lo is not None and key < lo) or (hi is not None and key >= hi):
                    continue
                e = (h._reader or h.reader()).get(key)
                if e is not None:
                    return e[2] if e[1] == KIND_VALUE else self._resolved(key, e)
        return None

    def sources(
        self, start: bytes | None, end: bytes | None, *, readahead: int | None = None
    ) -> list[Iterable[pa.RecordBatch]]:
        """The scan's sources, newest first: the memtables', then each L0 view's and each sorted
        run's, these reading ``readahead`` bytes per GET (None: the SST reader's ramp)."""
        out: list[Iterable[pa.RecordBatch]] = [_stacked(self.memtable, start, end)]
        out += [_stacked(imm, start, end) for imm in self.imm]
        out += [
            newest_versions(h.scan(start, end, readahead=readahead), keep_operands=True)
            for h in self.l0
        ]
        out += [
            newest_versions(run.scan(start, end, readahead=readahead), keep_operands=True)
            for run in self.runs
        ]
        return out

    def scan(
        self,
        start: bytes | None,
        end: bytes | None,
        batch_size: int = 65536,
        *,
        readahead: int | None = None,
        ordered: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """ENTRY_SCHEMA batches in key order, newest version per key (merge operands folded),
        tombstones dropped. ``readahead``: bytes per GET of each SST source (:meth:`sources`);
        ``ordered=False``: the same rows, not in key order
        (:func:`~slatedb_core.lsm.iterators.merge_sorted`)."""
        return merge_sorted(
            self.sources(start, end, readahead=readahead),
            drop_tombstones=True,
            batch_size=batch_size,
            merge_operator=self.merge_operator,
            ordered=ordered,
        )


class HandleMap(dict[HandleKey, SstHandle]):
    """:func:`build_handles`'s handles: those of L0 views by view, those of each sorted run in
    :attr:`runs`, by the views tuple they were built from. The next build reuses a run whose
    views did not change (the same immutable tuple, shared by every manifest a writer derives)
    without a step per view (issue 42: a commit at 10k SSTs looked up 10k handles again)."""

    runs: dict[int, tuple[tuple[SstView, ...], SortedRunHandle]]

    def __init__(self) -> None:
        super().__init__()
        self.runs = {}

    def find(self, key: HandleKey) -> SstHandle | None:
        """The handle of view ``key``, in L0 or in a run (built so far)."""
        h = self.get(key)
        if h is None:
            for _, run in self.runs.values():
                h = run.known.get(key)
                if h is not None:
                    break
        return h

    def built(self) -> dict[HandleKey, SstHandle]:
        """Every handle built so far, by view: a new dict, which holds no run."""
        out = dict(self)
        for _, run in self.runs.values():
            out.update(run.known)
        return out


def build_handles(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    cache: BlockCache | None,
    previous: dict[HandleKey, SstHandle] | None = None,
) -> tuple[tuple[SstHandle, ...], tuple[SortedRunHandle, ...], dict[HandleKey, SstHandle]]:
    """Handles for every view of ``manifest``, reusing open readers from ``previous`` (and the
    handles of its unchanged sorted runs, when it is a :class:`HandleMap`). L0's are built now;
    a sorted run's when a read first reaches them (:meth:`SortedRunHandle.lazy`)."""
    known = HandleMap()
    find = previous.find if isinstance(previous, HandleMap) else (previous or {}).get
    prev_runs = previous.runs if isinstance(previous, HandleMap) else {}

    def handle(view: SstView) -> SstHandle:
        k = (view.view_id, view.sst_id)
        h = find(k)
        if h is None or (h.view is not view and h.view != view):
            sst = manifest.sst(view.sst_id)
            if sst is None:
                raise KeyError(view.sst_id)
            h = SstHandle(store, resolve_sst_path(db_path, manifest, sst), sst, view, cache)
        known[k] = h
        return h

    l0 = tuple(map(handle, manifest.l0))
    runs = []
    carry: dict[HandleKey, SstHandle] | None = None  # the handles built before, for new runs
    for r in manifest.compacted:
        hit = prev_runs.get(id(r.views))
        if hit is not None and hit[0] is r.views and hit[1].id == r.id:
            run = hit[1]
        else:
            if carry is None:
                carry = (
                    previous.built() if isinstance(previous, HandleMap) else dict(previous or {})
                )
            run = SortedRunHandle.lazy(r.id, store, db_path, manifest, r.views, cache, carry)
        known.runs[id(r.views)] = (r.views, run)
        runs.append(run)
    return l0, tuple(runs), known


def _fill(
    found: list[Found | None], todo: list[int] | None, entries: Sequence[Found | None]
) -> list[int]:
    """Put a table's ``entries`` (one per position of ``todo``, None: all positions) into
    ``found``; the positions still unresolved."""
    if todo is None:
        found[:] = entries
        return list(compress(range(len(entries)), map(operator.is_, entries, repeat(None))))
    list(map(found.__setitem__, todo, entries))
    return list(compress(todo, map(operator.is_, entries, repeat(None))))


def _stacked(
    table: Memtable | ImmutableMemtable | VersionTable, start: bytes | None, end: bytes | None
) -> Iterator[pa.RecordBatch]:
    """``table.scan``, each key whose replayed operands were left :class:`Unresolved` (the
    operator raised on them at WAL replay, issue 38) scanned as every version it holds, so the
    scan folds them all (and fails on that key as its point read does) instead of the newest
    operand alone. A table without merge operands pays a schema check per batch."""
    for b in table.scan(start, end):
        if not has_timestamps(b) or not has_merges(b):
            yield b
            continue
        keys = b.column(0).to_pylist()
        seqs = b.column(1).to_pylist()
        stacks: dict[bytes, tuple[Version, ...]] = {}
        for i in pc.indices_nonzero(pc.equal(b.column(2), KIND_MERGE)).to_pylist():
            e = table.get(keys[i])
            if isinstance(e, Unresolved) and e.seq == seqs[i]:
                stacks[keys[i]] = e.stack
        if not stacks:
            yield b
            continue
        keep = pc.invert(pc.is_in(b.column(0), pa.array(list(stacks), pa.binary())))
        ks = [k for k, vs in stacks.items() for _ in vs]
        extra = entries_batch(
            pa.array(ks, pa.binary()), [v for vs in stacks.values() for v in vs], True
        )
        rows = concat_rows([b.filter(keep), extra])
        yield rows.take(pc.sort_indices(rows, [("key", "ascending"), ("seq", "descending")]))


def _as_version(entry: MemEntry) -> Version:
    """A memtable entry as a :class:`Version` (a plain ``(seq, value)``: a value or tombstone)."""
    if len(entry) == 2:
        seq, value = entry
        return Version(seq, KIND_TOMBSTONE if value is None else KIND_VALUE, value, None, None)
    return entry


def _sst_versions(h: SstHandle, key: bytes) -> Iterator[Version]:
    """Every row of ``key`` in the view ``h``, newest first (SlateDB keeps several versions of a
    key in one SST while its snapshots may read them)."""
    if h.get(key) is None:  # range and bloom filter first: most SSTs never hold the key
        return
    for b in h.scan(key, key + b"\x00"):
        seqs = b.column(1).to_pylist()
        kinds = b.column(2).to_pylist()
        values = b.column(3).to_pylist()
        for seq, kind, value in zip(seqs, kinds, values, strict=True):
            yield Version(seq, kind, None if kind == KIND_TOMBSTONE else value, None, None)
