"""A byte-bounded LRU cache of decoded SST blocks, shared by every reader of a database.

Why bounded by bytes rather than entries: blocks vary from a few hundred bytes to several MiB (one
large value gets a block of its own), so an entry count says nothing about memory. Each value
reports its own decoded size through ``nbytes``. One lock guards the whole cache: the critical
sections are a dict move and a few integer updates, far cheaper than anything done with a block.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from slatedb_core.errors import InvalidArgument


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
            raise InvalidArgument(f"capacity_bytes must be a non-negative int, got {capacity_bytes!r}")
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, int], tuple[Sized, int]] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, path: str, block_index: int, *, count_miss: bool = True) -> Sized | None:
        """The cached block, or None (counted as a miss unless ``count_miss`` is False: a
        caller that may not read the block after all counts it when it does)."""
        key = (path, block_index)
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += count_miss
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item[0]

    def put(self, path: str, block_index: int, block: Sized) -> None:
        size = max(1, int(block.nbytes))
        key = (path, block_index)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._size -= old[1]
            if size > self.capacity_bytes:
                return
            self._items[key] = (block, size)
            self._size += size
            while self._size > self.capacity_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._size -= dropped
                self.evictions += 1

    def contains(self, path: str, block_index: int) -> bool:
        """Membership without touching LRU order or the hit counters (used to plan read-ahead)."""
        with self._lock:
            return (path, block_index) in self._items

    def discard_path(self, path: str) -> int:
        """Drop every block of one object (e.g. after the SST was deleted); returns how many."""
        with self._lock:
            doomed = [k for k in self._items if k[0] == path]
            for k in doomed:
                self._size -= self._items.pop(k)[1]
            return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
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
                self.hits, self.misses, self.evictions, len(self._items), self._size,
                self.capacity_bytes,
            )
