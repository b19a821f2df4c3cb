"""What still reads a database after its writer's clean close dropped the writer checkpoint
(381989a), while a compaction replaces its L0 and GC collects at once: a clone made while the
writer was open, and a MANAGED ``DbReader`` opened before the close. Each holds its own
checkpoint (SlateDB RFC 0004, "Readers", "Clones"), which the close leaves alone.

From review54 (session 54) of 381989a."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.compactor import run_compaction_once
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import CompactorOptions, DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.gc import ZERO

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1))
KEYS = [f"k{i}".encode() for i in range(6)]


def test_a_clone_and_a_managed_reader_read_on_after_close_compaction_and_gc(
    store: ObjectStore,
) -> None:
    db = Db.open("parent", store, QUIET)
    for k in KEYS:
        db.put(k, b"v" + k)
        db.flush_memtable()
    create_clone("clone", "parent", store)
    reader = DbReader.open("parent", store, options=DbReaderOptions(mode=ReaderMode.MANAGED))
    try:
        db.close()
        assert run_compaction_once("parent", store, CompactorOptions(l0_trigger=2)) is not None
        run_gc_once("parent", store, ZERO)
        assert [reader.get(k) for k in KEYS] == [b"v" + k for k in KEYS]
        assert [k for k, _ in reader.scan()] == KEYS
    finally:
        reader.close()
    run_gc_once("parent", store, ZERO)
    with Db.open("clone", store, QUIET) as clone:
        assert [clone.get(k) for k in KEYS] == [b"v" + k for k in KEYS]
    with Db.open("parent", store, QUIET) as again:
        assert [again.get(k) for k in KEYS] == [b"v" + k for k in KEYS]
