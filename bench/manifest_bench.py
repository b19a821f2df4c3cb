"""Manifest metadata benchmarks. Prints figures; asserts nothing.

1. Latest-manifest lookup at 10 / 1,000 / 10,000 versions on the local filesystem and on moto's S3:
   requests and time of ours (pointer + start-after LIST) next to the naive full listing that
   SlateDB's original protocol does (SlateDB RFC 0001 step 1).
2. Manifest-update throughput with 1, 2, 4 and 8 threads contending on one database: commits/s,
   conflicts and object-store requests per commit.
3. Writer commits and opens against a large manifest, side by side with SlateDB 0.17's engine
   (the ``slatedb.uniffi`` wheel, the reference of issue 42 goal 2): CPU per writer open, and
   per commit (one durable put, then a memtable flush to L0: ``Db.flush_memtable`` and SlateDB's
   ``flush_with_options(MEM_TABLE)``), at N SSTs in one sorted run or C checkpoints. Both
   databases start from the same manifest, written by our codec (both engines read it; after
   its first commit SlateDB's manifests are its own encoding, of the same shape). CPU is the
   process's (``time.process_time``: every thread, SlateDB's Rust ones included); medians over
   the repetitions, the two engines alternating. Manifest polling is off on both sides (an
   hour), compactors and GC are off, L0 may hold 1,000 SSTs.

Usage: python bench/manifest_bench.py [--versions 10,1000,10000] [--threads 1,2,4,8]
       [--updates 200] [--stores local,s3] [--sections lookup,updates,engines]
       [--shapes ssts:1000,ssts:10000,checkpoints:1000] [--commits 5] [--opens 3]
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
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ulid import ULID

from bench._moto import MotoServer
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import (
    Checkpoint,
    CompactedSst,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


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


# ---- 3. writer commits and opens, ours and SlateDB's -------------------------------------------
def large_manifest(ssts: int, checkpoints: int) -> Manifest:
    """A manifest of ``ssts`` SSTs in one sorted run (16-byte first and last keys, the metadata
    of a 64 KiB SST) and ``checkpoints`` checkpoints that never expire. Nothing reads the SSTs:
    a commit and an open touch only the manifest."""
    out, views = [], []
    for i in range(ssts):
        sst_id = ULID()
        info = SstInfo(
            first_key=b"k%015d" % (2 * i),
            last_key=b"k%015d" % (2 * i + 1),
            index_offset=65_000,
            index_len=120,
            filter_offset=65_120,
            filter_len=1_300,
            entry_count=550,
            size_bytes=66_500,
        )
        out.append(CompactedSst(sst_id, info))
        views.append(SstView(sst_id, sst_id))
    now = int(time.time())
    cps = tuple(Checkpoint(uuid.uuid4(), 1, now) for _ in range(checkpoints))
    runs = (SortedRun(0, tuple(views)),) if views else ()
    return Manifest(ssts=tuple(out), compacted=runs, checkpoints=cps)


class Ours:
    name = "ours"

    def __init__(self, root: str) -> None:
        self.store = open_store(root)
        self.options = DbOptions(manifest_poll_interval=timedelta(hours=1), l0_max_ssts=1000)
        self.db: Db | None = None

    def open(self) -> None:
        self.db = Db.open("db", self.store, self.options)

    def commit(self, key: bytes) -> None:
        assert self.db is not None
        self.db.put(key, b"v" * 100)
        self.db.flush_memtable()

    def close(self) -> None:
        assert self.db is not None
        self.db.close()


class Theirs:
    name = "SlateDB"

    def __init__(self, root: str) -> None:
        import asyncio
        import json

        import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel has no py.typed

        self.sdb = sdb
        self.loop = asyncio.new_event_loop()
        b = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.LOCAL)
        b.with_config("local_path", root)
        self.store = b.build()
        s = sdb.Settings.default()
        s.set("compactor_options", "null")
        s.set("garbage_collector_options", "null")
        s.set("manifest_poll_interval", json.dumps("1h"))
        s.set("l0_max_ssts", "1000")
        self.settings = s
        self.db: Any = None

    def open(self) -> None:
        builder = self.sdb.DbBuilder("db", self.store)
        builder.with_settings(self.settings)
        self.db = self.loop.run_until_complete(builder.build())

    def commit(self, key: bytes) -> None:
        sdb, db = self.sdb, self.db

        async def run() -> None:
            handle = await db.put(key, b"v" * 100)
            await handle.await_durable()
            await db.flush_with_options(sdb.FlushOptions(flush_type=sdb.FlushType.MEM_TABLE))

        self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.run_until_complete(self.db.shutdown())


def cpu_of(fn: Any) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def bench_engines(shapes: list[tuple[str, int]], commits: int, opens: int) -> None:
    print(
        f"\n## writer commit (durable put + memtable flush to L0) and open, CPU ms, vs SlateDB "
        f"0.17 ({commits} commits x {opens} opens, medians)"
    )
    print(
        f"{'shape':>17} | {'commit ours':>11} {'SlateDB':>8} {'ratio':>6} | "
        f"{'open ours':>9} {'SlateDB':>8} {'ratio':>6}"
    )
    for kind, n in shapes:
        manifest = large_manifest(n if kind == "ssts" else 0, n if kind == "checkpoints" else 0)
        with tempfile.TemporaryDirectory(prefix="slatedb-bench-") as tmp:
            engines: list[Ours | Theirs] = []
            for cls in (Ours, Theirs):
                root = str(Path(tmp) / cls.name)
                Path(root).mkdir()
                ManifestStore(open_store(root), "db").create_initial(manifest)
                engines.append(cls(root))
            commit_s: dict[str, list[float]] = {e.name: [] for e in engines}
            open_s: dict[str, list[float]] = {e.name: [] for e in engines}
            for e in engines:  # warm-up: imports, first-use caches
                e.open()
                e.commit(b"warm")
                e.close()
            for r in range(opens):
                for e in engines:
                    open_s[e.name].append(cpu_of(e.open))
                    for i in range(commits):
                        key = b"key-%d-%d" % (r, i)
                        commit_s[e.name].append(cpu_of(lambda e=e, key=key: e.commit(key)))
                    e.close()
        co, ct = (statistics.median(commit_s[k]) * 1e3 for k in ("ours", "SlateDB"))
        oo, ot = (statistics.median(open_s[k]) * 1e3 for k in ("ours", "SlateDB"))
        print(
            f"{f'{n:,} {kind}':>17} | {co:>11.1f} {ct:>8.1f} {co / ct:>5.1f}x | "
            f"{oo:>9.1f} {ot:>8.1f} {oo / ot:>5.1f}x"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--versions", default="10,1000,10000")
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--stores", default="local,s3")
    p.add_argument("--sections", default="lookup,updates,engines")
    p.add_argument("--shapes", default="ssts:0,ssts:1000,ssts:10000,checkpoints:1000")
    p.add_argument("--commits", type=int, default=5)
    p.add_argument("--opens", type=int, default=3)
    a = p.parse_args()
    sections = a.sections.split(",")
    shapes = [(k, int(v)) for k, v in (x.split(":") for x in a.shapes.split(","))]
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    versions = [int(x) for x in a.versions.split(",")]
    threads = [int(x) for x in a.threads.split(",")]
    stores = a.stores.split(",") if {"lookup", "updates"} & set(sections) else []
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
        for s in stores if "lookup" in sections else []:
            bench_lookup(s, factories[s], versions, a.reps)
        for s in stores if "updates" in sections else []:
            bench_updates(s, factories[s], threads, a.updates)
        if "engines" in sections:
            bench_engines(shapes, a.commits, a.opens)
    finally:
        if moto is not None:
            moto.stop()
        tmp.cleanup()


if __name__ == "__main__":
    main()
