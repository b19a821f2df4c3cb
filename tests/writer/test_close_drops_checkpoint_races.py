"""A clean close's manifest update (dropping the writer checkpoint) against other actors.

From review54 (session 54) of 381989a ("writer: a clean close drops the writer checkpoint"): the
close now commits a manifest, so a zombie's close must never commit over a newer writer's
manifest or write one into a destroyed path, a second close must not commit again, and a close
that reports success must leave every acknowledged write readable by the next writer."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import DatabaseDestroyed, Fenced, SlateDBError
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1))


@pytest.fixture
def inner(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake")


def writer_checkpoints(store: ObjectStore) -> list[int | None]:
    m = ManifestStore(store, "db").read_latest().manifest
    return [c.writer_epoch for c in m.checkpoints if c.writer_epoch is not None]


def test_a_second_close_commits_nothing(inner: ObjectStore) -> None:
    ms = ManifestStore(inner, "db")
    db = Db.open("db", inner, QUIET)
    db.put(b"k", b"v")
    db.close()
    after_first = ms.read_latest().id
    db.close()
    assert ms.read_latest().id == after_first
    assert writer_checkpoints(inner) == []


def test_a_writer_opening_while_the_close_commits_keeps_its_checkpoint(
    inner: ObjectStore,
) -> None:
    """The old writer's close is held just before it creates its manifest; a new writer opens
    (fencing it) and writes. The close then finds the new epoch and commits nothing over it."""
    faulty = FaultyStore(inner)
    old = Db.open("db", faulty, QUIET)
    old.put(b"old", b"acknowledged")
    hold = faulty.pause("close", "put_if_absent", "db/manifest/*")
    t, box = start_recorded(old.close)
    assert hold.wait_reached(10), "the close committed no manifest"
    new = Db.open("db", inner, QUIET)
    try:
        new.put(b"new", b"acknowledged")
        hold.release()
        t.join(30)
        assert not t.is_alive()
        assert box[0] is None or isinstance(box[0], Fenced), repr(box[0])
        m = ManifestStore(inner, "db").read_latest().manifest
        assert m.writer_epoch == new.writer_epoch
        assert writer_checkpoints(inner) == [new.writer_epoch]
        new.flush_memtable()  # the new writer still commits
        assert new.get(b"old") == b"acknowledged"
    finally:
        new.close()
    with Db.open("db", inner, QUIET) as again:
        assert again.get(b"old") == b"acknowledged" and again.get(b"new") == b"acknowledged"


def test_a_zombie_closing_after_a_hard_destroy_writes_nothing_there(inner: ObjectStore) -> None:
    """RFC 0004 leaves it to the user that no writer runs during a hard destroy; one that does
    must not bring the path back: its close creates no manifest (nor anything else but the GC
    boundaries the destroy left) and does not report success."""
    db = Db.open("db", inner, QUIET)
    db.put(b"k", b"v")
    destroy("db", inner, soft=False)
    left = sorted(o.path for o in inner.list("db/"))
    with pytest.raises(SlateDBError):
        db.close()
    assert sorted(o.path for o in inner.list("db/")) == left
    assert all("/gc/" in p for p in left), left
    with pytest.raises(DatabaseDestroyed):
        Db.open("db", inner, QUIET)


def test_a_zombie_closing_after_a_soft_destroy_does_not_report_success(
    inner: ObjectStore,
) -> None:
    """A soft destroy fences the writer (RFC 0004); buffered writes were not durable, and the
    close must say so rather than succeed."""
    db = Db.open("db", inner, QUIET)
    db.put(b"k", b"v", await_durable=False)
    destroy("db", inner, soft=True)
    latest = ManifestStore(inner, "db").read_latest().id
    with pytest.raises(SlateDBError):
        db.close()
    assert ManifestStore(inner, "db").read_latest().id == latest


def test_a_close_whose_wal_flush_fails_raises_and_keeps_the_checkpoint(
    inner: ObjectStore,
) -> None:
    """Buffered writes that did not become durable: the close raises the store's error (twice,
    the same object), commits no manifest (the checkpoint stays, as after a crash), and the
    next writer finds what was acknowledged before."""
    faulty = FaultyStore(inner)
    db = Db.open("db", faulty, DbOptions(flush_interval=timedelta(hours=1)))
    db.put(b"acked", b"v")
    faulty.fail_next("put_if_absent", "db/wal/*", times=1000)
    db.put(b"buffered", b"v", await_durable=False)
    latest = ManifestStore(inner, "db").read_latest().id
    with pytest.raises(SlateDBError) as first:
        db.close()
    with pytest.raises(SlateDBError) as second:
        db.close()
    assert second.value is first.value
    assert ManifestStore(inner, "db").read_latest().id == latest
    assert writer_checkpoints(inner) == [db.writer_epoch]
    with Db.open("db", inner, QUIET) as again:
        assert again.get(b"acked") == b"v"


def test_a_close_whose_checkpoint_drop_fails_says_every_write_is_durable(
    inner: ObjectStore,
) -> None:
    """Session 54's note: after the WAL flush, a failing checkpoint-drop update made ``close()``
    raise the bare store error, so a caller could not tell it from lost writes. The error now
    says the writes are durable and what keeps the checkpoint; the next writer reads them all
    and its own close drops the checkpoint."""
    faulty = FaultyStore(inner)
    db = Db.open("db", faulty, DbOptions(flush_interval=timedelta(hours=1)))
    db.put(b"acked", b"v")
    db.put(b"buffered", b"v", await_durable=False)
    faulty.fail_next("put_if_absent", "db/manifest/*", times=1000)
    with pytest.raises(SlateDBError) as first:
        db.close()
    notes = " ".join(getattr(first.value, "__notes__", []))
    assert "every write this writer acknowledged is durable" in notes.lower(), notes
    assert "writer checkpoint" in notes
    with pytest.raises(SlateDBError) as second:
        db.close()
    assert second.value is first.value
    assert len(second.value.__notes__) == 1
    faulty.clear_rules()
    with Db.open("db", inner, QUIET) as again:
        assert again.get(b"acked") == b"v" and again.get(b"buffered") == b"v"
    assert writer_checkpoints(inner) == []
