"""Sorted Arrow rows of memtable entries: dict entries to ENTRY_SCHEMA batches, the unique-key
sort, key-range slices and scan chunks (shared by :mod:`slatedb_core.lsm.memtable`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.entries import ENTRY_SCHEMA, empty_batch, sortable_keys
from slatedb_core.lsm.iterators import search_sorted
from slatedb_core.lsm.memtable_fold import Entry, as_version
from slatedb_core.lsm.row_model import ROW_SCHEMA, concat_rows, has_timestamps, widen


def key_slice(batch: pa.RecordBatch, start: bytes | None, end: bytes | None) -> pa.RecordBatch:
    keys = batch.column(0)
    lo = 0 if start is None else search_sorted(keys, start, "left")
    hi = batch.num_rows if end is None else search_sorted(keys, end, "left")
    return batch.slice(lo, max(0, hi - lo))


def dict_batch(
    snapshot: dict[bytes, Entry], start: bytes | None, end: bytes | None, wide: bool = False
) -> pa.RecordBatch:
    keys = list(snapshot)
    key_arr = pa.array(keys, pa.binary())
    if start is not None or end is not None:
        mask = range_mask(key_arr, start, end)
        selected = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if len(selected) == 0:
            return empty_batch()
        if len(selected) < len(keys):
            key_arr = key_arr.take(pa.array(selected))
            keys = list(map(keys.__getitem__, selected.tolist()))
    entries = list(map(snapshot.__getitem__, keys))
    return sorted_batch(entries_batch(key_arr, entries, wide))


def total_length(col: pa.Array) -> int:
    """Bytes held by the non-null values of a binary column, without touching them."""
    total = pc.sum(pc.binary_length(col)).as_py()
    return int(total or 0)


def range_mask(keys: pa.Array, start: bytes | None, end: bytes | None) -> pa.Array:
    conds = []
    if start is not None:
        conds.append(pc.greater_equal(keys, pa.scalar(start, pa.binary())))
    if end is not None:
        conds.append(pc.less(keys, pa.scalar(end, pa.binary())))
    return conds[0] if len(conds) == 1 else pc.and_(conds[0], conds[1])


def entries_batch(keys: pa.Array, entries: Sequence[Entry], wide: bool = False) -> pa.RecordBatch:
    """Unsorted ENTRY_SCHEMA batch from dict entries; tombstones get kind 1 and a null value.

    ``wide``: some entries may be :class:`~slatedb_core.lsm.row_model.Version` 5-tuples (a TTL,
    a create_ts or a merge operand): the batch is in ROW_SCHEMA, null timestamps for plain
    ``(seq, value)`` entries (the caller knows, so plain memtables never pay for a check)."""
    if wide:
        return _wide_batch(keys, entries)
    seqs = np.fromiter(map(itemgetter(0), entries), dtype=np.uint64, count=len(entries))
    values = pa.array(list(map(itemgetter(1), entries)), pa.binary())
    kinds = pc.cast(pc.is_null(values), pa.uint8())
    return pa.RecordBatch.from_arrays([keys, pa.array(seqs), kinds, values], schema=ENTRY_SCHEMA)


def _wide_batch(keys: pa.Array, entries: Sequence[Entry]) -> pa.RecordBatch:
    versions = [as_version(e) for e in entries]
    seqs = np.fromiter(map(itemgetter(0), versions), dtype=np.uint64, count=len(versions))
    return pa.RecordBatch.from_arrays(
        [
            keys,
            pa.array(seqs),
            pa.array(list(map(itemgetter(1), versions)), pa.uint8()),
            pa.array(list(map(itemgetter(2), versions)), pa.binary()),
            pa.array(list(map(itemgetter(3), versions)), pa.int64()),
            pa.array(list(map(itemgetter(4), versions)), pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )


def sorted_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Sort a batch whose keys are already unique (they come from a dict)."""
    return batch.take(pa.array(unique_batch_order(batch)))


def unique_batch_order(batch: pa.RecordBatch) -> npt.NDArray[np.intp] | npt.NDArray[np.uint64]:
    """The row order that sorts ``batch`` by its keys (column 0), which are distinct: the
    vectorised :func:`unique_key_order` where the keys fit one width, else Arrow's sort."""
    skeys = sortable_keys([batch.column(0)])
    if skeys is not None:
        return unique_key_order(skeys)
    order: npt.NDArray[np.uint64] = pc.sort_indices(batch.column(0)).to_numpy()
    return order


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


def newest_of(sources: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """One key-sorted batch of ``sources`` (key-sorted, key-unique, NEWEST FIRST): for a key in
    several, the earliest source's row. A memtable's entries are final per key (a merge operand
    is folded onto the older entry at its write), so unlike a read's merge nothing is resolved
    here: an operand entry is kept as it is (ROW_SCHEMA when any source is)."""
    rows = concat_rows(
        [widen(b) for b in sources] if any(map(has_timestamps, sources)) else sources
    )
    prio = np.concatenate([np.full(b.num_rows, i, dtype=np.int32) for i, b in enumerate(sources)])
    table = pa.table({"key": rows.column(0), "prio": prio})
    rows = rows.take(pc.sort_indices(table, [("key", "ascending"), ("prio", "ascending")]))
    keys = rows.column(0)
    if len(keys) < 2:
        return rows
    first = pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    mask = pa.concat_arrays([pa.array([True]), first])
    return rows.filter(mask)


def chunks(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    for off in range(0, batch.num_rows, rows):
        yield batch.slice(off, rows)


__all__ = [
    "chunks",
    "dict_batch",
    "entries_batch",
    "key_slice",
    "newest_of",
    "range_mask",
    "sorted_batch",
    "total_length",
    "unique_key_order",
]
