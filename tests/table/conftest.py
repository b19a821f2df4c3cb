"""Shared fixtures of the sharded-table tests: a fresh memory store per test (``mem``), table
options that flush fast and never poll on their own (``OPTS``), and helpers that fill a table
through its shard writers."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableOptions

OPTS = TableOptions(
    writer=DbOptions(flush_interval=timedelta(milliseconds=5)),
    reader=DbReaderOptions(manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None),
)


def memory() -> ObjectStore:
    """A new, empty memory store."""
    return open_store(f"memory://table-{random.getrandbits(64):x}")


@pytest.fixture
def mem() -> ObjectStore:
    return memory()


def fill(table: Table, rows: dict[bytes, bytes], *, flush: bool = False) -> None:
    """Write ``rows`` through each shard's writer; ``flush`` also moves them to L0."""
    for shard in table.shards:
        mine = {k: v for k, v in rows.items() if shard.contains(k)}
        if not mine:
            continue
        with table.writer(shard.index) as db:
            for k, v in mine.items():
                db.put(k, v, await_durable=False)
            db.flush()
            if flush:
                db.flush_memtable()
    table.refresh()
