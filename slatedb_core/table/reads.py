"""The reads of a sharded table: one :class:`~slatedb_core.reader.reader.DbReader` per shard,
opened on first use, and get/scan routed across them (docs/projection-and-union.md).

Readers use ``TableOptions.reader`` (default MANAGED: each reader pins its state with a
checkpoint, so GC cannot pull SSTs from under a long scan; FOLLOW_LATEST never writes). A scan
walks the shards overlapping ``[start, end)`` in key order, each clipped to its range. On a
:class:`~slatedb_core.table.snapshot.TableSnapshot` every reader reads its shard's checkpoint
instead: one consistent, repeatable view per shard, of a shard map that cannot change under it.
A read that finds its shard's database destroyed (a rescale finished meanwhile) refreshes the
map once and re-routes. A scan or ``get_many`` opens the readers of every shard it needs before
reading any, and re-routes from the start: it reads the shards of one map version, never some
shards of a map that an overwrite replaced and some of the map that replaced them
(docs/overwrite.md).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from slatedb_core.errors import DatabaseDestroyed, DatabaseNotFound, InvalidArgument, SlateDBError
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.entries import KV_SCHEMA
from slatedb_core.options import DbReaderOptions, ReaderMode, check_int, check_key_list
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import Shard, ShardMap
from slatedb_core.table.snapshot import TableSnapshot

log = logging.getLogger(__name__)

__all__ = ["ShardReaders"]


class ShardReaders:
    """The per-shard readers of the table at ``path``. ``current`` gives the map the table holds;
    ``refresh`` reads the latest one (and calls :meth:`retain`). Thread-safe."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: DbReaderOptions,
        snapshot: TableSnapshot | None,
        current: Callable[[], ShardMap],
        refresh: Callable[[], ShardMap],
    ) -> None:
        self.path = path
        self.store = store
        self.options = options
        self.snapshot = snapshot
        self._current = current
        self._refresh = refresh
        self._lock = threading.Lock()
        self._readers: dict[str, DbReader] = {}
        self._closed = False

    # ---- the readers -------------------------------------------------------------------------
    def reader(self, shard: Shard) -> DbReader:
        """The reader of ``shard``, opened if need be."""
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"table {self.path!r} is closed")
            r = self._readers.get(shard.db_path)
        if r is not None:
            return r
        if self.snapshot is not None:
            cid = self.snapshot.checkpoints[shard.index]
            opts = dataclasses.replace(self.options, mode=ReaderMode.CHECKPOINT)
            r = DbReader.open(shard.db_path, self.store, cid, opts)
        else:
            r = DbReader.open(shard.db_path, self.store, None, self.options)
        with self._lock:
            closed = self._closed
            existing = self._readers.get(shard.db_path)
            if existing is None and not closed:
                self._readers[shard.db_path] = r
                return r
        _close_quietly(r)  # another thread opened one first, or the table closed meanwhile
        if existing is None:
            raise InvalidArgument(f"table {self.path!r} is closed")
        return existing

    def retain(self, live: set[str]) -> None:
        """Close the readers of databases not in ``live`` (shards a rescale replaced)."""
        with self._lock:
            stale = [self._readers.pop(p) for p in list(self._readers) if p not in live]
        for r in stale:
            _close_quietly(r)

    def refresh_all(self) -> None:
        """Bring every open reader up to date."""
        with self._lock:
            readers = list(self._readers.values())
        for r in readers:
            try:
                r.refresh()
            except SlateDBError as e:
                log.info("table %r: refreshing reader of %r: %s", self.path, r.path, e)

    def close(self) -> None:
        """Close every reader (deleting their checkpoints). Idempotent."""
        with self._lock:
            self._closed = True
            readers = list(self._readers.values())
            self._readers.clear()
        for r in readers:
            _close_quietly(r)

    # ---- reads -------------------------------------------------------------------------------
    def _with_reroute(self, key: bytes, fn: Any) -> Any:
        """Run ``fn(reader)`` on the reader of ``key``'s shard; once, after a rescale destroyed
        that shard, on the latest map."""
        shard = self._current().shard_for(key)
        try:
            return fn(self.reader(shard))
        except (DatabaseDestroyed, DatabaseNotFound):
            if self.snapshot is not None:
                raise
            return fn(self.reader(self._refresh().shard_for(key)))

    def get(self, key: bytes) -> bytes | None:
        return self._with_reroute(key, lambda r: r.get(key))  # type: ignore[no-any-return]

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        ks = check_key_list("keys", keys)
        if not ks:
            return []
        m = self._current()
        for attempt in range(2):  # every reader first, on one map (module doc)
            try:
                return self._get_many_on(m, ks)
            except (DatabaseDestroyed, DatabaseNotFound):
                # a shard of ``m`` was replaced: read every key again on the new map, never
                # some keys on the old map and some on the new (an overwrite between them
                # would mix old and new contents, docs/overwrite.md "Readers")
                if self.snapshot is not None or attempt:
                    raise
                m = self._refresh()
        raise AssertionError("unreachable")  # pragma: no cover

    def _get_many_on(self, m: ShardMap, ks: list[bytes]) -> list[bytes | None]:
        idx = m.route(ks).to_numpy()
        readers = {int(i): self.reader(m.shards[int(i)]) for i in np.unique(idx)}
        out: list[bytes | None] = [None] * len(ks)
        for i, reader in readers.items():
            positions = np.flatnonzero(idx == i)
            values = reader.get_many([ks[p] for p in positions])
            for p, v in zip(positions, values, strict=True):
                out[int(p)] = v
        return out

    def _shard_scans(
        self, start: bytes | None, end: bytes | None
    ) -> list[tuple[DbReader, bytes | None, bytes | None]]:
        """(reader, clipped start, clipped end) per shard overlapping ``[start, end)``, in key
        order, every reader opened before the scan reads (module doc); the map is the one
        current when the scan starts, re-read once if a shard turns out to be destroyed."""
        m = self._current()
        for attempt in range(2):
            scans: list[tuple[DbReader, bytes | None, bytes | None]] = []
            try:
                for shard in m.overlapping(start, end):
                    clip = shard.key_range.intersect(KeyRange(start, end))
                    if not clip.is_empty():
                        scans.append((self.reader(shard), clip.start, clip.end))
                return scans
            except (DatabaseDestroyed, DatabaseNotFound):
                if self.snapshot is not None or attempt:
                    raise
                m = self._refresh()
        raise AssertionError("unreachable")  # pragma: no cover

    def scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        _check_bounds(start, end)

        def rows() -> Iterator[tuple[bytes, bytes]]:
            for reader, lo, hi in self._shard_scans(start, end):
                yield from reader.scan(lo, hi)

        return rows()

    def scan_arrow(
        self, start: bytes | None, end: bytes | None, batch_size: int
    ) -> pa.RecordBatchReader:
        _check_bounds(start, end)
        batch_size = check_int("batch_size", batch_size, lo=1)

        def batches() -> Iterator[pa.RecordBatch]:
            for reader, lo, hi in self._shard_scans(start, end):
                yield from reader.scan_arrow(lo, hi, batch_size)

        return pa.RecordBatchReader.from_batches(KV_SCHEMA, batches())


def _check_bounds(start: bytes | None, end: bytes | None) -> None:
    for name, b in (("start", start), ("end", end)):
        if b is not None and not isinstance(b, bytes):
            raise InvalidArgument(f"scan {name} must be bytes or None")
    if start is not None and end is not None and end < start:
        raise InvalidArgument(f"scan end {end!r} is before start {start!r}")


def _close_quietly(r: DbReader) -> None:
    try:
        r.close()
    except SlateDBError as e:
        log.info("closing reader of %r: %s", r.path, e)
