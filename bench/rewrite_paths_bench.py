"""The rewrite paths' speed on TTL-less, merge-less rows (issue 38, item 4): ``bulk_ingest``,
``ingest_ssts`` re-encoding a source and linking one, and a compaction of L0 SSTs into a sorted
run, each the best of ``--reps`` runs on a fresh database on the local filesystem. Prints one
JSON object of seconds per operation (``bench/compare_trees.py --paths`` runs it for two
checkouts, its modules from the checkout first on ``PYTHONPATH``, and prints them side by side).

Usage: python bench/rewrite_paths_bench.py [--rows 200000] [--reps 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions
from slatedb_core.sst import ENTRY_SCHEMA, encode_sst
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


def _data(n: int) -> tuple[pa.Table, bytes]:
    """``n`` sorted unique 16-byte keys with 100-byte values, as a table and as one SST."""
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 256, (n, 16), dtype=np.uint8).view("S16").ravel())
    m = len(keys)
    karr = pa.array(keys.tolist(), pa.binary())
    values = rng.integers(0, 256, (m, 100), dtype=np.uint8)
    varr = pa.array([v.tobytes() for v in values], pa.binary())
    rows = pa.RecordBatch.from_arrays(
        [karr, pa.array(np.full(m, 5, np.uint64)), pa.array(np.zeros(m, np.uint8)), varr],
        schema=ENTRY_SCHEMA,
    )
    return pa.table({"key": karr, "value": varr}), encode_sst(rows)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    table, blob = _data(args.rows)
    best: dict[str, float] = {}

    def timed(name: str, op: Callable[[], object]) -> None:
        t0 = time.perf_counter()
        op()
        took = time.perf_counter() - t0
        best[name] = min(best.get(name, took), took)

    for _ in range(args.reps):
        tmp = tempfile.mkdtemp(prefix="rewrite-paths-")
        try:
            store = open_store(tmp)
            store.put("staging/a.sst", blob)
            with Db.open("db", store) as db:
                timed("bulk_ingest (N rows)", lambda: db.bulk_ingest(table))
                timed("ingest_ssts re-encode (N rows)", lambda: db.ingest_ssts(["staging/a.sst"]))
                timed(
                    "ingest_ssts linked (N rows)",
                    lambda: db.ingest_ssts(["staging/a.sst"], seqs=[1 << 40]),
                )
                db.bulk_ingest(table)  # a 4th L0 SST
            compact = functools.partial(
                run_compaction_once, "db", store, CompactorOptions(l0_trigger=4)
            )
            timed("compaction of 4 L0 SSTs (4N rows)", compact)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(best))


if __name__ == "__main__":
    main()
