"""Memtable, sort_dedup and k-way merge benchmarks. Prints figures; asserts nothing.

1. Memtable: single ``put`` rate (1M puts, 16-byte keys, 100-byte values), ``put_many`` and
   ``put_batch`` rates, ``get`` rate, ``freeze`` + sorted batch build.
2. ``sort_dedup`` of 1M rows (16-byte keys, half of them repeated).
3. ``merge_sorted`` throughput: 4 sources of 500k rows with 50% key overlap, 1 source of 2M rows,
   and 4 sources with disjoint key ranges (the no-overlap fast path).

Every figure is the best of ``--reps`` runs, because the numbers are meant to show what the code
costs, not how busy the machine was.

Usage: python bench/merge_bench.py [--rows 1000000] [--reps 3] [--source-batch 65536]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slatedb_core.lsm.entries import ENTRY_SCHEMA, sort_dedup, sortable_keys
from slatedb_core.lsm.iterators import iter_rows, merge_sorted
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable

KEY_LEN = 16
VALUE_LEN = 100


def best_of(reps: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def random_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=(n, KEY_LEN), dtype=np.uint8)


def binary_array(rows: np.ndarray) -> pa.Array:
    """A binary array straight from a (n, width) uint8 matrix, without Python objects."""
    n, width = rows.shape
    offsets = np.arange(0, n * width + 1, width, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))]
    )


def entry_batch(
    key_rows: np.ndarray, seq0: int, rng: np.random.Generator, tombstones: float = 0.0
) -> pa.RecordBatch:
    n = len(key_rows)
    values = rng.integers(0, 256, size=(n, VALUE_LEN), dtype=np.uint8)
    kinds = (rng.random(n) < tombstones).astype(np.uint8)
    return pa.RecordBatch.from_arrays(
        [
            binary_array(key_rows),
            pa.array(np.arange(seq0, seq0 + n, dtype=np.uint64)),
            pa.array(kinds),
            binary_array(values),
        ],
        schema=ENTRY_SCHEMA,
    )


def sorted_source(
    key_rows: np.ndarray, seq0: int, rng: np.random.Generator, tombstones: float = 0.0
) -> pa.RecordBatch:
    batch = entry_batch(key_rows, seq0, rng, tombstones)
    skeys = sortable_keys([batch.column(0)])
    assert skeys is not None
    return batch.take(pa.array(np.argsort(skeys, kind="stable")))


def chunks(batch: pa.RecordBatch, rows: int) -> list[pa.RecordBatch]:
    return [batch.slice(i, rows) for i in range(0, batch.num_rows, rows)]


def bench_memtable(n: int, reps: int, rng: np.random.Generator) -> None:
    print(f"\n## memtable ({n:,} entries, {KEY_LEN}-byte keys, {VALUE_LEN}-byte values)")
    keys = [bytes(r) for r in random_keys(rng, n)]
    value = bytes(VALUE_LEN)
    seqs = list(range(1, n + 1))
    values: list[bytes | None] = [value] * n

    def loop_only() -> None:
        for _k, _s in zip(keys, seqs, strict=True):
            pass

    def single_puts() -> Memtable:
        m = Memtable()
        put = m.put
        for k, s in zip(keys, seqs, strict=True):
            put(k, s, value)
        return m

    base = best_of(reps, loop_only)
    total = best_of(reps, single_puts)
    work = max(total - base, 1e-9)
    print(
        f"put (single)      {n / total:>12,.0f} puts/s incl. loop   {n / work:>12,.0f} puts/s "
        f"memtable work ({work / n * 1e9:.0f} ns/put)"
    )
    t = best_of(reps, lambda: Memtable().put_many(keys, seqs, values))
    print(f"put_many          {n / t:>12,.0f} rows/s")
    batch = entry_batch(random_keys(rng, n), 1, rng)
    t = best_of(reps, lambda: Memtable().put_batch(batch))
    print(f"put_batch         {n / t:>12,.0f} rows/s")
    m = single_puts()
    get = m.get

    def gets() -> None:
        for k in keys:
            get(k)

    t = best_of(reps, gets)
    print(f"get (hit)         {n / t:>12,.0f} gets/s incl. loop ({t / n * 1e9:.0f} ns/get)")
    data = dict(m._data)

    def build_sorted_batch() -> pa.RecordBatch:
        return ImmutableMemtable(data, last_wal_id=0, size_bytes=0, min_seq=1, max_seq=n).batch

    t = best_of(reps, build_sorted_batch)
    print(f"frozen -> sorted  {n / t:>12,.0f} rows/s (ImmutableMemtable.batch, {t * 1000:.0f} ms)")
    t = best_of(reps, lambda: sum(b.num_rows for b in m.scan(b"\x40", b"\x80")))
    print(f"scan 1/4 range    {t * 1000:>12.1f} ms on the active memtable (copy + sort)")


def bench_sort_dedup(n: int, reps: int, rng: np.random.Generator) -> None:
    print(f"\n## sort_dedup ({n:,} rows, {KEY_LEN}-byte keys, each key twice)")
    half = random_keys(rng, n // 2)
    batch = entry_batch(np.concatenate([half, half]), 1, rng)
    t = best_of(reps, lambda: sort_dedup(batch))
    print(f"wal-ordered seqs  {n / t:>12,.0f} rows/s ({t * 1000:.0f} ms)")
    shuffled = batch.take(pa.array(rng.permutation(n)))
    t = best_of(reps, lambda: sort_dedup(shuffled))
    print(f"shuffled seqs     {n / t:>12,.0f} rows/s ({t * 1000:.0f} ms)")


def run_merge(label: str, sources: list[list[pa.RecordBatch]], reps: int) -> None:
    in_rows = sum(b.num_rows for s in sources for b in s)
    out_rows = 0

    def merge() -> None:
        nonlocal out_rows
        out_rows = sum(b.num_rows for b in merge_sorted(sources))

    t = best_of(reps, merge)
    print(
        f"{label:<34} {out_rows / t:>12,.0f} rows/s out  {in_rows / t:>12,.0f} rows/s in  "
        f"({in_rows:,} in, {out_rows:,} out, {t * 1000:.0f} ms)"
    )


def bench_merge(rows: int, reps: int, source_batch: int, rng: np.random.Generator) -> None:
    per = rows // 2
    print(f"\n## merge_sorted (source batches of {source_batch:,} rows)")
    shared = random_keys(rng, per)
    sources = []
    for i in range(4):
        mine = np.concatenate(
            [shared[rng.choice(per, per // 2, replace=False)], random_keys(rng, per - per // 2)]
        )
        sources.append(chunks(sorted_source(mine, 1 + i * per, rng, 0.05), source_batch))
    run_merge(f"4 x {per:,}, 50% overlap, 5% tomb", sources, reps)
    one = sorted_source(random_keys(rng, rows * 2), 1, rng)
    run_merge(f"1 x {rows * 2:,} (zero-copy)", [chunks(one, source_batch)], reps)
    tomb = sorted_source(random_keys(rng, rows * 2), 1, rng, 0.05)
    run_merge(f"1 x {rows * 2:,}, 5% tombstones", [chunks(tomb, source_batch)], reps)
    disjoint = [chunks(one.slice(i * per, per), source_batch) for i in range(4)]
    run_merge(f"4 x {per:,}, disjoint ranges", disjoint, reps)
    small = [[b for big in s for b in chunks(big, 64)] for s in sources]
    run_merge(f"4 x {per:,}, 50% overlap, 64-row batches", small, max(1, reps - 1))
    t = best_of(reps, lambda: sum(1 for _ in iter_rows(merge_sorted(sources))))
    print(
        f"{'iter_rows(4-way merge)':<34} {sum(1 for _ in iter_rows(merge_sorted(sources))) / t:>12,.0f}"
        " (key, value) pairs/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--source-batch", type=int, default=65536)
    args = ap.parse_args()
    rng = np.random.default_rng(42)
    bench_memtable(args.rows, args.reps, rng)
    bench_sort_dedup(args.rows, args.reps, rng)
    bench_merge(args.rows, args.reps, args.source_batch, rng)


if __name__ == "__main__":
    main()
