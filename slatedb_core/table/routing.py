"""Routing keys to shards: the index of the shard holding each key of an Arrow array, given the
map's split points (:attr:`slatedb_core.table.shardmap.ShardMap.split_points`), vectorised."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument

_COMPARE_ROUTE_MAX = 32
"""Up to this many split points, :func:`route` compares every key with every split point (one
vectorised pass each); beyond, it sorts the keys once and binary-searches the split points."""


def _as_binary(keys: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        try:
            keys = pa.array(keys, type=pa.binary())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:  # TypeError: not a sequence
            raise InvalidArgument(f"keys must be bytes: {e}") from None
    if pa.types.is_large_binary(keys.type) or pa.types.is_binary(keys.type):
        pass
    elif pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary() if pa.types.is_large_string(keys.type) else pa.binary())
    elif pa.types.is_fixed_size_binary(keys.type) or pa.types.is_binary_view(keys.type):
        keys = keys.cast(pa.binary())
    else:
        raise InvalidArgument(f"keys must be a binary array, got {keys.type}")
    if keys.null_count:
        raise InvalidArgument(f"keys must not be null ({keys.null_count} nulls)")
    return keys


def route(
    split_points: Sequence[bytes], keys: pa.Array | pa.ChunkedArray | Sequence[bytes]
) -> pa.Int32Array:
    """The shard index of every key: the number of split points ``<= key``. Vectorised: either
    one Arrow comparison per split point, or one sort of the keys plus a binary search per split
    point, whichever is cheaper."""
    arr = _as_binary(keys)
    n = len(arr)
    if not split_points or n == 0:
        return pa.array(np.zeros(n, dtype=np.int32))
    if len(split_points) <= _COMPARE_ROUTE_MAX:
        out = np.zeros(n, dtype=np.int32)
        for sp in split_points:
            ge = pc.greater_equal(arr, pa.scalar(sp, arr.type))
            out += ge.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
        return pa.array(out)
    order = pc.sort_indices(arr)
    ordered = arr.take(order)
    cuts = [_lower_bound(ordered, sp) for sp in split_points]
    by_rank = np.repeat(
        np.arange(len(cuts) + 1, dtype=np.int32), np.diff([0, *cuts, n]).astype(np.int64)
    )
    out = np.empty(n, dtype=np.int32)
    out[order.to_numpy()] = by_rank
    return pa.array(out)


def _lower_bound(ordered: pa.Array, key: bytes) -> int:
    """First position in sorted ``ordered`` whose key is ``>= key``."""
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if ordered[mid].as_py() < key:
            lo = mid + 1
        else:
            hi = mid
    return lo
