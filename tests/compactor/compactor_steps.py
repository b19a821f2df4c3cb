"""Shared steps of the compactor tests: options, the manifest-create pattern a commit pauses at, and
the latest compactions record."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.compactor import CompactionsState, read_latest_state
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore

OPTS = CompactorOptions(
    poll_interval=timedelta(milliseconds=20),
    l0_trigger=2,
    min_merge_width=2,
    size_ratio=3.0,
    max_sst_size_bytes=8192,
)


MANIFEST_CREATE = "db/manifest/*.manifest"


def latest_state(store: ObjectStore) -> CompactionsState:
    found = read_latest_state(store, "db")
    assert found is not None
    return found[1]
