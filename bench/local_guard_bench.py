"""The cost of resolving every key of a ``file://`` store beneath its root with no link on the
way (issue 39, item 4; SECURITY.md), on the hot read path: many small ranged GETs of one SST.

Two figures, each the best of ``--reps`` runs over a warm page cache:

* ``get_range``: ``store.get(sst, byte_range=...)`` of 4 KiB blocks at random offsets of one
  compacted SST (what a reader with a cold block cache does per block);
* ``db.get (no block cache)``: point gets of random keys from a reader whose block cache is off,
  so every get reads its block from the store.

    .venv/bin/python bench/local_guard_bench.py [--gets 20000] [--reps 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import make_table
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


def best(fn: object, n: int, reps: int) -> float:
    """Best per-call time of ``fn`` in microseconds."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - t) / n * 1e6)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--gets", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    table = make_table(args.rows, rng)
    keys = table.column("key").to_pylist()
    root = tempfile.mkdtemp(prefix="local-guard-bench-")
    store = open_store(f"file://{root}/lake", sync="false")
    with Db.open("db", store, DbOptions(block_cache_bytes=0)) as db:
        db.put_arrow(table)
        db.flush_memtable()
        ssts = [m for m in store.list("db/compacted") if m.path.endswith(".sst")]
        sst = max(ssts, key=lambda m: m.size)
        offsets = rng.integers(0, sst.size - 4096, args.gets).tolist()

        def ranges() -> None:
            get = store.get
            for o in offsets:
                get(sst.path, byte_range=(o, o + 4096))

        gk = [keys[i] for i in rng.integers(0, len(keys), args.gets)]

        def gets() -> None:
            get = db.get
            for k in gk:
                get(k)

        ranges()
        gets()  # warm
        print(f"SST {sst.path} {sst.size} bytes; {args.gets} calls, best of {args.reps}")
        print(f"get_range 4 KiB        {best(ranges, len(offsets), args.reps):8.2f} us/call")
        print(f"db.get (no block cache) {best(gets, len(gk), args.reps):8.2f} us/call")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
