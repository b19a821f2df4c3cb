"""Routing rows to shards and to Spark partitions, vectorised (numpy over Arrow buffers).

* :func:`route_keys`: the shard index of every key, one binary search per key when all keys
  have one width (the usual case), else :meth:`ShardMap.route`;
* :func:`take_rows` / :func:`sorted_rows`: gathers and sorts of ``(key, value)`` batches that use
  NumPy's fixed-width ``S<n>`` views where they can;
* :func:`spark_hash_long` / :func:`partition_keys`: Spark's Murmur3 hash partitioning reproduced,
  so the driver knows which partition key sends a shard's rows to which partition.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.entries import binary_buffers, sortable_keys
from slatedb_core.errors import InvalidArgument
from slatedb_core.table import ShardMap

ENTRY_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
"""The ``(key, value)`` rows both stages pass around (a null value deletes)."""


def fixed_width(arr: pa.Array) -> int | None:
    """The width of every value of a binary array without nulls, if they all have the same."""
    if arr.null_count or not len(arr) or not pa.types.is_binary(arr.type):
        return None
    offs, _ = binary_buffers(arr)
    width = int(offs[1] - offs[0])
    if width <= 0 or int(offs[-1] - offs[0]) != width * len(arr):
        return None
    return width if bool(np.all(np.diff(offs) == width)) else None


def fixed_view(arr: pa.Array, width: int) -> np.ndarray:
    """The values of a fixed-width binary array as a NumPy ``S<width>`` array (no copy); NumPy
    orders equal-width ``S`` values byte by byte, like the keys."""
    offs, data = binary_buffers(arr)
    return data[int(offs[0]) : int(offs[-1])].view(f"S{width}")


def route_keys(shard_map: ShardMap, keys: pa.Array) -> np.ndarray:
    """``shard_map.route(keys)`` as NumPy. Keys of one width w (the usual case) take one binary
    search each among the split points zero-padded to w: for a split point of at most w bytes,
    ``key >= split`` exactly when ``key >= split + zeros``, as a key of w bytes that starts with
    the split point is never below the padding."""
    splits = shard_map.split_points
    width = fixed_width(keys)
    if splits and width is not None and max(len(s) for s in splits) <= width:
        padded = np.array(splits, dtype=f"S{width}")
        return np.searchsorted(padded, fixed_view(keys, width), side="right")
    out: np.ndarray = shard_map.route(keys).to_numpy(zero_copy_only=False)
    return out


def take_binary(arr: pa.Array, order: np.ndarray) -> pa.Array:
    width = fixed_width(arr)
    if width is None:
        return arr.take(pa.array(order))
    data = fixed_view(arr, width)[order]  # NumPy gathers fixed-width rows much faster
    offsets = np.arange(0, width * len(order) + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(
        arr.type, len(order), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def take_rows(batch: pa.RecordBatch, order: np.ndarray) -> pa.RecordBatch:
    """``batch.take(order)`` for an ENTRY_SCHEMA batch and a permutation ``order`` of its rows
    (so the fixed-width path's int32 offsets hold: the data is as large as the input's)."""
    return pa.RecordBatch.from_arrays(
        [take_binary(batch.column(0), order), take_binary(batch.column(1), order)],
        schema=ENTRY_SCHEMA,
    )


def sorted_rows(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """One shard's rows as one ENTRY_SCHEMA batch sorted by key (duplicate keys adjacent, in no
    particular order): bulk_ingest then finds them sorted and writes them without another copy."""
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=ENTRY_SCHEMA)
    rows = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
    if rows.num_rows < 2:
        return rows
    keys = rows.column(0)
    width = fixed_width(keys)
    skeys = fixed_view(keys, width) if width is not None else sortable_keys([keys])
    if skeys is not None:
        order = np.argsort(skeys)
    else:
        order = pc.sort_indices(keys).to_numpy()
    return take_rows(rows, order)


# ---- Spark's hash partitioning ------------------------------------------------------------------


_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k1: int) -> int:
    return (_rotl32((k1 * 0xCC9E2D51) & _M32, 15) * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl32(h1 ^ k1, 13) * 5 + 0xE6546B64) & _M32


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash(bigint)``: Murmur3_x86_32.hashLong, as a signed 32-bit int."""
    h1 = _mix_h1(seed & _M32, _mix_k1(value & _M32))
    h1 = _mix_h1(h1, _mix_k1((value >> 32) & _M32)) ^ 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(partitions: int) -> tuple[int, ...]:
    """For each partition p, a bigint that ``repartition(partitions, col)`` sends to p.

    ``repartition(n, col)`` places a row in ``pmod(hash(col), n)`` (Murmur3, seed 42, the same
    function as SQL's ``hash``; reproduced by :func:`spark_hash_long`), so the first small id
    landing in each partition is kept. With one shard per partition, every task writes one shard
    and no two shards share a task by accident of hashing.
    """
    if partitions < 1:
        raise InvalidArgument(f"partitions must be >= 1, got {partitions}")
    found: dict[int, int] = {}
    for candidate in range(1 << 24):
        found.setdefault(spark_hash_long(candidate) % partitions, candidate)
        if len(found) == partitions:
            return tuple(found[p] for p in range(partitions))
    raise InvalidArgument(f"no hash key found for every one of {partitions} partitions")
