"""Shared fixtures of the sharded-table tests: ``mem`` (a fresh memory store, from tests/conftest.py), a local
one (``local``: staging hands the encoder's scratch memory to the store uncopied, which a memory
store would keep a reference to), table options that flush fast and never poll on their own
(``OPTS``), a helper that fills a table through its shard writers, and one that runs a step in
a thread. The steps of a staged ingest are in :mod:`tests.table.ingest_steps`."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableOptions

T = TypeVar("T")

OPTS = TableOptions(
    writer=DbOptions(flush_interval=timedelta(milliseconds=5)),
    reader=DbReaderOptions(manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None),
)


def memory() -> ObjectStore:
    """A new, empty memory store."""
    return open_store(f"memory://table-{random.getrandbits(64):x}")


@pytest.fixture
def local(tmp_path: Path) -> ObjectStore:
    return open_store((tmp_path / "store").as_uri())


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


def in_thread(fn: Callable[[], T]) -> tuple[threading.Thread, list[T | BaseException]]:
    """Run ``fn`` in a thread; its result, or the exception it raised, lands in the list."""
    out: list[T | BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # reported by the test's assertion
            out.append(e)

    th = threading.Thread(target=run)
    th.start()
    return th, out
