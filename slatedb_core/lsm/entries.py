"""The in-memory entry representation shared by the memtable, the merge iterators and the SSTs.

Entries travel as Arrow record batches (``ENTRY_SCHEMA``) so that sorting, deduplication, merging
and range slicing run as vectorised kernels instead of per-row Python. ``kind`` is authoritative for
tombstones: their ``value`` may be null (memtable) or empty (SST), and readers must not care which.

Sorting binary keys is the expensive step everywhere, and Arrow's comparison sort on variable-width
binary is several times slower than NumPy's sort on fixed-width byte strings, which is also a
timsort that exploits already-sorted runs (exactly what a k-way merge feeds it). So keys are turned
into an order-preserving fixed-width NumPy ``S`` array when that is cheap (see
:func:`sortable_keys`), with Arrow's sort as the fallback for very wide keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument

# One definition, owned by the SST format (the on-disk columns); re-exported for the engine.
from slatedb_core.sst.format import ENTRY_SCHEMA, KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE

# The user-facing rows of ``put_arrow``, ``scan_arrow`` and bulk ingest: a key and a nullable
# value (null deletes the key).
KV_SCHEMA = pa.schema(
    [pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary())]
)

__all__ = ["ENTRY_SCHEMA", "KIND_MERGE", "KIND_TOMBSTONE", "KIND_VALUE"]

# Variable-width keys are zero-padded to the widest key for the NumPy sort; past this width the
# padding costs more memory than Arrow's slower sort costs time.
_MAX_PADDED_WIDTH = 64
_MAX_PADDED_BYTES = 256 << 20

Indices = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def empty_batch() -> pa.RecordBatch:
    """An ENTRY_SCHEMA batch with no rows, for "nothing here" without special-casing None."""
    return pa.RecordBatch.from_pylist([], schema=ENTRY_SCHEMA)


def batch_from_lists(
    keys: Sequence[bytes],
    seqs: Sequence[int],
    kinds: Sequence[int],
    values: Sequence[bytes | None],
) -> pa.RecordBatch:
    """Build a batch from parallel Python columns (tests, WAL replay); no sorting is done."""
    if not len(keys) == len(seqs) == len(kinds) == len(values):
        raise InvalidArgument("batch_from_lists: columns differ in length")
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(seqs, pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def conform(data: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """Bring foreign Arrow data (column order, large_binary, int64 seqs, chunking) to ENTRY_SCHEMA.

    Bulk ingest hands us whatever its producer made; failing loudly here beats a confusing error deep
    inside a kernel, and a batch already in ENTRY_SCHEMA passes through without a copy.
    """
    if isinstance(data, pa.Table):
        batches = data.combine_chunks().to_batches()
        data = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=data.schema)
    if data.schema.equals(ENTRY_SCHEMA):
        if data.column(0).null_count:
            raise InvalidArgument("entry keys must not be null")
        return data
    cols: list[pa.Array] = []
    for field in ENTRY_SCHEMA:
        idx = data.schema.get_field_index(field.name)
        if idx < 0:
            raise InvalidArgument(f"entries have no {field.name!r} column (schema: {data.schema})")
        col = data.column(idx)
        if col.type != field.type:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise InvalidArgument(
                    f"entry column {field.name!r} must be {field.type}: {e}"
                ) from None
        if field.name != "value" and col.null_count:
            raise InvalidArgument(f"entry column {field.name!r} must not contain nulls")
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=ENTRY_SCHEMA)


def binary_buffers(arr: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Zero-copy (offsets, data) views of a binary array, offsets rebased to index ``data``.

    Reading keys straight from the Arrow buffers lets hot loops avoid materialising pa.Scalars.
    """
    n = len(arr)
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    if pa.types.is_binary(arr.type):
        width: np.dtype[np.signedinteger[Any]] = np.dtype(np.int32)
    elif pa.types.is_large_binary(arr.type):
        width = np.dtype(np.int64)
    else:
        raise InvalidArgument(f"expected a binary array, got {arr.type}")
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], dtype=width, count=n + 1, offset=arr.offset * width.itemsize)
    data_buf = bufs[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None and data_buf.size
        else np.zeros(0, dtype=np.uint8)
    )
    return offs.astype(np.int64, copy=False), data


def sortable_keys(chunks: Sequence[pa.Array]) -> npt.NDArray[np.bytes_] | None:
    """The concatenated keys as a fixed-width NumPy ``S`` array ordered exactly like the bytes.

    When every key has the same width the ``S`` view is the raw data (numpy compares ``S`` values of
    equal width byte by byte, embedded and trailing zeros included). Otherwise keys are zero-padded
    to the widest and followed by their 2-byte big-endian length: padding alone would make ``b"a"``
    equal ``b"a\\0"``, and the length suffix breaks exactly those ties in favour of the shorter key,
    which is lexicographic order. Returns None when that padding would be too big (or keys are
    empty), so callers fall back to Arrow's sort.
    """
    parts = [binary_buffers(c) for c in chunks if len(c)]
    if not parts:
        return None
    widths = set()
    uniform = True
    max_len = 0
    for offs, _ in parts:
        lens = np.diff(offs)
        lo, hi = int(lens.min()), int(lens.max())
        max_len = max(max_len, hi)
        widths.add(hi)
        uniform = uniform and lo == hi
    if uniform and len(widths) == 1 and max_len > 0:
        views = [data[offs[0] : offs[-1]].view(f"S{max_len}") for offs, data in parts]
        return views[0] if len(views) == 1 else np.concatenate(views)
    n = sum(len(offs) - 1 for offs, _ in parts)
    width = max_len + 2
    if max_len > _MAX_PADDED_WIDTH or n * width > _MAX_PADDED_BYTES:
        return None
    out = np.zeros((n, width), dtype=np.uint8)
    row0 = 0
    for offs, data in parts:
        rows = len(offs) - 1
        lens = np.diff(offs)
        total = int(offs[-1] - offs[0])
        if total:
            row_of_byte = np.repeat(np.arange(row0, row0 + rows), lens)
            col_of_byte = np.arange(total) - np.repeat(offs[:-1] - offs[0], lens)
            out[row_of_byte, col_of_byte] = data[offs[0] : offs[-1]]
        out[row0 : row0 + rows, max_len] = lens >> 8
        out[row0 : row0 + rows, max_len + 1] = lens & 0xFF
        row0 += rows
    return out.view(f"S{width}").reshape(n)


def first_of_runs(sorted_keys: npt.NDArray[np.bytes_]) -> Mask:
    """True at each position whose key differs from the previous one (the first of each key)."""
    first = np.empty(len(sorted_keys), dtype=np.bool_)
    if len(first):
        first[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=first[1:])
    return first


def arrow_first_of_runs(sorted_keys: pa.Array | pa.ChunkedArray) -> Mask:
    """:func:`first_of_runs` for keys that stayed in Arrow (too wide for the NumPy path)."""
    n = len(sorted_keys)
    first = np.ones(n, dtype=np.bool_)
    if n > 1:
        neq = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1))
        if isinstance(neq, pa.ChunkedArray):
            neq = neq.combine_chunks()
        first[1:] = neq.to_numpy(zero_copy_only=False)
    return first


def sort_dedup(data: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """Sort entries by key and keep, per key, the entry with the highest seq.

    WAL flushes and bulk ingest produce unsorted data with repeated keys; this turns them into the
    sorted, unique-key form every other component assumes. Ties are broken by sorting newest-first
    before a stable key sort, so the first row of each key is the one to keep.
    """
    batch = conform(data)
    n = batch.num_rows
    if n == 0:
        return batch
    keys = batch.column(0)
    skeys = sortable_keys([keys])
    if skeys is not None:
        if bool(np.all(skeys[1:] > skeys[:-1])):
            return batch  # already sorted with unique keys (e.g. sorted bulk input): no copy
        seqs = batch.column(1).to_numpy(zero_copy_only=False)
        if n == 1 or bool(np.all(seqs[1:] >= seqs[:-1])):
            newest_first: Indices = np.arange(n - 1, -1, -1, dtype=np.int64)
        else:
            newest_first = np.argsort(seqs, kind="stable")[::-1].astype(np.int64)
        order = newest_first[np.argsort(skeys[newest_first], kind="stable")]
        first = first_of_runs(skeys[order])
    else:
        arrow_order = pc.sort_indices(
            batch, sort_keys=[("key", "ascending"), ("seq", "descending")]
        )
        order = arrow_order.to_numpy().astype(np.int64, copy=False)
        first = arrow_first_of_runs(pc.take(keys, arrow_order))
    keep = order[first]
    if len(keep) == n and bool(np.all(keep[1:] > keep[:-1])):
        return batch  # already sorted and unique: no copy
    return batch.take(pa.array(keep))
