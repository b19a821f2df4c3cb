"""SST format benchmarks. Prints figures; asserts nothing.

1. encode of N entries (16-byte keys, 100-byte values) per codec: entries/s and MB/s
2. full decode (``read_all``) from memory, and a scan through a ``memory://`` store
3. point gets from cached blocks (present keys) and gets of absent keys (bloom rejects)
4. bloom filter: build time for N keys and its measured false-positive rate

Usage: python bench/sst_bench.py [--entries 1000000] [--codecs none,lz4,zstd] [--gets 200000]
       [--profile encode|decode|get]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slatedb_core.sst import ENTRY_SCHEMA, BlockCache, SstOptions, SstReader, encode_sst
from slatedb_core.sst.bloom import BloomFilter, build_bloom, hash_keys
from slatedb_core.store.url import open_store

T = TypeVar("T")


def make_batch(n: int, key_len: int = 16, value_len: int = 100, seed: int = 0) -> pa.RecordBatch:
    """Sorted unique fixed-width keys: an 8-byte big-endian counter (step 2, so odd ones are absent)
    behind a constant prefix; random values; every 10th entry a tombstone."""
    rng = np.random.default_rng(seed)
    keys = np.zeros((n, key_len), dtype=np.uint8)
    keys[:, : key_len - 8] = ord("k")
    counter = (np.arange(n, dtype=np.uint64) * 2).astype(">u8")
    keys[:, key_len - 8 :] = counter.view(np.uint8).reshape(n, 8)
    kinds = (np.arange(n) % 10 == 9).astype(np.uint8)
    vlens = np.where(kinds == 1, 0, value_len).astype(np.int32)
    voffs = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(vlens, out=voffs[1:])
    values = rng.integers(0, 256, int(voffs[-1]), dtype=np.uint8)
    koffs = (np.arange(n + 1) * key_len).astype(np.int32)
    arrays = [
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(koffs), pa.py_buffer(keys)]),
        pa.array(np.arange(1, n + 1, dtype=np.uint64)),
        pa.array(kinds),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(voffs), pa.py_buffer(values)]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ENTRY_SCHEMA)


def timed(fn: Callable[[], T], reps: int = 3) -> tuple[float, T]:
    best = float("inf")
    result: T
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def line(label: str, seconds: float, items: int, nbytes: int | None = None) -> None:
    rate = items / seconds
    extra = f"  {nbytes / seconds / 1e6:8.0f} MB/s" if nbytes is not None else ""
    print(f"  {label:<38} {seconds * 1e3:9.1f} ms  {rate / 1e6:7.2f} M/s{extra}")


def bench_codec(batch: pa.RecordBatch, codec: str, gets: int) -> None:
    n = batch.num_rows
    raw_bytes = batch.nbytes
    print(f"\n## codec={codec}  entries={n:,}  input={raw_bytes / 1e6:.0f} MB")
    opts = SstOptions(compression=codec)
    secs, (data, info) = timed(lambda: encode_sst(batch, opts))
    line("encode", secs, n, raw_bytes)
    print(
        f"  object {len(data) / 1e6:.1f} MB, index {info.index_len / 1e3:.1f} KB, "
        f"filter {info.filter_len / 1e3:.1f} KB"
    )

    secs, table = timed(lambda: SstReader.from_bytes(data, "bench").read_all())
    line("decode read_all (from bytes)", secs, n, raw_bytes)
    assert table.num_rows == n

    store = open_store("memory://")
    store.put("sst", data)

    def scan_store() -> int:
        reader = SstReader.open(store, "sst", info)
        return sum(b.num_rows for b in reader.scan())

    store.counters.reset()
    secs, rows = timed(scan_store)
    gets_per_scan = store.counters.snapshot()["get"] // 3
    line(f"scan via memory:// ({gets_per_scan} GETs)", secs, rows, raw_bytes)

    cache = BlockCache(1 << 30)
    reader = SstReader.open(store, "sst", info, cache=cache)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, n, gets)
    probe = [(int(i) * 2).to_bytes(8, "big") for i in idx]
    present = [b"k" * 8 + p for p in probe]
    for key in present:  # warm the cache
        reader.get(key)
    secs, found = timed(lambda: sum(reader.get(k) is not None for k in present), reps=1)
    line("get present (cached blocks)", secs, len(present))
    absent = [b"k" * 8 + (int(i) * 2 + 1).to_bytes(8, "big") for i in idx]
    secs, _ = timed(lambda: sum(reader.get(k) is not None for k in absent), reps=1)
    line("get absent (bloom)", secs, len(absent))
    assert found == len(present)


def bench_bloom(batch: pa.RecordBatch) -> None:
    keys = batch.column(0)
    n = len(keys)
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8)
    offs = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1).astype(np.int64)
    print(f"\n## bloom filter, {n:,} keys, 10 bits/key")
    secs, hashes = timed(lambda: hash_keys(data, offs))
    line("hash keys", secs, n)
    secs, filt = timed(lambda: build_bloom(hashes, 10))
    line("build bits", secs, n)
    secs, _ = timed(lambda: build_bloom(hash_keys(data, offs), 10))
    line("hash + build", secs, n)
    bf = BloomFilter("bench", filt)
    probes = [b"k" * 8 + (2 * i + 1).to_bytes(8, "big") for i in range(200_000)]
    secs, fp = timed(lambda: sum(bf.may_contain(k) for k in probes), reps=1)
    line("single-key probes", secs, len(probes))
    print(f"  false-positive rate {fp / len(probes):.4%} ({len(filt) / n * 8:.2f} bits/key)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--codecs", default="none,lz4,zstd")
    ap.add_argument("--gets", type=int, default=200_000)
    ap.add_argument("--profile", choices=["encode", "decode", "get"])
    args = ap.parse_args()
    t0 = time.perf_counter()
    batch = make_batch(args.entries)
    print(f"generated {args.entries:,} entries in {time.perf_counter() - t0:.2f} s")
    if args.profile:
        profile(batch, args.profile)
        return
    for codec in args.codecs.split(","):
        bench_codec(batch, codec, args.gets)
    bench_bloom(batch)


def profile(batch: pa.RecordBatch, what: str) -> None:
    from pyinstrument import Profiler

    data, info = encode_sst(batch)
    reader = SstReader.from_bytes(data, "p")
    keys = [batch.column(0)[i].as_py() for i in range(0, batch.num_rows, 7)]
    profiler = Profiler(interval=0.0005)
    with profiler:
        if what == "encode":
            encode_sst(batch)
        elif what == "decode":
            reader.read_all()
        else:
            store = open_store("memory://")
            store.put("p", data)
            cached = SstReader.open(store, "p", info, cache=BlockCache(1 << 30))
            for k in keys:
                cached.get(k)
    print(profiler.output_text(unicode=False, color=False))


if __name__ == "__main__":
    main()
