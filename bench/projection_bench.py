"""Projection benchmark (docs/projection-and-union.md): a database of N rows is projected into 4
shards (clones with
a key range); then point reads per second and a full scan against one projected shard next to the
original. Prints figures; asserts nothing.

Usage: python bench/projection_bench.py [--rows 10000000] [--gets 50000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slatedb_core import Db, DbOptions, KeyRange, open_store
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader


def table(n: int, start: int) -> pa.Table:
    # 16-byte keys "k%015d" spread evenly, 100-byte values
    keys = np.char.encode(
        np.char.add("k", np.char.zfill(np.arange(start, start + n).astype(str), 15))
    )
    vals = np.full(n, b"v" * 100, dtype="S100")
    return pa.table(
        {"key": pa.array(keys.tolist(), pa.binary()), "value": pa.array(vals.tolist(), pa.binary())}
    )


def gets_per_s(reader: DbReader, keys: list[bytes]) -> float:
    t = time.perf_counter()
    for k in keys:
        assert reader.get(k) is not None
    return len(keys) / (time.perf_counter() - t)


def scan_rows_per_s(reader: DbReader) -> tuple[int, float]:
    t = time.perf_counter()
    n = sum(b.num_rows for b in reader.scan_arrow())
    return n, n / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--gets", type=int, default=50_000)
    a = p.parse_args()
    d = tempfile.mkdtemp(prefix="slatedb-proj-")
    store = open_store(d)
    t = time.perf_counter()
    with Db.open("orig", store, DbOptions()) as db:
        chunk = 1_000_000
        for s in range(0, a.rows, chunk):
            db.bulk_ingest(table(min(chunk, a.rows - s), s))
    print(f"ingest {a.rows:,} rows (bulk_ingest): {time.perf_counter() - t:.1f} s")
    bounds = [f"k{(a.rows * i // 4):015d}".encode() for i in range(1, 4)]
    ranges = [
        KeyRange(None, bounds[0]),
        KeyRange(bounds[0], bounds[1]),
        KeyRange(bounds[1], bounds[2]),
        KeyRange(bounds[2], None),
    ]
    t = time.perf_counter()
    store.counters.reset()
    for i, r in enumerate(ranges):
        create_clone(f"shard{i}", "orig", store, projection=r)
    print(
        f"project into 4 shards: {time.perf_counter() - t:.2f} s, "
        f"{store.counters.total()} object-store requests"
    )
    rng = np.random.default_rng(0)
    shard_ids = rng.integers(a.rows // 4, a.rows // 2, a.gets)
    keys = [f"k{i:015d}".encode() for i in shard_ids]  # all inside shard 1
    opts = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST, checkpoint_lifetime=None)
    with (
        DbReader.open("orig", store, options=opts) as orig,
        DbReader.open("shard1", store, options=opts) as shard,
    ):
        for name, reader in (("original", orig), ("shard 1", shard)):
            gets_per_s(reader, keys[:2000])  # warm the block cache
            print(f"{name:>9}: {gets_per_s(reader, keys):>10,.0f} gets/s (keys in shard 1)")
        for name, reader in (("original", orig), ("shard 1", shard)):
            n, rate = scan_rows_per_s(reader)
            print(f"{name:>9}: full scan {n:>12,} rows at {rate:>12,.0f} rows/s")


if __name__ == "__main__":
    main()
