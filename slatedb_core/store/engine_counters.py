"""Process-wide engine counters: what every object store, block cache and durable put of this
process did, kept where each already counts and summed only when read (issue 40, item 11).

Nothing is added to the hot paths but what was counted already: each
:class:`~slatedb_core.store.objectstore.ObstoreObjectStore` registers its
:class:`~slatedb_core.store.objectstore.RequestCounters` (requests per kind, bytes read and
written) and each :class:`~slatedb_core.sst.cache.BlockCache` itself (hits, misses) when it is
made; :func:`snapshot` sums them at scrape time (``slatedb_core.fleet.metrics``). A durable put
adds one observation to :data:`DURABLE_PUT` after its wait, which lasts a WAL upload (milliseconds
at least), so a lock and a bisect there cost nothing measurable.

Totals never go down (a Prometheus counter must not): a store's counters are kept until the store
is collected and then added to the retired totals. A block cache is not kept alive (it holds
blocks): it hands its final hits and misses over as it is finalized (:func:`retire_cache`, from
``BlockCache.__del__``), so what it counted after the last :func:`snapshot` is kept too.

The collector may retire a store or a cache on any thread, at any allocation, including one
inside :func:`snapshot` while it holds the lock: the retirement callbacks therefore take no lock
(they only queue the key and a cache's final counts, :data:`_dead`, an atomic deque append); the
queue is folded into the retired totals under the lock by the next :func:`snapshot` or
registration.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DURABLE_PUT",
    "DURATION_BUCKETS_S",
    "EngineSnapshot",
    "Histogram",
    "register_cache",
    "register_store_counters",
    "snapshot",
]

DURATION_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the durable-put latency buckets: a local disk's fsync to a slow S3."""


class _Counts(Protocol):
    def snapshot(self) -> dict[str, int]: ...

    def bytes_snapshot(self) -> dict[str, int]: ...


class Histogram:
    """Observations in fixed buckets (:data:`DURATION_BUCKETS_S`), their count and sum."""

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS_S) -> None:
        self.bounds = bounds
        self._lock = threading.Lock()
        self._counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self._sum = 0.0

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            self._counts[i] += 1
            self._sum += value

    def since(self, start: float) -> None:
        """Observe the seconds since ``start`` (a :func:`time.monotonic` reading)."""
        self.observe(time.monotonic() - start)

    def read(self) -> tuple[list[int], float]:
        """Per-bucket counts (not cumulative; the last is above every bound) and the sum."""
        with self._lock:
            return list(self._counts), self._sum


DURABLE_PUT = Histogram()
"""Seconds a durable write (put, delete, merge, batch with ``await_durable``) waited for its WAL
SST to land."""


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    requests: dict[str, int]
    """Object-store requests per kind (``get``, ``put``, ``list``...)."""
    bytes: dict[str, int]
    """Object-store bytes, ``read`` and ``written``."""
    cache_hits: int
    cache_misses: int
    durable_put_buckets: list[int]
    durable_put_sum_s: float


_lock = threading.Lock()
_stores: dict[int, _Counts] = {}
_retired_requests: dict[str, int] = {}
_retired_bytes: dict[str, int] = {}
_caches: dict[int, tuple[weakref.ref[Any], list[int]]] = {}
"""id -> (the cache, its hits and misses at the last snapshot)."""
_retired_cache = [0, 0]
_dead: collections.deque[tuple[str, int, int, int]] = collections.deque()
"""Collected stores (``"store"``, key) and caches (``"cache"``, key, final hits and misses) not
yet retired."""


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + v


def _retire_dead() -> None:
    """Fold the collected stores and caches into the retired totals; the caller holds _lock."""
    while _dead:
        kind, key, hits, misses = _dead.popleft()
        if kind == "store":
            counts = _stores.pop(key, None)
            if counts is not None:
                _add(_retired_requests, counts.snapshot())
                _add(_retired_bytes, counts.bytes_snapshot())
        else:
            found = _caches.pop(key, None)
            if found is not None:
                _retired_cache[0] += max(found[1][0], hits)
                _retired_cache[1] += max(found[1][1], misses)


def register_store_counters(store: object, counters: _Counts) -> None:
    """Count ``counters`` (a store's) in :func:`snapshot`, and keep its totals once ``store`` is
    collected."""
    key = id(counters)
    with _lock:
        _retire_dead()
        _stores[key] = counters
    weakref.finalize(store, _dead.append, ("store", key, 0, 0))


def register_cache(cache: object) -> int:
    """Count ``cache``'s ``hits`` and ``misses`` in :func:`snapshot` (module docstring); the
    cache hands the key returned to :func:`retire_cache` when it is finalized."""
    ref = weakref.ref(cache)
    with _lock:
        _retire_dead()
        _caches[id(ref)] = (ref, [0, 0])
    return id(ref)


def retire_cache(key: int, hits: int, misses: int) -> None:
    """Keep a finalized cache's final counts (no lock: see the module docstring)."""
    _dead.append(("cache", key, hits, misses))


def snapshot() -> EngineSnapshot:
    """Every counter of this process, summed now."""
    with _lock:
        _retire_dead()
        requests, nbytes = dict(_retired_requests), dict(_retired_bytes)
        for counts in _stores.values():
            _add(requests, counts.snapshot())
            _add(nbytes, counts.bytes_snapshot())
        hits, misses = _retired_cache
        for ref, seen in _caches.values():
            cache = ref()
            if cache is not None:
                seen[0], seen[1] = max(seen[0], cache.hits), max(seen[1], cache.misses)
            hits, misses = hits + seen[0], misses + seen[1]
    buckets, total = DURABLE_PUT.read()
    return EngineSnapshot(requests, nbytes, hits, misses, buckets, total)
