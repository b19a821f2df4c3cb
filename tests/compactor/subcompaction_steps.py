"""Shared steps of the key-range subcompaction tests: a database filled with overlapping L0 SSTs,
its contents, and every subcompaction of a plan run in this process."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa

from slatedb_core.compactor.distributed import (
    DistributedPlan,
    SubcompactionResult,
    execute_subcompaction,
)
from slatedb_core.options import CompactorOptions, DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

PATH = "db"


SMALL_SSTS = CompactorOptions(l0_trigger=2, max_sst_size_bytes=64 * 1024, block_size=4096)


GC_NOW = GarbageCollectorOptions(min_age=timedelta(0))


def keys(lo: int, hi: int) -> list[bytes]:
    return [b"k%08d" % i for i in range(lo, hi)]


def fill(store: ObjectStore, batches: int = 4, rows: int = 3000) -> dict[bytes, bytes | None]:
    """``batches`` bulk ingests into L0, overlapping so that later batches overwrite and delete
    earlier keys; returns the expected contents."""
    expected: dict[bytes, bytes | None] = {}
    rng = np.random.default_rng(7)
    with Db.open(PATH, store, DbOptions(l0_sst_size_bytes=48 * 1024)) as db:
        for b in range(batches):
            ks = keys(b * rows // 2, b * rows // 2 + rows)
            vals: list[bytes | None] = [
                None if rng.random() < 0.05 else b"v%d-" % b + k for k in ks
            ]
            db.bulk_ingest(
                pa.table({"key": pa.array(ks, pa.binary()), "value": pa.array(vals, pa.binary())})
            )
            expected.update(zip(ks, vals, strict=True))
    return expected


def contents(store: ObjectStore) -> dict[bytes, bytes]:
    with Db.open(PATH, store) as db:
        return dict(db.scan())


def run_all(store: ObjectStore, plan: DistributedPlan) -> list[SubcompactionResult]:
    return [execute_subcompaction(store, plan, i) for i in range(plan.subcompactions)]
