"""Routing to Spark partitions: :func:`spark_hash_long` / :func:`partition_keys` reproduce Spark's
Murmur3 hash partitioning, so the driver knows which partition key sends a shard's staged SSTs to
which partition. (Rows are routed to shards by sorting them: see ``slatedb_core.table.staged``.)
"""

from __future__ import annotations

import pyarrow as pa

from slatedb_core.errors import InvalidArgument

ENTRY_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
"""The ``(key, value)`` rows both stages pass around (a null value deletes)."""


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
