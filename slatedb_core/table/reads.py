"""The reads of a sharded table: one :class:`~slatedb_core.reader.reader.DbReader` per shard,
opened on first use, and get/scan routed across them (docs/projection-and-union.md).

Readers use ``TableOptions.reader`` (default MANAGED: each reader pins its state with a
checkpoint, so GC cannot pull SSTs from under a long scan; FOLLOW_LATEST never writes). A scan
walks the shards overlapping ``[start, end)`` in key order, each clipped to its range. On a
:class:`~slatedb_core.table.snapshot.TableSnapshot` every reader reads its shard's checkpoint
instead: one consistent, repeatable view per shard, of a shard map that cannot change under it.

What a read uses is a :class:`ReadState`: one shard-map version and the readers opened on its
shards, swapped whole under a lock (the snapshot-swap state of mini-lsm and of
:class:`~slatedb_core.reader.reader.DbReader` itself). Every read (``get``, ``get_many``,
``scan``, ``scan_arrow``) takes the state once, through :meth:`ShardReaders._enter`, and reads
only its readers, so it reads the shards of one map version, never some shards of a map that an
overwrite replaced and some of the map that replaced them (docs/overwrite.md).

How stale a live handle can be (docs/projection-and-union.md, "A live table handle"): before
serving a read, :meth:`ShardReaders._enter` re-reads the latest map id (the sequenced store's
latest lookup: a GET of the ``_latest_version`` pointer and a LIST from it) when the last look is
older than ``TableOptions.reader.manifest_poll_interval``, and swaps in a state of the new map if
there is one. So a read that starts at time t reads a map at least as new as the latest at
t - interval, and each shard's reader is itself at most one poll interval behind its shard. Three
things make the handle look again at once: a read that finds its shard's database destroyed (it
then re-routes on the new map: at most :data:`REROUTES` times), a reader's poll that finds it
destroyed (the reader reports it; the handle then swaps in its poll thread, so even an idle
handle lets go of a retired shard), and :meth:`ShardReaders.refresh`. A state swapped out closes
the readers the new map does not use (deleting their checkpoints, so the GC can delete the
retired shards) once no read still uses it and no other state still in use holds them (a
reader carried over from state to state is one object: a swap that retires it must not close
it under an older state's scan that still has to read it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pyarrow as pa

from slatedb_core.errors import DatabaseDestroyed, DatabaseNotFound, InvalidArgument, SlateDBError
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.entries import KV_SCHEMA
from slatedb_core.options import DbReaderOptions, ReaderMode, check_int, check_key_list
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore
from slatedb_core.table.snapshot import TableSnapshot

log = logging.getLogger(__name__)

__all__ = ["COUNT_BATCH_ROWS", "REROUTES", "ReadState", "ShardReaders"]

T = TypeVar("T")

REROUTES = 2
"""How often one read re-routes after finding its shard destroyed (each time on a newer map)."""


class ReadState:
    """One shard-map version and the readers opened on its shards, by database path. The map
    never changes; readers are added (copy on write, under the owner's lock) as reads need
    them. ``users`` counts the reads using the state; once it is swapped out (``retired``) and
    unused, its readers that no state still alive holds are closed (:meth:`ShardReaders._die`)."""

    __slots__ = ("map", "readers", "retired", "users")

    def __init__(self, m: ShardMap, readers: dict[str, DbReader]) -> None:
        self.map = m
        self.readers = readers
        self.users = 0
        self.retired = False


class ShardReaders:
    """The per-shard readers of the table at ``path`` and the shard map they read (see the
    module docstring). Thread-safe."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: DbReaderOptions,
        snapshot: TableSnapshot | None,
        maps: ShardMapStore,
        initial: ShardMap,
    ) -> None:
        self.path = path
        self.store = store
        self.options = options
        self.snapshot = snapshot
        self.maps = maps
        self._interval = options.manifest_poll_interval.total_seconds()
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()  # one map check at a time
        self._state = ReadState(initial, {})
        self._alive = [self._state]  # the current state and swapped-out ones reads still use
        self._checked_at = time.monotonic()
        self._look_now = False  # a reader found its database destroyed
        self._closed = False

    # ---- the map -----------------------------------------------------------------------------
    @property
    def map(self) -> ShardMap:
        """The map the handle holds (what its reads are routed by)."""
        return self._state.map

    def install(self, latest: ShardMap, *, force: bool = False) -> None:
        """Swap in a state of ``latest`` if it is newer than the map held (``force``: whatever
        its id); the readers of databases it keeps carry over."""
        _close_all(self._swap(latest, force))

    def _swap(self, latest: ShardMap, force: bool) -> list[DbReader]:
        """:meth:`install`, but returns the readers to close (outside any lock)."""
        with self._lock:
            old = self._state
            if self._closed or latest is old.map or (latest.id <= old.map.id and not force):
                return []
            live = {s.db_path for s in latest.shards}
            keep = {p: r for p, r in old.readers.items() if p in live}
            self._state = ReadState(latest, keep)
            self._alive.append(self._state)
            return self._retire(old)

    def _retire(self, old: ReadState) -> list[DbReader]:
        """Mark ``old`` swapped out (under the lock); the readers to close now."""
        old.retired = True
        return [] if old.users else self._die(old)

    def _die(self, state: ReadState) -> list[DbReader]:
        """``state`` is swapped out and no read uses it (under the lock): its readers that no
        state still alive holds, to close. One reader object can be in several states (carried
        over by each swap that keeps its shard), so a swap's leftovers are not enough: an older
        state's scan may still have to read a reader the newer state retires."""
        self._alive = [s for s in self._alive if s is not state]
        held = {id(r) for s in self._alive for r in s.readers.values()}
        return [r for r in state.readers.values() if id(r) not in held]

    def check_map(self, *, force: bool = False) -> None:
        """Re-read the latest map id if the last look is older than the poll interval (or
        ``force``); install the latest map if it is newer than the one held."""
        if self.snapshot is not None or not (force or self._due()):
            return
        with self._check_lock:
            doomed = self._look(force)
        _close_all(doomed)  # closing joins poll threads, which may wait for _check_lock

    def _look(self, force: bool) -> list[DbReader]:
        """The map check, under ``_check_lock``; the readers to close."""
        if not (force or self._due()):
            return []  # another thread looked while this one waited
        started = time.monotonic()
        self._look_now = False
        latest_id = self.maps.seq.latest_id()
        doomed: list[DbReader] = []
        if latest_id is not None and latest_id > self._state.map.id:
            doomed = self._swap(self.maps.read_latest(), False)
        self._checked_at = started
        return doomed

    def _due(self) -> bool:
        return self._look_now or time.monotonic() - self._checked_at >= self._interval

    def _on_destroyed(self) -> None:
        """A reader's poll found its database destroyed (a rescale or overwrite retired it):
        look at the map now, from that poll thread, so an idle handle lets go of it too."""
        self._look_now = True
        try:
            self.check_map()  # closes readers after releasing its lock: no wait on this thread
        except Exception as e:  # never out of the reader's poll thread; the next read looks
            self._look_now = True
            log.warning("table %r: re-reading the shard map: %s", self.path, e)

    def refresh(self) -> ShardMap:
        """Read the latest map now, install it and bring every reader of it up to date."""
        if self.snapshot is None:
            self.check_map(force=True)
        state = self._state
        for r in list(state.readers.values()):
            try:
                r.refresh()
            except SlateDBError as e:
                log.info("table %r: refreshing reader of %r: %s", self.path, r.path, e)
        return state.map

    # ---- states and readers ------------------------------------------------------------------
    def _enter(self) -> ReadState:
        """The state a read uses, after the map check every read goes through (module doc)."""
        self.check_map()
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"table {self.path!r} is closed")
            state = self._state
            state.users += 1
            return state

    def _leave(self, state: ReadState) -> None:
        with self._lock:
            state.users -= 1
            doomed = self._die(state) if state.retired and not state.users else []
        _close_all(doomed)

    def reader(self, state: ReadState, shard: Shard) -> DbReader:
        """The reader of ``shard`` (of ``state.map``), opened if need be."""
        r = state.readers.get(shard.db_path)
        if r is not None:
            return r
        if self.snapshot is not None:
            cid = self.snapshot.checkpoints[shard.index]
            opts = replace(self.options, mode=ReaderMode.CHECKPOINT)
            r = DbReader.open(shard.db_path, self.store, cid, opts)
        else:
            r = DbReader.open(
                shard.db_path, self.store, None, self.options, on_destroyed=self._on_destroyed
            )
        with self._lock:
            existing = state.readers.get(shard.db_path)
            if existing is None and not self._closed:
                # swapped out meanwhile: closed with the state, once its reads are done
                state.readers = {**state.readers, shard.db_path: r}
                return r
        _close_quietly(r)  # another thread opened one first, or the table closed meanwhile
        if existing is None:
            raise InvalidArgument(f"table {self.path!r} is closed")
        return existing

    def close(self) -> None:
        """Close every reader (deleting their checkpoints). Idempotent."""
        with self._lock:
            self._closed = True
            doomed = self._retire(self._state)
        _close_all(doomed)

    # ---- reads -------------------------------------------------------------------------------
    def _read(self, fn: Callable[[ReadState], T]) -> T:
        """``fn`` on the state :meth:`_enter` gives; ``fn`` reads that state only, so its answer
        is of one map."""
        state, answer = self._reroute(self._enter(), fn)
        self._leave(state)
        return answer

    def _reroute(self, state: ReadState, fn: Callable[[ReadState], T]) -> tuple[ReadState, T]:
        """(the state ``fn`` answered on, still entered; the answer), given ``state`` entered:
        ``fn`` runs again on a newer map after it found a shard destroyed (module doc). On an
        error, the state is left."""
        try:
            for attempt in range(REROUTES + 1):
                try:
                    return state, fn(state)
                except (DatabaseDestroyed, DatabaseNotFound):
                    if self.snapshot is not None or attempt == REROUTES:
                        raise
                    self.check_map(force=True)
                    if self._state is state:
                        raise  # no newer map: the shard is gone for another reason
                    newer = self._enter()
                    self._leave(state)
                    state = newer
            raise AssertionError("unreachable")  # pragma: no cover
        except BaseException:
            self._leave(state)
            raise

    def get(self, key: bytes) -> bytes | None:
        return self._read(lambda st: self.reader(st, st.map.shard_for(key)).get(key))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        ks = check_key_list("keys", keys)
        if not ks:
            return []
        return self._read(lambda st: self._get_many_on(st, ks))

    def _get_many_on(self, st: ReadState, ks: list[bytes]) -> list[bytes | None]:
        """Every reader first, then the reads (module doc)."""
        idx = st.map.route(ks).to_numpy()
        readers = {int(i): self.reader(st, st.map.shards[int(i)]) for i in np.unique(idx)}
        out: list[bytes | None] = [None] * len(ks)
        for i, reader in readers.items():
            positions = np.flatnonzero(idx == i)
            values = reader.get_many([ks[p] for p in positions])
            for p, v in zip(positions, values, strict=True):
                out[int(p)] = v
        return out

    def _shard_scans(
        self, st: ReadState, start: bytes | None, end: bytes | None
    ) -> list[tuple[DbReader, bytes | None, bytes | None]]:
        """(reader, clipped start, clipped end) per shard of ``st`` overlapping ``[start, end)``,
        in key order, every reader opened before the scan reads (module doc)."""
        scans: list[tuple[DbReader, bytes | None, bytes | None]] = []
        for shard in st.map.overlapping(start, end):
            clip = shard.key_range.intersect(KeyRange(start, end))
            if not clip.is_empty():
                scans.append((self.reader(st, shard), clip.start, clip.end))
        return scans

    def _scan(
        self,
        start: bytes | None,
        end: bytes | None,
        each: Callable[[DbReader, bytes | None, bytes | None], Iterator[T]],
    ) -> Iterator[T]:
        """``each(reader, lo, hi)`` of every shard in key order, from the first ``next``; the
        state is held (its readers stay open) until the scan is exhausted or closed."""
        state, scans = self._reroute(self._enter(), lambda st: self._shard_scans(st, start, end))
        try:
            for reader, lo, hi in scans:
                yield from each(reader, lo, hi)
        finally:
            self._leave(state)

    def scan(self, start: bytes | None, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        _check_bounds(start, end)
        return self._scan(start, end, lambda r, lo, hi: r.scan(lo, hi))

    def scan_arrow(
        self, start: bytes | None, end: bytes | None, batch_size: int
    ) -> pa.RecordBatchReader:
        _check_bounds(start, end)
        batch_size = check_int("batch_size", batch_size, lo=1)
        batches = self._scan(start, end, lambda r, lo, hi: iter(r.scan_arrow(lo, hi, batch_size)))
        return pa.RecordBatchReader.from_batches(KV_SCHEMA, batches)

    def count(
        self, start: bytes | None, end: bytes | None, workers: int
    ) -> list[tuple[Shard, int]]:
        """(shard, live keys in ``[start, end)``) of every shard of one map version overlapping
        the range, in key order: each shard's :meth:`DbReader.scan_arrow` batches' ``num_rows``
        summed, so tombstones, TTLs and merge operands count exactly as a scan reads them; the
        shards in ``workers`` threads (the reads are IO and Arrow, which release the GIL). A
        shard found destroyed meanwhile re-counts on the newer map, as every read re-routes."""
        _check_bounds(start, end)
        workers = check_int("workers", workers, lo=1)
        return self._read(lambda st: self._count_on(st, start, end, workers))

    def _count_on(
        self, st: ReadState, start: bytes | None, end: bytes | None, workers: int
    ) -> list[tuple[Shard, int]]:
        parts = [
            (shard, clip)
            for shard in st.map.overlapping(start, end)
            if not (clip := shard.key_range.intersect(KeyRange(start, end))).is_empty()
        ]

        def one(part: tuple[Shard, KeyRange]) -> tuple[Shard, int]:
            shard, clip = part
            batches = self.reader(st, shard).scan_arrow(clip.start, clip.end, COUNT_BATCH_ROWS)
            return shard, sum(b.num_rows for b in batches)

        if workers == 1 or len(parts) < 2:
            return [one(p) for p in parts]
        with ThreadPoolExecutor(min(workers, len(parts)), thread_name_prefix="count") as pool:
            return list(pool.map(one, parts))


COUNT_BATCH_ROWS = 1 << 18
"""Rows per batch of a count's scans: few batches per shard, bounded memory per thread."""


def _check_bounds(start: bytes | None, end: bytes | None) -> None:
    for name, b in (("start", start), ("end", end)):
        if b is not None and not isinstance(b, bytes):
            raise InvalidArgument(f"scan {name} must be bytes or None")
    if start is not None and end is not None and end < start:
        raise InvalidArgument(f"scan end {end!r} is before start {start!r}")


def _close_all(readers: list[DbReader]) -> None:
    for r in readers:
        _close_quietly(r)


def _close_quietly(r: DbReader) -> None:
    try:
        r.close()
    except SlateDBError as e:
        log.info("closing reader of %r: %s", r.path, e)
