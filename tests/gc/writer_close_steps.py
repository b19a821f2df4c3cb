"""Shared steps of the GC-after-the-writer tests (tests/gc/test_after_writer_close.py,
tests/gc/test_crashed_writer_checkpoint.py): a writer that polls rarely, a GC whose min ages
every object has passed, L0 SSTs written one put each."""

from __future__ import annotations

import time
from datetime import timedelta

from slatedb_core.gc.cutoffs import referenced
from slatedb_core.layout import sst_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

# the writer polls so rarely that it never sees the compaction before it closes
QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1))
HOUR_OLD = GarbageCollectorOptions(min_age=timedelta(hours=1))


def later() -> float:
    """A clock two hours ahead: every object is past ``HOUR_OLD``'s min ages."""
    return time.time() + 2 * 3600


def write_l0s(db: Db, n: int) -> None:
    for i in range(n):
        db.put(f"k{i}".encode(), f"v{i}".encode())
        db.flush_memtable()


def live_ssts(store: ObjectStore) -> list[str]:
    """The paths of the SSTs the latest manifest references."""
    m = ManifestStore(store, "db").read_latest().manifest
    return sorted(sst_path("db", i) for i in referenced(m))
