"""The LSM write buffer: a plain dict while it takes writes, a sorted Arrow batch once frozen.

Why a dict and not a sorted structure: ``put`` sits on the hottest path of the engine and a dict
assignment is the cheapest thing Python offers, while sorting is only needed twice in a memtable's
life (flush and range scans), where it is done vectorised over all entries at once. Each entry maps
``key -> (seq, value)``; ``value is None`` marks a tombstone. Only the latest write per key is kept.

Concurrency contract (CPython with the GIL; free-threaded builds void it):

* **One writer at a time.** ``put``/``put_many``/``put_batch``/``freeze`` take no lock; the Db
  serialises its writers under its own lock and applies writes in seq order (the memtable does not
  compare seqs: the last write to a key wins).
* **Readers take no lock.** ``get`` is a single ``dict.get``, atomic under the GIL, and the stored
  tuples are immutable, so a reader sees a key's previous or new entry, never a torn one. A
  ``put_many``/``put_batch`` builds a private dict first and publishes it in one C-level step
  (``dict.update`` from a dict, which allocates no GC-tracked object, so no collector, finalizer or
  thread switch can run inside it): readers see a write batch entirely or not at all.
* **Several gets are not one snapshot**: a write batch can land between them. ``Db.get_many``
  therefore reads its keys' memtable entries under the writer lock; a ``DbReader`` never writes to
  a table it has published (its replayed tables are immutable).
* **Scans copy.** ``Memtable.scan`` snapshots with one ``dict.copy()``, atomic for the same reason,
  and sorts the copy, so a scan is a point-in-time view unaffected by later writes. (``list(d.items())``
  would not be safe: each item tuple it allocates can trigger the GC, hence a thread switch and a
  "dictionary changed size during iteration" error.)
* ``size_bytes``/``entry_count``/seq bounds read from other threads may lag by the write in flight.
* After ``freeze`` the memtable rejects writes (``TypeError``); it then serves reads until the Db
  swaps in the :class:`ImmutableMemtable`, which shares the same dict, so there is no gap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from operator import itemgetter
from types import MappingProxyType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.entries import (
    ENTRY_SCHEMA,
    KIND_TOMBSTONE,
    conform,
    empty_batch,
    sortable_keys,
)
from slatedb_core.lsm.iterators import search_sorted

# Per-entry bytes beyond key and value: roughly what an entry costs once flushed (seq, kind and
# offsets), so size_bytes tracks the size of the L0 SST a flush will produce. The Python objects
# behind a small entry take about 150 bytes more in RAM; budget memory with that in mind.
ENTRY_OVERHEAD = 16
SCAN_CHUNK_ROWS = 65536
_NO_SEQ = 1 << 64

Entry = tuple[int, bytes | None]


class Memtable:
    """The active memtable. See the module docstring for the threading contract."""

    __slots__ = ("_data", "_frozen", "_max_seq", "_min_seq", "last_wal_id", "size_bytes")

    def __init__(self) -> None:
        self._data: dict[bytes, Entry] | MappingProxyType[bytes, Entry] = {}
        self._frozen: ImmutableMemtable | None = None
        self._min_seq = _NO_SEQ
        self._max_seq = -1
        self.size_bytes = 0
        self.last_wal_id = 0  # the highest WAL SST holding entries of this memtable; set by the Db

    def put(self, key: bytes, seq: int, value: bytes | None) -> None:
        """Write one entry (``value=None`` is a tombstone); kept to a handful of bytecodes."""
        d = self._data
        old = d.get(key)
        d[key] = (seq, value)  # type: ignore[index]  # a frozen memtable's proxy raises TypeError here
        if old is None:
            self.size_bytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
        else:
            ov = old[1]
            self.size_bytes += (0 if value is None else len(value)) - (0 if ov is None else len(ov))
        if seq > self._max_seq:
            self._max_seq = seq
        if seq < self._min_seq:
            self._min_seq = seq

    def put_many(
        self, keys: Sequence[bytes], seqs: Sequence[int], values: Sequence[bytes | None]
    ) -> None:
        """Apply a write batch atomically for readers (one ``dict.update``); later rows win."""
        if not len(keys) == len(seqs) == len(values):
            raise InvalidArgument("put_many: keys, seqs and values differ in length")
        if not keys:
            return
        fresh = dict(zip(keys, zip(seqs, values, strict=True), strict=True))
        row_bytes = sum(map(len, keys)) + sum(map(len, filter(None, values)))
        self._apply(fresh, len(keys), row_bytes)
        self._note_seqs(min(seqs), max(seqs))

    def put_batch(self, batch: pa.RecordBatch) -> None:
        """Bulk insert of an ENTRY_SCHEMA batch: each column crosses into Python in one call.

        Rows are applied in order, so with repeated keys the last row wins (after sort_dedup keys
        are unique and order does not matter). ``kind`` decides tombstones, whatever ``value`` says.
        """
        batch = conform(batch)
        n = batch.num_rows
        if n == 0:
            return
        key_col, seq_col, kinds, value_col = batch.columns
        is_tomb = pc.equal(kinds, KIND_TOMBSTONE)
        if pc.any(is_tomb).as_py():
            value_col = pc.if_else(is_tomb, pa.scalar(None, pa.binary()), value_col)
        row_bytes = _total_length(key_col) + _total_length(value_col)
        keys: list[bytes] = key_col.to_pylist()
        seqs: list[int] = seq_col.to_numpy(zero_copy_only=False).tolist()
        fresh = dict(zip(keys, zip(seqs, value_col.to_pylist(), strict=True), strict=True))
        self._apply(fresh, n, row_bytes)
        bounds = pc.min_max(seq_col)
        self._note_seqs(bounds["min"].as_py(), bounds["max"].as_py())

    def _apply(self, fresh: dict[bytes, Entry], rows: int, row_bytes: int) -> None:
        """Publish prepared entries in one step, then account their size exactly.

        Readers must see a write batch whole or not at all: adopting ``fresh`` (empty memtable) or
        ``dict.update`` from a dict is a single C-level step that allocates no tracked objects, so no
        garbage collection, finalizer or thread switch can run in the middle of it. ``row_bytes``
        (key + value bytes of the ``rows`` input rows) is exact unless keys repeated within the
        batch, which only then costs a Python pass over ``fresh``.
        """
        if self._frozen is not None:
            raise TypeError("memtable is frozen")
        d = self._data
        assert isinstance(d, dict)
        if len(fresh) != rows:
            row_bytes = sum(map(len, fresh)) + sum(len(v) for _, v in fresh.values() if v)
        added = row_bytes + ENTRY_OVERHEAD * len(fresh)
        if not d:
            self._data = fresh
        else:
            olds = list(map(d.get, fresh))
            d.update(fresh)
            if any(olds):
                for k, o in zip(fresh, olds, strict=True):
                    if o is not None:
                        added -= len(k) + ENTRY_OVERHEAD + (0 if o[1] is None else len(o[1]))
        self.size_bytes += added

    def _note_seqs(self, lo: int, hi: int) -> None:
        if hi > self._max_seq:
            self._max_seq = hi
        if lo < self._min_seq:
            self._min_seq = lo

    def get(self, key: bytes) -> Entry | None:
        """``(seq, value)`` with ``value=None`` for a tombstone; None when the key is not here."""
        return self._data.get(key)

    @property
    def entry_count(self) -> int:
        return len(self._data)

    @property
    def min_seq(self) -> int | None:
        return None if self._min_seq == _NO_SEQ else self._min_seq

    @property
    def max_seq(self) -> int | None:
        return None if self._max_seq < 0 else self._max_seq

    def is_empty(self) -> bool:
        return not self._data

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Sorted ENTRY_SCHEMA batches of ``[start, end)`` as of the call (see module docstring)."""
        snapshot = self._data.copy()
        keys = list(snapshot)
        if not keys:
            return iter(())
        key_arr = pa.array(keys, pa.binary())
        if start is not None or end is not None:
            mask = _range_mask(key_arr, start, end)
            selected = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            if len(selected) == 0:
                return iter(())
            if len(selected) < len(keys):
                key_arr = key_arr.take(pa.array(selected))
                keys = list(map(keys.__getitem__, selected.tolist()))
        entries = list(map(snapshot.__getitem__, keys))
        batch = _sorted_batch(_entries_batch(key_arr, entries))
        return _chunks(batch, SCAN_CHUNK_ROWS)

    def freeze(self) -> ImmutableMemtable:
        """Stop taking writes and hand the entries over; O(1), the sort happens on first use.

        Cheap because the Db calls it under its writer lock; the flusher thread pays for building
        the sorted batch. Calling it again returns the same ImmutableMemtable.
        """
        if self._frozen is None:
            data = self._data
            assert isinstance(data, dict)
            self._frozen = ImmutableMemtable(
                data,
                last_wal_id=self.last_wal_id,
                size_bytes=self.size_bytes,
                min_seq=self.min_seq,
                max_seq=self.max_seq,
            )
            self._data = MappingProxyType(data)
        return self._frozen


class ImmutableMemtable:
    """A frozen memtable waiting for its flush: dict for point reads, sorted batch for scans."""

    __slots__ = ("_batch", "_data", "_lock", "last_wal_id", "max_seq", "min_seq", "size_bytes")

    def __init__(
        self,
        data: dict[bytes, Entry],
        *,
        last_wal_id: int,
        size_bytes: int,
        min_seq: int | None,
        max_seq: int | None,
    ) -> None:
        self._data = data
        self._batch: pa.RecordBatch | None = None
        self._lock = threading.Lock()
        self.last_wal_id = last_wal_id
        self.size_bytes = size_bytes
        self.min_seq = min_seq
        self.max_seq = max_seq

    @property
    def entry_count(self) -> int:
        return len(self._data)

    @property
    def batch(self) -> pa.RecordBatch:
        """All entries sorted by key (ENTRY_SCHEMA), built once, by whichever thread asks first."""
        b = self._batch
        if b is None:
            with self._lock:
                b = self._batch
                if b is None:
                    data = self._data
                    if not data:
                        b = empty_batch()
                    else:
                        keys = pa.array(list(data), pa.binary())
                        b = _sorted_batch(_entries_batch(keys, list(data.values())))
                    self._batch = b
        return b

    def get(self, key: bytes) -> Entry | None:
        return self._data.get(key)

    def overlaid(self, newer: ImmutableMemtable) -> ImmutableMemtable:
        """A new table with this table's entries and ``newer``'s on top (``newer`` wins per key).

        Neither input changes, so states that hold them keep reading them: this is how a reader
        merges its replayed WAL tables without ever writing to a published one. One dict copy plus
        one pass over ``newer``; the sorted batch is built on first use, as for any frozen table.
        """
        data = self._data.copy()
        fresh = newer._data
        olds = list(map(data.get, fresh))
        data.update(fresh)
        size = self.size_bytes + newer.size_bytes
        for k, o in zip(fresh, olds, strict=True):
            if o is not None:
                size -= len(k) + ENTRY_OVERHEAD + (0 if o[1] is None else len(o[1]))
        lows = [s for s in (self.min_seq, newer.min_seq) if s is not None]
        highs = [s for s in (self.max_seq, newer.max_seq) if s is not None]
        return ImmutableMemtable(
            data,
            last_wal_id=max(self.last_wal_id, newer.last_wal_id),
            size_bytes=size,
            min_seq=min(lows) if lows else None,
            max_seq=max(highs) if highs else None,
        )

    def scan(
        self, start: bytes | None = None, end: bytes | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Zero-copy slices of the sorted batch covering ``[start, end)``, ~64k rows each."""
        batch = self.batch
        if start is None and end is None:
            return _chunks(batch, SCAN_CHUNK_ROWS)
        keys = batch.column(0)
        lo = 0 if start is None else search_sorted(keys, start, "left")
        hi = batch.num_rows if end is None else search_sorted(keys, end, "left")
        return _chunks(batch.slice(lo, max(0, hi - lo)), SCAN_CHUNK_ROWS)


def _total_length(col: pa.Array) -> int:
    """Bytes held by the non-null values of a binary column, without touching them."""
    total = pc.sum(pc.binary_length(col)).as_py()
    return int(total or 0)


def _range_mask(keys: pa.Array, start: bytes | None, end: bytes | None) -> pa.Array:
    conds = []
    if start is not None:
        conds.append(pc.greater_equal(keys, pa.scalar(start, pa.binary())))
    if end is not None:
        conds.append(pc.less(keys, pa.scalar(end, pa.binary())))
    return conds[0] if len(conds) == 1 else pc.and_(conds[0], conds[1])


def _entries_batch(keys: pa.Array, entries: list[Entry]) -> pa.RecordBatch:
    """Unsorted ENTRY_SCHEMA batch from dict entries; tombstones get kind 1 and a null value."""
    seqs = np.fromiter(map(itemgetter(0), entries), dtype=np.uint64, count=len(entries))
    values = pa.array(list(map(itemgetter(1), entries)), pa.binary())
    kinds = pc.cast(pc.is_null(values), pa.uint8())
    return pa.RecordBatch.from_arrays([keys, pa.array(seqs), kinds, values], schema=ENTRY_SCHEMA)


def _sorted_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Sort a batch whose keys are already unique (they come from a dict)."""
    skeys = sortable_keys([batch.column(0)])
    if skeys is not None:
        order = pa.array(unique_key_order(skeys))
    else:
        order = pc.sort_indices(batch.column(0))
    return batch.take(order)


def unique_key_order(skeys: npt.NDArray[np.bytes_]) -> npt.NDArray[np.intp]:
    """The order that sorts ``skeys`` (distinct byte strings of one width, ordered as bytes).

    Keys are first sorted by their first 8 bytes as a big-endian u64, which orders them as the
    bytes do and sorts several times faster than the strings; that is the answer when no two of
    those prefixes are equal (random or hashed keys). Otherwise the strings are sorted whole."""
    n, width = len(skeys), skeys.dtype.itemsize
    if n < 2 or width < 8:
        return np.argsort(skeys)
    raw = skeys.view(np.uint8).reshape(n, width)
    prefix = np.ascontiguousarray(raw[:, :8]).view(">u8").ravel().astype(np.uint64)
    order = np.argsort(prefix)
    ordered = prefix[order]
    if bool(np.any(ordered[1:] == ordered[:-1])):
        return np.argsort(skeys)
    return order


def _chunks(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    for off in range(0, batch.num_rows, rows):
        yield batch.slice(off, rows)


__all__ = ["ENTRY_OVERHEAD", "Entry", "ImmutableMemtable", "Memtable"]
