"""Two-phase CAS vs native conditional writes: the cost of one manifest update. Prints figures;
asserts nothing.

For each object store (memory, moto's S3 server on 127.0.0.1) three ways to get create-if-absent:

* native       the store's own conditional writes (If-None-Match / If-Match)
* 2pc-sqlite   a store that ignores them, made whole by two-phase CAS over SQLite (a file in a
               temporary directory, WAL mode, synchronous=FULL)
* 2pc-postgres the same over PostgreSQL (a throwaway cluster on 127.0.0.1, fsync on)
* ...-bg       the same with ``complete_in_background=4``: a create returns once its intent is
               inserted, and the copy, commit and delete of the temporary run on a pool (their
               requests are counted: the pool is drained before the counters are read)

One writer commits ``--updates`` manifest updates on top of the one it holds (the manifest store's
update loop: create id+1, check the GC boundary, rewrite the latest pointer every 16th commit),
then a fresh reader looks up the latest id ``--lookups`` times. Figures per operation: object-store
requests by kind (what reached the store under every wrapper), transactional-store statements by
kind, and latency (mean, p50, p99).

Usage: python bench/twophase_bench.py [--updates 300] [--lookups 100] [--stores memory,s3]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._moto import MotoServer
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import ObjectStore, RequestCounters
from slatedb_core.store.twophase import TwoPhaseStore
from slatedb_core.store.txn import TxnStore, open_txn_store
from slatedb_core.store.url import open_store
from tests.pgcluster import PgCluster

MODES = ("native", "2pc-sqlite", "2pc-postgres", "2pc-sqlite-bg", "2pc-postgres-bg")


def _nothing() -> None:
    return None


def incr(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1)


@dataclasses.dataclass
class Row:
    store: str
    mode: str
    op: str
    n: int
    requests: dict[str, int]
    statements: dict[str, int]
    latencies: list[float]

    def per_op(self, counts: dict[str, int]) -> str:
        parts = [f"{k} {v / self.n:.2f}" for k, v in sorted(counts.items()) if v]
        return ", ".join(parts) or "-"

    def total(self, counts: dict[str, int]) -> float:
        return sum(counts.values()) / self.n


def _delta(counters: RequestCounters | None, before: dict[str, int]) -> dict[str, int]:
    if counters is None:
        return {}
    after = counters.snapshot()
    return {k: after[k] - before.get(k, 0) for k in after}


def measure(
    store_name: str,
    mode: str,
    op: str,
    raw: ObjectStore,
    txn: TxnStore | None,
    n: int,
    body: Callable[[], None],
    settle: Callable[[], None] | None = None,
) -> Row:
    raw_before = raw.counters.snapshot()
    txn_before = txn.counters.snapshot() if txn is not None else {}
    lat: list[float] = []
    for _ in range(n):
        t = time.perf_counter()
        body()
        lat.append(time.perf_counter() - t)
    if settle is not None:
        settle()
    return Row(
        store_name,
        mode,
        op,
        n,
        _delta(raw.counters, raw_before),
        _delta(txn.counters if txn is not None else None, txn_before),
        lat,
    )


def run_one(
    store_name: str, mode: str, raw: ObjectStore, txn_url: str | None, updates: int, lookups: int
) -> list[Row]:
    txn = open_txn_store(txn_url) if txn_url is not None else None
    store: ObjectStore = raw
    settle: Callable[[], None] = _nothing
    if txn is not None:
        bg = 4 if mode.endswith("-bg") else 0
        two_phase = TwoPhaseStore(NoConditionalWrites(raw), txn, complete_in_background=bg)
        store, settle = two_phase, two_phase.drain
    ms = ManifestStore(store, "db")
    stored = ms.create_initial(Manifest())
    for _ in range(20):  # warm up connections and caches
        stored = ms.update(incr, base=stored)
    settle()

    def update() -> None:
        nonlocal stored
        stored = ms.update(incr, base=stored)

    rows = [measure(store_name, mode, "manifest update", raw, txn, updates, update, settle)]
    reader = ManifestStore(store, "db")
    rows.append(
        measure(store_name, mode, "latest lookup", raw, txn, lookups, lambda: reader.latest_id())
    )
    if isinstance(store, TwoPhaseStore):
        store.close()
    return rows


def fmt_ms(xs: list[float]) -> str:
    qs = statistics.quantiles(xs, n=100)
    return f"{statistics.mean(xs) * 1e3:6.2f} {qs[49] * 1e3:6.2f} {qs[98] * 1e3:6.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--lookups", type=int, default=100)
    p.add_argument("--stores", default="memory,s3")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's per-request lines
    stores = args.stores.split(",")
    print("# two-phase CAS vs native conditional writes, per operation")
    print(f"updates {args.updates}, lookups {args.lookups}; Python {sys.version.split()[0]}")
    pg = PgCluster(fsync=True)
    moto = MotoServer() if "s3" in stores else None
    tmp = Path(tempfile.mkdtemp(prefix="twophase-bench-"))
    rows: list[Row] = []
    try:
        for store_name in stores:
            for mode in MODES:
                if store_name == "s3":
                    assert moto is not None
                    raw = open_store(moto.new_bucket_url())
                else:
                    raw = open_store("memory://")
                if mode == "native":
                    txn_url = None
                elif "sqlite" in mode:
                    txn_url = f"sqlite:///{tmp}/{store_name}-{mode}.sqlite"
                else:
                    txn_url = pg.new_database()
                rows += run_one(store_name, mode, raw, txn_url, args.updates, args.lookups)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        pg.stop()
        if moto is not None:
            moto.stop()
    print()
    head = (
        f"{'store':7} {'mode':15} {'operation':16} {'obj req':>7} {'stmts':>6} "
        f"{'mean ms':>7} {'p50':>6} {'p99':>6}  object requests / statements by kind"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.store:7} {r.mode:15} {r.op:16} {r.total(r.requests):7.2f} "
            f"{r.total(r.statements):6.2f} {fmt_ms(r.latencies)}  "
            f"{r.per_op(r.requests)} / {r.per_op(r.statements)}"
        )
    print()
    for store_name in stores:
        for op in ("manifest update", "latest lookup"):
            base = next(r for r in rows if (r.store, r.mode, r.op) == (store_name, "native", op))
            for mode in MODES[1:]:
                r = next(x for x in rows if (x.store, x.mode, x.op) == (store_name, mode, op))
                print(
                    f"{store_name:7} {op:16} {mode:15} requests x"
                    f"{r.total(r.requests) / base.total(base.requests):.2f} "
                    f"(+{r.total(r.statements):.2f} statements), mean latency x"
                    f"{statistics.mean(r.latencies) / statistics.mean(base.latencies):.2f}"
                )


if __name__ == "__main__":
    main()
