"""A live ``Table`` handle notices a new shard map within its reader's poll interval (issue 37,
hole 2): after a split or an overwrite by another handle, writes acknowledged on the new shards
are seen by the old handle's get, get_many, scan and scan_arrow once the interval has passed,
without ``refresh()``, and the old handle deletes its checkpoints on the retired shards, so the
real GC deletes them (after an overwrite; a split's new shards are clones that keep their source
until they no longer use its SSTs). Before, its cached readers swallowed ``DatabaseDestroyed``
in their polls, served the retired shard for ever and their checkpoints kept the GC off it."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest

from slatedb_core.gc.service import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, TableOptions
from slatedb_core.writer.db import Db
from tests.table.ingest_steps import rows_batch

POLL = timedelta(milliseconds=50)
LIVE = TableOptions(
    writer=DbOptions(flush_interval=timedelta(milliseconds=5)),
    # no expiry: only the handle letting go of its checkpoint frees a retired shard
    reader=DbReaderOptions(manifest_poll_interval=POLL, checkpoint_lifetime=None),
)
GC_NOW = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
OLD = {b"a": b"old-a", b"q": b"old-q"}
NEW = {b"b": b"new-b", b"r": b"new-r"}


def _reader_checkpoints(store: ObjectStore, db_path: str) -> set[uuid.UUID]:
    """The checkpoints of live readers on ``db_path`` (unnamed; a split's clones name theirs).
    A reader re-establishes its checkpoint under a new id as its shard changes."""
    m = ManifestStore(store, db_path).read_latest().manifest
    return {c.id for c in m.checkpoints if c.name is None}


def _open_old_handle(store: ObjectStore) -> Table:
    """A handle whose readers of every shard are open (holding checkpoints)."""
    old = Table.open("t", store, LIVE)
    assert old.get(b"a") == b"old-a"
    assert old.get_many([b"q"]) == [b"old-q"]
    assert all(_reader_checkpoints(store, s.db_path) for s in old.shards)
    return old


def _holds(store: ObjectStore, retired: list[str]) -> bool:
    """Whether a reader (only the old handle's are open) holds a retired shard."""
    return any(_reader_checkpoints(store, p) for p in retired)


def _wait_until_let_go(store: ObjectStore, retired: list[str]) -> None:
    started = time.monotonic()
    while _holds(store, retired):
        assert time.monotonic() - started < 5, "the idle handle still holds its checkpoints"
        time.sleep(POLL.total_seconds() / 5)


def _collect(store: ObjectStore, retired: list[str]) -> None:
    for path in retired:
        stats = run_gc_once(path, store, GC_NOW)
        assert stats.database_deleted, (path, stats)


def _past_the_interval() -> None:
    time.sleep(POLL.total_seconds() * 1.5)


def _write_through_new_writers(admin: Table, rows: dict[bytes, bytes]) -> None:
    for shard in admin.shards:
        mine = {k: v for k, v in rows.items() if shard.contains(k)}
        if mine:
            with admin.writer(shard.index) as db:
                for k, v in mine.items():
                    db.put(k, v)  # acknowledged: durable in the shard's WAL


def _replace_the_map(admin: Table, how: str) -> list[str]:
    """Split (or overwrite) through ``admin``; returns the retired databases."""
    before = {s.db_path for s in admin.shards}
    if how == "split":
        admin.split(0, b"m")
    else:
        admin.overwrite([rows_batch(OLD)])
    retired = sorted(before - {s.db_path for s in admin.shards})
    assert retired and set(retired) <= set(admin.shard_map.retired)
    return retired


@pytest.mark.parametrize("how", ["split", "overwrite"])
def test_an_old_handle_sees_writes_on_new_shards_within_its_poll_interval(
    mem: ObjectStore, how: str
) -> None:
    with Table.create("t", mem, (), LIVE) as admin:
        _write_through_new_writers(admin, OLD)
    old = _open_old_handle(mem)
    with old:
        with Table.open("t", mem, LIVE) as admin:
            retired = _replace_the_map(admin, how)
            _write_through_new_writers(admin, NEW)
            want_map = admin.shard_map.id
        _past_the_interval()
        want = {**OLD, **NEW}
        assert old.get(b"b") == b"new-b"
        assert old.get_many([b"a", b"b", b"q", b"r"]) == [want[k] for k in (b"a", b"b", b"q", b"r")]
        assert list(old.scan()) == sorted(want.items())
        assert old.scan_arrow().read_all().to_pydict() == {
            "key": sorted(want),
            "value": [want[k] for k in sorted(want)],
        }
        assert old.shard_map.id == want_map
        assert not _holds(mem, retired)
        if how == "overwrite":
            _collect(mem, retired)
            assert old.get(b"r") == b"new-r"


@pytest.mark.parametrize("how", ["split", "overwrite"])
def test_an_idle_handle_lets_go_of_a_retired_shard_once_its_reader_finds_it_destroyed(
    mem: ObjectStore, how: str
) -> None:
    """A reader's poll that finds its shard destroyed makes the handle re-read the map (before,
    the poll swallowed ``DatabaseDestroyed``): the handle deletes its checkpoint of the retired
    shard without serving a read, and the GC can delete it."""
    with Table.create("t", mem, (), LIVE) as admin:
        _write_through_new_writers(admin, OLD)
    old = _open_old_handle(mem)
    with old:
        with Table.open("t", mem, LIVE) as admin:
            retired = _replace_the_map(admin, how)
        _wait_until_let_go(mem, retired)
        if how == "overwrite":
            _collect(mem, retired)
        assert old.get(b"q") == b"old-q"


def test_an_idle_handle_lets_go_of_two_retired_shards_at_once(mem: ObjectStore) -> None:
    """Both readers' polls find their shards destroyed at about the same time; one of them
    swaps the handle's state and closes the other (joining its poll thread), which must not
    wait for the first to finish its look (that would hold both for the 30 s join timeout)."""
    with Table.create("t", mem, [b"m"], LIVE) as admin:
        _write_through_new_writers(admin, OLD)
    old = _open_old_handle(mem)
    with old:
        with Table.open("t", mem, LIVE) as admin:
            retired = _replace_the_map(admin, "overwrite")
        assert len(retired) == 2
        _wait_until_let_go(mem, retired)
        _collect(mem, retired)


def test_a_read_within_the_interval_may_serve_the_map_it_holds(mem: ObjectStore) -> None:
    """The bound is the poll interval, no tighter: a handle that checked the map less than an
    interval ago serves it without another look (one read costs no map request)."""
    slow = TableOptions(
        reader=DbReaderOptions(manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None)
    )
    with Table.create("t", mem, (), slow) as t, Table.open("t", mem, slow) as other:
        assert t.get(b"a") is None
        held = t.shard_map.id
        other.split(0, b"m")
        assert t.get(b"a") is None
        assert t.shard_map.id == held
        t.refresh()
        assert t.shard_map.id == other.shard_map.id


def test_a_readers_poll_reports_its_database_destroyed_even_with_its_ssts_unchanged(
    mem: ObjectStore,
) -> None:
    """The hook the handle relies on: a soft destroy changes only the manifest's
    ``destroyed_at``, so a poll that finds the same SSTs (and its checkpoint) used to keep
    serving without a word; it now reports the database destroyed."""
    with Db.open("db", mem, LIVE.writer) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
    told = threading.Event()
    with DbReader.open("db", mem, None, LIVE.reader, on_destroyed=told.set) as r:
        assert r.get(b"a") == b"1"
        destroy("db", mem, soft=True)
        assert told.wait(5), "the reader's poll did not report its database destroyed"
