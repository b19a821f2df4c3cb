"""Manifest metadata benchmarks. Prints figures; asserts nothing.

1. Latest-manifest lookup at 10 / 1,000 / 10,000 versions on the local filesystem and on moto's S3:
   requests and time of ours (pointer + start-after LIST) next to the naive full listing that
   SlateDB's original protocol does (SlateDB RFC 0001 step 1).
2. Manifest-update throughput with 1, 2, 4 and 8 threads contending on one database: commits/s,
   conflicts and object-store requests per commit.

Usage: python bench/manifest_bench.py [--versions 10,1000,10000] [--threads 1,2,4,8]
       [--updates 200] [--stores local,s3]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._moto import MotoServer
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store


def seed_versions(store: ObjectStore, db: str, n: int) -> SequencedStore:
    """Write n-1 manifests directly (bypassing the protocol, to seed fast) and the pointer as a
    live database would have left it, then commit the n-th through the protocol."""
    seq = SequencedStore(store, db, "manifest", "manifest")
    data = encode_manifest(Manifest())
    for i in range(1, n):
        store.put(seq.path(i), data)
    # the pointer a live database has after n-1 commits: the last multiple of the stride
    stride = 16
    store.put(seq.pointer_path, str(max(1, (n - 1) // stride * stride)).encode())
    seq.create(n, encode_manifest(Manifest()))
    return seq


def incr(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1)


def naive_latest(seq: SequencedStore) -> int | None:
    ids = [e.id for e in seq.list()]
    return max(ids) if ids else None


def bench_lookup(store_name: str, url_factory: object, versions: list[int], reps: int) -> None:
    print(f"\n## latest-manifest lookup on {store_name}")
    print(
        f"{'versions':>9} | {'ours req':>8} {'ours ms':>8} | {'naive req':>9} {'naive ms':>8}"
        f" | speed-up"
    )
    for n in versions:
        store = open_store(url_factory())  # type: ignore[operator]
        seq = seed_versions(store, "db", n)
        results = {}
        for name, fn in (("ours", seq.latest_id), ("naive", lambda seq=seq: naive_latest(seq))):
            times = []
            store.counters.reset()
            for _ in range(reps):
                t0 = time.perf_counter()
                got = fn()
                times.append(time.perf_counter() - t0)
                assert got == n, (name, got, n)
            results[name] = (store.counters.total() / reps, statistics.median(times) * 1e3)
        (oreq, oms), (nreq, nms) = results["ours"], results["naive"]
        print(f"{n:>9} | {oreq:>8.1f} {oms:>8.2f} | {nreq:>9.1f} {nms:>8.2f} | {nms / oms:6.1f}x")


def bench_updates(store_name: str, url_factory: object, threads: list[int], updates: int) -> None:
    print(f"\n## manifest-update throughput on {store_name} ({updates} commits per run)")
    print(
        f"{'threads':>7} | {'commits/s':>9} | {'conflicts':>9} | {'req/commit':>10} | "
        f"{'p50 ms':>7} {'p99 ms':>7}"
    )
    for t in threads:
        store = open_store(url_factory())  # type: ignore[operator]
        ManifestStore(store, "db").create_initial(Manifest())
        per_thread = updates // t
        latencies: list[float] = []
        lock = threading.Lock()

        def work(
            store: ObjectStore = store,
            per_thread: int = per_thread,
            latencies: list[float] = latencies,
            lock: threading.Lock = lock,
        ) -> None:
            ms = ManifestStore(store, "db")
            base = ms.read_latest()
            for _ in range(per_thread):
                t0 = time.perf_counter()
                # like a writer: optimistic on its last known manifest
                base = ms.update(incr, base=base)
                with lock:
                    latencies.append(time.perf_counter() - t0)

        workers = [threading.Thread(target=work) for _ in range(t)]
        store.counters.reset()
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        final = ManifestStore(store, "db").read_latest()
        commits = per_thread * t
        assert final.manifest.last_l0_seq == commits, "lost update"
        attempts = store.counters.snapshot()["put_if_absent"]
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(
            f"{t:>7} | {commits / elapsed:>9.1f} | {attempts - commits:>9} | "
            f"{store.counters.total() / commits:>10.2f} | {latencies[len(latencies) // 2] * 1e3:>7.2f}"
            f" {p99 * 1e3:>7.2f}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--versions", default="10,1000,10000")
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--stores", default="local,s3")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    versions = [int(x) for x in a.versions.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    stores = a.stores.split(",")
    tmp = tempfile.TemporaryDirectory(prefix="slatedb-bench-")
    counter = iter(range(10**9))
    moto = MotoServer() if "s3" in stores else None
    factories = {
        "local": lambda: str(Path(tmp.name) / f"s{next(counter)}"),
        "memory": lambda: "memory://",
    }
    if moto is not None:
        factories["s3"] = moto.new_bucket_url
    try:
        for s in stores:
            bench_lookup(s, factories[s], versions, a.reps)
        for s in stores:
            bench_updates(s, factories[s], threads, a.updates)
    finally:
        if moto is not None:
            moto.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
