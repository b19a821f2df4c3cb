"""The deletes a garbage-collection pass has decided on: issued in parallel, counted per kind, and
a failed one left for the next pass.

Deletes go straight to the object store. ``SequencedStore.delete`` would re-read the boundary and
the latest id for every object (two extra requests each): facts the pass has just established
once, before its first delete.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.errors import StoreError
from slatedb_core.gc.stats import KindStats
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

DELETE_CONCURRENCY = 16
"""Deletes are independent once the boundary is durable; issuing them in parallel turns a pass
over thousands of objects from minutes into seconds on S3."""


class Deleter:
    """Deletes objects of one database for a GC pass, ``concurrency`` at a time."""

    def __init__(
        self, path: str, store: ObjectStore, concurrency: int = DELETE_CONCURRENCY
    ) -> None:
        self.path = path
        self.store = store
        self.concurrency = max(1, concurrency)

    def delete(
        self, doomed: Sequence[tuple[str, int]], into: KindStats, store: ObjectStore | None = None
    ) -> None:
        """Delete every ``(path, size)`` in ``doomed`` (from ``store``, the main store by default).
        A failed delete is counted in ``into`` and left for the next pass (its object stays
        behind the boundary and unreferenced, so it stays eligible): one bad request does not
        stop the rest."""
        target = self.store if store is None else store

        def one(item: tuple[str, int]) -> tuple[int, StoreError | None]:
            path, size = item
            try:
                target.delete(path)
            except StoreError as e:
                log.warning("gc %r: could not delete %s: %s", self.path, path, e)
                return size, e
            return size, None

        if len(doomed) <= 1 or self.concurrency == 1:
            results = [one(item) for item in doomed]
        else:
            workers = min(self.concurrency, len(doomed))
            with ThreadPoolExecutor(workers, thread_name_prefix="slatedb-gc-delete") as pool:
                results = list(pool.map(one, doomed))
        for size, err in results:
            if err is None:
                into.deleted += 1
                into.bytes_freed += size
            else:
                into.failed += 1
