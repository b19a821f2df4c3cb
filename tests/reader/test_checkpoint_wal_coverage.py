"""A checkpoint of the latest state (``admin.create_checkpoint``) holds every write acknowledged
before it, L0 or WAL alike, and a ``DbReader`` at it replays exactly the WAL SSTs that were
durable when it was taken (adversarial review: "a table snapshot can miss acknowledged writes
that are still only in the WAL"; the plain single-database case)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core import admin
from slatedb_core.errors import WalSstMissing
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db

WRITER = DbOptions(flush_interval=timedelta(milliseconds=5))


def test_a_checkpoint_holds_wal_only_writes_of_a_closed_writer(mem: ObjectStore) -> None:
    with Db.open("db", mem, WRITER) as db:
        db.put(b"flushed", b"1")
        db.flush_memtable()
        db.put(b"wal-only", b"2")
        db.delete(b"flushed")
    cp = admin.create_checkpoint("db", mem).id
    with Db.open("db", mem, WRITER) as db:
        db.put(b"after", b"3")
        db.put(b"wal-only", b"changed")
    with DbReader.open("db", mem, cp) as reader:
        assert dict(reader.scan()) == {b"wal-only": b"2"}
        assert reader.get(b"after") is None and reader.get(b"flushed") is None


def test_a_checkpoint_of_a_live_writer_holds_what_was_acknowledged_before_it(
    mem: ObjectStore,
) -> None:
    with Db.open("db", mem, WRITER) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v%d" % i)  # one WAL SST each
        cp = admin.create_checkpoint("db", mem).id
        db.put(b"k0", b"after")
        db.put(b"k9", b"after")
        with DbReader.open("db", mem, cp) as reader:
            assert dict(reader.scan()) == {b"k%d" % i: b"v%d" % i for i in range(5)}


def test_a_flushed_database_with_only_fences_after_it_stays_a_union_source(
    mem: ObjectStore,
) -> None:
    """Fences (zero-byte WAL SSTs a writer leaves when it opens) hold no writes: naming them
    would make union refuse the checkpoint as if it had WAL data not yet in L0."""
    with Db.open("db", mem, WRITER) as db:
        db.put(b"a", b"1")
        db.flush_memtable()
    Db.open("db", mem, WRITER).close()  # one more fence, no writes
    cp = admin.create_checkpoint("db", mem).id
    with DbReader.open("db", mem, cp) as reader:
        assert dict(reader.scan()) == {b"a": b"1"}
    create_union("u", [UnionSource("db", cp)], mem)
    with DbReader.open("u", mem) as reader:
        assert dict(reader.scan()) == {b"a": b"1"}


def test_a_checkpoint_refuses_a_wal_hole_no_writer_can_have_left(mem: ObjectStore) -> None:
    """A checkpoint naming the WAL before the hole would drop, for good, acknowledged writes
    after it; a managed reader refuses the same hole (review finding 7 in RELIABILITY.md)."""
    with Db.open("db", mem, WRITER) as db:
        for i in range(4):
            db.put(b"k%d" % i, b"v")
    wal = WalLog(mem, "db")
    ids = wal.list_ids(after=ManifestStore(mem, "db").read_latest().manifest.replay_after_wal_id)
    mem.delete(wal.path(ids[1]))
    with pytest.raises(WalSstMissing):
        admin.create_checkpoint("db", mem)


def test_a_writers_durable_checkpoint_holds_its_durable_wal_writes(mem: ObjectStore) -> None:
    """``Db.create_checkpoint(DURABLE)`` (SlateDB's Durable scope): every write durable before
    the call, WAL-only ones included, as ``admin.create_checkpoint`` holds them; it pinned only
    what the manifest held, so a reader at it missed acknowledged WAL-only writes."""
    from slatedb_core.options import CheckpointScope

    with Db.open("db", mem, WRITER) as db:
        db.put(b"flushed", b"1")
        db.flush_memtable()
        db.put(b"wal-only", b"2")  # durable: its WAL SST is written before put returns
        cp = db.create_checkpoint(CheckpointScope.DURABLE).id
        db.put(b"after", b"3")
        with DbReader.open("db", mem, cp) as reader:
            assert dict(reader.scan()) == {b"flushed": b"1", b"wal-only": b"2"}
