"""Db.open's harness seam (slatedb_core.writer.hooks): a writer whose background work the caller
runs as steps, as the simulation does (issue 41, item 2: the simulation injects its faults
through a seam instead of subclassing Db and reaching into its lock and WAL window)."""

from __future__ import annotations

import threading

from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks


def _writer_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("slatedb-")}


def _wal_ssts(store: ObjectStore) -> int:
    return sum(1 for _ in store.list("db/wal/"))


def _read(store: ObjectStore, key: bytes) -> bytes | None:
    reader = DbReader.open("db", store)
    try:
        return reader.get(key)
    finally:
        reader.close()


def test_no_background_thread_starts_and_the_steps_do_the_work(mem: ObjectStore) -> None:
    before = _writer_threads()
    hooks = WriterHooks(background=False)
    db = Db.open("db", mem, DbOptions(), hooks=hooks)
    steps = hooks.steps
    assert steps is not None
    assert _writer_threads() == before  # no WAL flusher, L0 flusher or manifest poller
    opened = _wal_ssts(mem)
    db.put(b"k", b"v", await_durable=False)
    assert _wal_ssts(mem) == opened  # no thread flushed the buffer
    steps.flusher.flush_wal()  # the WAL flusher thread's pass, run here
    assert _wal_ssts(mem) == opened + 1
    assert _read(mem, b"k") == b"v"
    steps.refresh()  # the manifest poller's pass
    assert steps.manifest_id() >= 1
    db.close()


def test_by_default_hooks_change_nothing(mem: ObjectStore) -> None:
    hooks = WriterHooks()
    with Db.open("db", mem, DbOptions(), hooks=hooks) as db:
        assert hooks.steps is not None
        assert any(n.startswith("slatedb-wal-flusher") for n in _writer_threads())
        db.put(b"k", b"v")
    assert _read(mem, b"k") == b"v"
