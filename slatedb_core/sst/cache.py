"""A byte-bounded LRU cache of decoded SST blocks, shared by every reader of a database.

Why bounded by bytes rather than entries: blocks vary from a few hundred bytes to several MiB (one
large value gets a block of its own), so an entry count says nothing about memory. Each value
reports its own decoded size through ``nbytes``. One lock guards the whole cache: the critical
sections are a dict move and a few integer updates, far cheaper than anything done with a block.

A hit takes no lock (it sits on every point read): under the GIL one ``OrderedDict.get`` is
atomic against a concurrent ``put``, and instead of moving the entry to the back it sets the
entry's "referenced" bit. Eviction is LRU with a second chance (CLOCK): an entry at the front
that was referenced since it last passed there moves to the back with the bit cleared, the first
unreferenced one goes. Entries never referenced leave in insertion order, and an entry read since
it was stored outlives one that was not.

Admission (issue 42, goal 1): while the cache has room, every block a point lookup reads is kept.
Once it is full, a block read by a point lookup is kept at its second miss among the last misses
the cache remembers (keys only: as many as blocks of the missed one's size it would hold, at least
as many as it holds, at most :data:`_MISSED_MAX`): past the cache, where most
blocks are read once before they would be evicted, keeping each one cost a fresh allocation the
size of the block and an eviction per read (the block's memory then cold in the CPU's caches),
~5 us of a ~30 us lookup. A block read twice while remembered is kept, so a working set that
fits still ends up cached. Blocks put by scans (``miss`` false) are kept as before.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol, cast

from slatedb_core.errors import InvalidArgument
from slatedb_core.store.engine_counters import register_cache, retire_cache

_MISSED_MAX = 1 << 18
"""The most misses a full cache remembers for admission (~100 bytes each)."""


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    entries: int
    size_bytes: int
    capacity_bytes: int


class BlockCache:
    """LRU over ``(path, block_index)``; a value larger than the whole capacity is not kept."""

    def __init__(self, capacity_bytes: int) -> None:
        if not isinstance(capacity_bytes, int) or capacity_bytes < 0:
            raise InvalidArgument(
                f"capacity_bytes must be a non-negative int, got {capacity_bytes!r}"
            )
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, int], tuple[Sized, int]] = OrderedDict()
        self._referenced: set[tuple[str, int]] = set()  # read since they last reached the front
        # blocks a point lookup read while the cache was full, not kept (module doc, Admission)
        self._missed: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._counters_key = register_cache(self)  # read at scrape time (issue 40, item 11)

    def __del__(self) -> None:
        # the hits and misses since the last scrape outlive the cache (engine_counters)
        key = getattr(self, "_counters_key", None)
        if key is not None:
            retire_cache(key, self.hits, self.misses)

    def get(self, path: str, block_index: int, *, count_miss: bool = True) -> Sized | None:
        """The cached block, or None (counted as a miss unless ``count_miss`` is False: a
        caller that may not read the block after all counts it when it does)."""
        key = (path, block_index)
        item = self._items.get(key)
        if item is None:
            if count_miss:
                with self._lock:
                    self.misses += 1
            return None
        self._referenced.add(key)  # one C call: atomic under the GIL, as the get above
        # a += on an int attribute is not split by a thread switch in CPython 3.11 (no
        # eval-breaker check inside it); the hit itself needs no lock (see above)
        self.hits += 1
        return item[0]

    def get_many(self, path: str, blocks: list[int]) -> list[Sized | None]:
        """:meth:`get` of several blocks of one object in one pass; misses are not counted
        (the caller counts those it reads, through :meth:`put` with ``miss=True``)."""
        keys = list(zip(itertools.repeat(path), blocks))
        items = list(map(self._items.get, keys))
        if None not in items:
            self._referenced.update(keys)
            self.hits += len(keys)
            return list(map(itemgetter(0), cast(list[tuple[Sized, int]], items)))
        hit = list(map(operator.is_not, items, itertools.repeat(None)))
        referenced = list(itertools.compress(keys, hit))
        self._referenced.update(referenced)
        self.hits += len(referenced)
        return [None if item is None else item[0] for item in items]

    def put(self, path: str, block_index: int, block: Sized, *, miss: bool = False) -> None:
        """Keep ``block``; ``miss``: a point lookup read it after a :meth:`get` that did not
        count its miss (counted here, under the lock this takes anyway), and once the cache is
        full it is kept only at its second such miss (module doc, Admission)."""
        size = max(1, int(block.nbytes))
        key = (path, block_index)
        with self._lock:
            items = self._items
            if miss:
                self.misses += 1
                if self._size + size > self.capacity_bytes and key not in items:
                    missed = self._missed
                    if key in missed:  # its second miss lately: kept
                        del missed[key]
                    else:  # remembered only
                        missed[key] = None
                        # as many as blocks of this size the cache would hold, at least as
                        # many as it holds: a round of lookups over blocks that fit is seen
                        # twice, whatever larger blocks filled it (review 52)
                        remember = min(max(len(items), self.capacity_bytes // size, 1), _MISSED_MAX)
                        while len(missed) > remember:
                            missed.popitem(last=False)
                        return
            referenced = self._referenced
            old = items.pop(key, None)
            referenced.discard(key)
            if old is not None:
                self._size -= old[1]
            if size > self.capacity_bytes:
                return
            while self._size + size > self.capacity_bytes:  # make room, then insert
                k, item = items.popitem(last=False)
                if k in referenced:  # second chance: back of the queue, bit cleared
                    referenced.discard(k)
                    items[k] = item
                    continue
                self._size -= item[1]
                self.evictions += 1
            items[key] = (block, size)
            self._size += size

    def peek(self, path: str, block_index: int) -> Sized | None:
        """The cached block or None, without counting a hit or a miss or touching its
        eviction order (a scan looks before it decides whether to use it)."""
        item = self._items.get((path, block_index))
        return None if item is None else item[0]

    def contains(self, path: str, block_index: int) -> bool:
        """Membership without touching LRU order or the hit counters (used to plan read-ahead)."""
        with self._lock:
            return (path, block_index) in self._items

    def discard_path(self, path: str) -> int:
        """Drop every block of one object (e.g. after the SST was deleted); returns how many."""
        with self._lock:
            for k in [k for k in self._missed if k[0] == path]:
                del self._missed[k]
            doomed = [k for k in self._items if k[0] == path]
            for k in doomed:
                self._size -= self._items.pop(k)[1]
                self._referenced.discard(k)
            return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._referenced.clear()
            self._missed.clear()
            self._size = 0

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._size

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self.hits,
                self.misses,
                self.evictions,
                len(self._items),
                self._size,
                self.capacity_bytes,
            )
