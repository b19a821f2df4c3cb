"""Steps of the fleet metrics tests (tests/fleet/test_metrics_endpoint.py,
test_metrics_prometheus.py): a fleet of two databases, the writer options that build it, and the
repository root the exporter runs from."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)
REPO = Path(__file__).resolve().parents[2]


def make_fleet(url: str) -> None:
    """``orders`` compacted once (4 L0 SSTs merged into a sorted run), ``users`` with one put."""
    store = open_store(url)
    with Db.open("orders", store, FAST) as db:
        for i in range(4):
            db.put(b"k%d" % i, b"v" * 100)
            db.flush_memtable()
    assert run_compaction_once("orders", store, CompactorOptions(l0_trigger=2)) is not None
    with Db.open("users", store, FAST) as db:
        db.put(b"u", b"1")
