"""DbReader benchmark: how long a reader takes to open over a large WAL, and how fast it reads.

1. A writer puts ``--mb`` MB (default 100) of rows (16-byte random keys, 100-byte values) with
   ``put_arrow`` in chunks, with ``l0_sst_size_bytes`` far above that so nothing reaches L0, and
   closes (the WAL is flushed, the memtable is not): everything is in WAL SSTs.
2. ``DbReader.open`` is timed in MANAGED and FOLLOW_LATEST mode (each replays the whole WAL into
   in-memory tables of ``max_memtable_bytes``; best and median of 3), next to the writer's own
   recovery (``Db.open``) of the same WAL for reference; the writer's open runs last because it
   fences the WAL.
3. Read rates of the reader: random ``get`` and ``get_many`` of existing keys, ``scan_arrow`` and
   ``scan`` over everything, first with the data in replayed WAL tables, then after a writer
   flushed it to L0 (reads through SSTs and the block cache). The first scan of replayed tables
   includes sorting them (once per frozen table).
4. A follower in steady state: ``--polls`` polls (``refresh()``), each replaying one WAL SST of
   a 50-row write batch, then the same read rates over the tables that leaves (replayed WAL
   tables are immutable and size-tiered, so their number grows like log(polls)).

Prints figures; asserts nothing. Usage:
    python bench/reader_bench.py [--mb 100] [--stores local,memory,s3] [--gets 50000] [--polls 1500]
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._data import KEY_LEN, VALUE_LEN, make_table
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog
from slatedb_core.writer.db import Db

CHUNK_ROWS = 20_000
DB = "db"
REPEATS = 3
MiB = 1024 * 1024


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


@contextmanager
def store_for(kind: str) -> Iterator[ObjectStore]:
    if kind == "memory":
        yield open_store("memory://")
    elif kind == "local":
        d = tempfile.mkdtemp(prefix="reader-bench-")
        try:
            yield open_store(Path(d).as_uri())
        finally:
            shutil.rmtree(d, ignore_errors=True)
    elif kind == "s3":
        from bench._moto import MotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

        server = MotoServer()
        try:
            yield open_store(server.new_bucket_url())
        finally:
            server.stop()
    else:
        raise SystemExit(f"unknown store {kind!r}")


def write_wal(store: ObjectStore, table: pa.Table) -> tuple[float, int]:
    options = DbOptions(
        l0_sst_size_bytes=4096 * MiB,
        max_unflushed_bytes=8192 * MiB,
        flush_interval=timedelta(milliseconds=50),
    )
    t0 = time.perf_counter()
    with Db.open(DB, store, options) as db:
        for off in range(0, table.num_rows, CHUNK_ROWS):
            db.put_arrow(table.slice(off, CHUNK_ROWS), await_durable=False)
        db.flush()
    return time.perf_counter() - t0, len(WalLog(store, DB).list_ids())


def read_rates(reader: DbReader, keys: list[bytes], n_gets: int, label: str) -> None:
    rng = np.random.default_rng(1)
    picks = [keys[i] for i in rng.integers(0, len(keys), n_gets)]
    dt, _ = timed(lambda: [reader.get(k) for k in picks])
    print(f"    {label}: get            {n_gets / dt:>12,.0f} /s")
    groups = [picks[i : i + 1000] for i in range(0, len(picks), 1000)]
    dt, _ = timed(lambda: [reader.get_many(g) for g in groups])
    print(f"    {label}: get_many(1000) {n_gets / dt:>12,.0f} keys/s")
    for run in ("1st", "2nd"):
        dt, rows = timed(lambda: reader.scan_arrow().read_all().num_rows)
        mb = rows * (KEY_LEN + VALUE_LEN) / MiB
        print(f"    {label}: scan_arrow {run} {rows / dt:>12,.0f} rows/s  ({mb / dt:,.0f} MB/s)")
    dt, rows = timed(lambda: sum(1 for _ in reader.scan()))
    print(f"    {label}: scan (tuples)  {rows / dt:>12,.0f} rows/s")


def bench_store(kind: str, table: pa.Table, n_gets: int) -> None:
    mb = table.num_rows * (KEY_LEN + VALUE_LEN) / MiB
    print(f"\n== {kind} store: {table.num_rows:,} rows, {mb:.0f} MB of keys + values ==")
    keys: list[bytes] = table.column("key").to_pylist()
    with store_for(kind) as store:
        dt, wal_ssts = write_wal(store, table)
        print(f"  write through Db (WAL only): {dt:.2f} s, {wal_ssts} WAL SSTs")
        for mode in (ReaderMode.MANAGED, ReaderMode.FOLLOW_LATEST):
            o = DbReaderOptions(manifest_poll_interval=timedelta(minutes=1), mode=mode)
            times = []
            for attempt in range(REPEATS):
                gc.collect()
                before = rss_mib()
                t0 = time.perf_counter()
                reader = DbReader.open(DB, store, options=o)
                times.append(time.perf_counter() - t0)
                grew = rss_mib() - before
                if attempt < REPEATS - 1 or mode is not ReaderMode.MANAGED:
                    s = reader.stats()
                    reader.close()
                    del reader
            best, median = min(times), sorted(times)[len(times) // 2]
            print(
                f"  DbReader.open {mode.name:<13} best {best:5.2f} s ({mb / best:4.0f} MB/s), "
                f"median {median:5.2f} s; {s.memtables} tables, "
                f"{s.memtable_bytes / MiB:.0f} MB accounted"
                + (f", peak RSS +{grew:.0f} MiB" if grew > 0 else "")
            )
            if mode is ReaderMode.MANAGED:
                read_rates(reader, keys, n_gets, "WAL tables")
                reader.close()
                del reader
        gc.collect()
        dt, db = timed(lambda: Db.open(DB, store, DbOptions(l0_sst_size_bytes=4096 * MiB)))
        print(f"  Db.open (writer recovery, reference) {dt:6.2f} s")
        db.flush_memtable()
        db.close()
        with DbReader.open(DB, store, options=DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)) as r:
            s = r.stats()
            print(f"  after a memtable flush: {s.l0_views} L0 SST(s), {s.memtables} WAL tables")
            # each block-cache miss is a ranged GET, which moto serves slowly from a 100 MB object
            read_rates(r, keys, n_gets if kind != "s3" else min(n_gets, 200), "L0 SSTs   ")


def bench_follow(kind: str, polls: int, n_gets: int) -> None:
    rows, rng = 50, np.random.default_rng(2)
    print(f"\n== {kind} store: a FOLLOW_LATEST reader polling {polls} WAL SSTs of {rows} rows ==")
    o = DbReaderOptions(manifest_poll_interval=timedelta(minutes=5), mode=ReaderMode.FOLLOW_LATEST)
    keys: list[bytes] = []
    with store_for(kind) as store, Db.open(DB, store, DbOptions()) as db:
        with DbReader.open(DB, store, options=o) as reader:
            times = []
            for _ in range(polls):
                table = make_table(rows, rng)
                keys += table.column("key").to_pylist()
                db.put_arrow(table)  # one WAL SST
                dt, _ = timed(reader.refresh)
                times.append(dt)
            times.sort()
            s = reader.stats()
            print(
                f"  replay per poll: median {times[len(times) // 2] * 1e3:.2f} ms, "
                f"p99 {times[int(len(times) * 0.99)] * 1e3:.2f} ms; {s.memtables} tables, "
                f"{s.memtable_bytes / MiB:.1f} MB accounted"
            )
            read_rates(reader, keys, n_gets, "followed  ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0, help="MB of keys + values to write")
    ap.add_argument("--stores", default="local,memory", help="comma-separated: local,memory,s3")
    ap.add_argument("--gets", type=int, default=50_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--polls", type=int, default=1500, help="follower polls (0: skip)")
    args = ap.parse_args()
    rows = int(args.mb * MiB / (KEY_LEN + VALUE_LEN))
    table = make_table(rows, np.random.default_rng(args.seed))
    for kind in args.stores.split(","):
        bench_store(kind.strip(), table, args.gets)
        if args.polls:
            bench_follow(kind.strip(), args.polls, args.gets)


if __name__ == "__main__":
    main()
