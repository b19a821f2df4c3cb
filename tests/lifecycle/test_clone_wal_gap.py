"""A clone's own WAL writes, made before its first L0 flush, are seen by a managed reader and held
by a checkpoint of its latest state. Checks the suspicion "a clone keeps an allowed gap in its WAL
between what it copied from the parent and where its own writer starts; WAL writes after that
gap are seen by neither managed readers nor checkpoints" (review of clone.py's WAL, after
0da0744): clones made since ca19948 start their writer right after the WAL they copied (SlateDB
RFC 0004, "Clones"), so these pass; the parent's tail is flushed, WAL-only, or fences only."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from slatedb_core import admin
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db

WRITER = DbOptions(flush_interval=timedelta(milliseconds=5))


@pytest.mark.parametrize("parent_wal", ["flushed", "wal-only", "fences-after"])
def test_a_clones_wal_writes_before_its_first_flush_are_read_and_checkpointed(
    mem: ObjectStore, parent_wal: str
) -> None:
    with Db.open("parent", mem, WRITER) as db:
        db.put(b"p", b"1")
        if parent_wal != "wal-only":
            db.flush_memtable()
    if parent_wal == "fences-after":
        for _ in range(3):
            Db.open("parent", mem, WRITER).close()  # fences only: nothing for the clone
    create_clone("clone", "parent", mem)
    with Db.open("clone", mem, WRITER) as db:
        db.put(b"c", b"2")  # durable, only in the clone's WAL
        with DbReader.open("clone", mem) as reader:
            assert reader.get(b"c") == b"2" and reader.get(b"p") == b"1"
        cp = admin.create_checkpoint("clone", mem).id
        with DbReader.open("clone", mem, cp) as reader:
            assert dict(reader.scan()) == {b"p": b"1", b"c": b"2"}
    cp = admin.create_checkpoint("clone", mem).id  # and with the writer closed
    with DbReader.open("clone", mem, cp) as reader:
        assert dict(reader.scan()) == {b"p": b"1", b"c": b"2"}


def test_a_clone_made_before_ca19948_shows_its_writers_wal_after_the_gap(mem: ObjectStore) -> None:
    """A clone made before ca19948 kept its parent's ``next_wal_sst_id``: its writer starts past
    ids that never existed in it (``damaged_holes`` accepts that gap, and the writer's replay
    steps over it), but a reader's unbroken run, and so a checkpoint's WAL, stopped at the gap:
    the clone's writes before its first L0 flush were seen by neither. Its next writer open fills
    the gap with fences (zero-byte WAL SSTs, which hold no rows)."""
    with Db.open("parent", mem, WRITER) as db:
        db.put(b"p", b"1")
        db.flush_memtable()
        db.put(b"q", b"2")  # only in the WAL: copied into the clone
    create_clone("clone", "parent", mem)
    ms = ManifestStore(mem, "clone")
    copied = ms.read_latest().manifest.wal_id_last_seen
    # the manifest such a clone was born with: the parent's next_wal_sst_id, past the copy
    ms.update(lambda m: dataclasses.replace(m, next_wal_sst_id=m.next_wal_sst_id + 3))
    with Db.open("clone", mem, WRITER) as db:
        db.put(b"c", b"3")
        want = {b"p": b"1", b"q": b"2", b"c": b"3"}
        with DbReader.open("clone", mem) as reader:
            assert dict(reader.scan()) == want
        cp = admin.create_checkpoint("clone", mem).id
        with DbReader.open("clone", mem, cp) as reader:
            assert dict(reader.scan()) == want
    wal = WalLog(mem, "clone")
    ids = wal.list_ids()
    assert ids == list(range(ids[0], ids[-1] + 1)) and ids[0] <= copied
    with Db.open("clone", mem, WRITER) as db:  # and the next writer opens over it
        assert dict(db.scan()) == want
