"""Garbage-collector benchmark. Prints figures; asserts nothing.

A database with N manifests and N WAL SSTs (default 10,000 each), all collectable but the latest
manifest and the WAL SST at the replay point, is seeded by writing objects directly (copies of
one small encoded manifest with increasing ids; tiny encoded empty WAL SSTs). Then one GC pass
(min_age 0) is timed with its object-store requests, and a second pass that finds nothing to do.
Runs on the local filesystem, on moto's S3 server (in this process, so S3 figures include moto's
own CPU time under the same GIL, and its deletes do not overlap) and on the local filesystem with
an injected per-request latency like a real S3 round trip ("local+latency", --latency-ms), which
shows what parallel deletes buy.

Usage: python bench/gc_bench.py [--manifests 10000] [--wal 10000]
       [--stores local,s3,local+latency] [--concurrency 16] [--latency-ms 10]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._moto import MotoServer
from slatedb_core.gc import Collector, GcStats
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.wal.log import FENCE, WalLog

ZERO = GarbageCollectorOptions(min_age=timedelta(0))


def seed(store: ObjectStore, db: str, manifests: int, wal: int, threads: int = 32) -> float:
    """Write the objects in parallel (seeding is not what is measured); returns seconds taken."""
    seq = SequencedStore(store, db, "manifest", "manifest")
    log = WalLog(store, db)
    manifest = encode_manifest(Manifest(replay_after_wal_id=wal, next_wal_sst_id=wal + 1))
    wal_sst = FENCE
    jobs = [(seq.path(i), manifest) for i in range(1, manifests + 1)]
    jobs += [(log.path(i), wal_sst) for i in range(1, wal + 1)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda job: store.put(*job), jobs))
    # the pointer a live database would have left (every 16th commit)
    store.put(seq.pointer_path, str(max(1, manifests // 16 * 16)).encode())
    return time.perf_counter() - t0


def fmt_requests(stats: GcStats) -> str:
    return ", ".join(f"{op} {n}" for op, n in stats.requests.items() if n)


def bench(store_name: str, url: Callable[[], str], a: argparse.Namespace) -> None:
    latency = a.latency_ms / 1e3 if store_name.endswith("+latency") else 0.0
    extra = f" ({a.latency_ms:g} ms per request)" if latency else ""
    print(f"\n## {store_name}{extra}: {a.manifests:,} manifests + {a.wal:,} WAL SSTs")
    print(f"{'concurrency':>11} | {'pass':>6} | {'seconds':>8} | {'deleted':>7} | requests")
    for concurrency in (int(c) for c in a.concurrency.split(",")):
        inner = open_store(url())
        took = seed(inner, "db", a.manifests, a.wal)
        print(f"{'':>11}   (seeded in {took:.1f} s)")
        store = FaultyStore(inner, rules=[FaultRule(latency_s=latency)]) if latency else inner
        collector = Collector("db", store, ZERO, delete_concurrency=concurrency)
        for name in ("first", "second"):
            stats = collector.run()
            print(
                f"{concurrency:>11} | {name:>6} | {stats.duration_s:>8.2f} | {stats.deleted:>7} | "
                f"{stats.total_requests} ({fmt_requests(stats)})"
            )
        assert stats.deleted == 0
        left = SequencedStore(store, "db", "manifest", "manifest").list()
        print(
            f"{'':>11}   left: {len(left)} manifest, {len(WalLog(store, 'db').list_ids())} WAL; "
            f"boundaries manifest={stats.manifest_boundary}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--manifests", type=int, default=10_000)
    p.add_argument("--wal", type=int, default=10_000)
    p.add_argument("--stores", default="local,s3,local+latency")
    p.add_argument("--concurrency", default="16", help="delete concurrencies, e.g. 16,1")
    p.add_argument("--latency-ms", type=float, default=10.0)
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    stores = a.stores.split(",")
    tmp = tempfile.TemporaryDirectory(prefix="slatedb-gc-bench-")
    counter = iter(range(10**9))
    moto = MotoServer() if "s3" in stores else None
    factories: dict[str, Callable[[], str]] = {
        "local": lambda: str(Path(tmp.name) / f"s{next(counter)}"),
        "memory": lambda: "memory://",
    }
    factories["local+latency"] = factories["local"]
    if moto is not None:
        factories["s3"] = moto.new_bucket_url
    try:
        for s in stores:
            bench(s, factories[s], a)
    finally:
        if moto is not None:
            moto.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
