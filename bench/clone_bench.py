"""Clone and union benchmarks. Prints figures; asserts nothing (row counts are checked and a
mismatch is printed).

1. A parent with ``--ssts`` SSTs (default 1,000: one sorted run plus some L0 and a WAL tail),
   made fast with one ``bulk_ingest`` split into tiny SSTs and one compaction. Clone creation
   time and object-store requests per kind: from the latest state (ephemeral checkpoint), from a
   given checkpoint, with a projection, a clone of that clone, and a re-run of a finished clone.
2. The parent split into ``--shards`` projected clones (default 8) from one checkpoint, then
   the union of the shards: time and requests of each step, manifest size of the union.

Usage: python bench/clone_bench.py [--ssts 1000] [--shards 8] [--stores local,s3]
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench._moto import MotoServer
from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.compactor import run_compaction_once
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

T = TypeVar("T")
ROWS_PER_SST = 100
ROW_BYTES = 16 + 16 + 16  # key + value + per-entry overhead counted by split_for_ssts


def key(i: int) -> bytes:
    return b"key-%012d" % i


def make_parent(store: ObjectStore, ssts: int) -> int:
    """~``ssts`` SSTs: 90% in one sorted run, 10% in L0, plus a WAL tail. Returns the row count."""
    rows = ssts * ROWS_PER_SST
    target = ROWS_PER_SST * ROW_BYTES
    opts = DbOptions(l0_sst_size_bytes=target, l0_max_ssts=10 * ssts)
    run_rows = rows * 9 // 10
    with Db.open("parent", store, opts) as db:
        keys = [key(i) for i in range(run_rows)]
        db.bulk_ingest(pa.table({"key": keys, "value": [b"v" * 16] * run_rows}))
        run_compaction_once(
            "parent", store, CompactorOptions(l0_trigger=2, max_sst_size_bytes=target)
        )
        keys = [key(i) for i in range(run_rows, rows)]
        db.bulk_ingest(pa.table({"key": keys, "value": [b"w" * 16] * len(keys)}))
        for i in range(rows, rows + 50):
            db.put(key(i), b"wal", await_durable=False)
        db.flush()
    return rows + 50


def measured(store: ObjectStore, fn: Callable[[], T]) -> tuple[T, float, dict[str, int]]:
    before = store.counters.snapshot()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    after = store.counters.snapshot()
    return out, dt, {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def fmt(reqs: dict[str, int]) -> str:
    total = sum(reqs.values())
    parts = ", ".join(f"{k} {v}" for k, v in sorted(reqs.items()))
    return f"{total:4d} requests ({parts})"


def rows_in(store: ObjectStore, path: str) -> int:
    options = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open(path, store, options=options) as reader:
        return sum(b.num_rows for b in reader.scan_arrow())


def row(label: str, dt: float, reqs: dict[str, int], extra: str = "") -> None:
    print(f"  {label:<34} {dt * 1000:8.1f} ms  {fmt(reqs)}{extra}")


def bench(store_name: str, url: str, ssts: int, shards: int) -> None:
    store = open_store(url)
    print(f"\n## {store_name}: parent with ~{ssts} SSTs")
    t0 = time.perf_counter()
    rows = make_parent(store, ssts)
    pm = ManifestStore(store, "parent").read_latest().manifest
    print(
        f"  setup: {len(pm.ssts)} SSTs ({len(pm.l0)} L0, {len(pm.compacted)} sorted run(s)), "
        f"{rows} rows, manifest {len(encode_manifest(pm)) / 1024:.0f} KiB, "
        f"{time.perf_counter() - t0:.1f} s"
    )

    print("\n### clone creation")
    m, dt, reqs = measured(store, lambda: create_clone("c-latest", "parent", store))
    row(
        "clone of latest (ephemeral cp)",
        dt,
        reqs,
        f"  wal copied {m.wal_id_last_seen - m.replay_after_wal_id}",
    )
    cp = create_checkpoint("parent", store)
    _, dt, reqs = measured(store, lambda: create_clone("c-given", "parent", store, cp.id))
    row("clone of a given checkpoint", dt, reqs)
    half = KeyRange(key(rows // 4), key(rows * 3 // 4))
    m, dt, reqs = measured(store, lambda: create_clone("c-proj", "parent", store, cp.id, half))
    row("projected clone (middle half)", dt, reqs, f"  {len(m.ssts)} SSTs kept")
    _, dt, reqs = measured(store, lambda: create_clone("c-nested", "c-latest", store))
    row("clone of the clone", dt, reqs)
    _, dt, reqs = measured(store, lambda: create_clone("c-latest", "parent", store))
    row("re-run of a finished clone", dt, reqs)
    got = rows_in(store, "c-latest")
    print(f"  rows through the clone: {got}" + ("" if got == rows else f"  MISMATCH: {rows}"))

    print(f"\n### {shards} shards (projected clones of one checkpoint), then their union")
    bounds: list[bytes | None] = [None, *(key(rows * i // shards) for i in range(1, shards)), None]
    sources = []
    total_dt = 0.0
    total: dict[str, int] = {}
    for i in range(shards):
        rng = KeyRange(bounds[i], bounds[i + 1])
        shard = functools.partial(create_clone, f"shard{i}", "parent", store, cp.id, rng)
        _, dt, reqs = measured(store, shard)
        total_dt += dt
        total = {k: total.get(k, 0) + reqs.get(k, 0) for k in {*total, *reqs}}
        sources.append(UnionSource(f"shard{i}", range=rng))
    row(f"{shards} projections (total)", total_dt, total)
    # The WAL tail copied into the last shard must reach L0 before a union accepts it (a lot of
    # L0 came with it: lift l0_max_ssts, or the flush waits for a compactor).
    for s in sources:
        m = ManifestStore(store, s.path).read_latest().manifest
        if m.wal_id_last_seen > m.replay_after_wal_id:
            with Db.open(s.path, store, DbOptions(l0_max_ssts=10 * ssts)) as db:
                db.flush_memtable()
    um, dt, reqs = measured(store, lambda: create_union("union", sources, store))
    row(f"union of {shards} shards", dt, reqs)
    print(
        f"  union manifest: {len(um.ssts)} SSTs, {len(um.l0)} L0 views, "
        f"{len(um.compacted)} sorted run(s), {len(um.external_dbs)} external db(s), "
        f"{len(encode_manifest(um)) / 1024:.0f} KiB"
    )
    got = rows_in(store, "union")
    print(f"  rows through the union: {got}" + ("" if got == rows else f"  MISMATCH: {rows}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ssts", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--stores", default="local,s3")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for name in args.stores.split(","):
        if name == "local":
            with tempfile.TemporaryDirectory() as d:
                bench("local filesystem", Path(d).as_uri(), args.ssts, args.shards)
        elif name == "s3":
            server = MotoServer()
            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
            try:
                bench("moto S3", server.new_bucket_url(), args.ssts, args.shards)
            finally:
                server.stop()
        else:
            raise SystemExit(f"unknown store {name!r}: use local, s3")


if __name__ == "__main__":
    main()
