"""Review of issue 38 (item 4, a separate WAL store): a ``wal_url`` that points at the wrong
store must be a typed error (``WalStoreMissing``), never an empty WAL.

Our writer records in the manifest whether it keeps the WAL in a separate store
(``Manifest.separate_wal_store``), and an opener *without* a WAL store is refused when it is set.
The other direction was open: a database whose WAL our writer keeps in the main store, opened
*with* a ``wal_url`` (a typo, another database's store, an empty bucket) before its first L0
flush recorded any WAL SST in the manifest. A reader then served an empty database, and a writer
recovering after a crash replayed nothing, served none of the acknowledged writes and went on
writing its WAL into the wrong store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc.service import run_gc_once
from slatedb_core.options import DbOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

HOUR = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store((tmp_path / "main").as_uri())


@pytest.fixture
def wrong(tmp_path: Path) -> str:
    d = tmp_path / "elsewhere"
    d.mkdir()
    return d.as_uri()


def test_a_writer_with_the_wrong_wal_store_is_refused_after_a_crash(
    store: ObjectStore, wrong: str
) -> None:
    db = Db.open("db", store, DbOptions(flush_interval=HOUR))
    db.put(b"k", b"acknowledged")
    db._simulate_crash()
    with pytest.raises(WalStoreMissing):
        Db.open("db", store, DbOptions(flush_interval=HOUR, wal_url=wrong))
    with Db.open("db", store, DbOptions(flush_interval=HOUR)) as again:
        assert again.get(b"k") == b"acknowledged"


def test_a_reader_with_the_wrong_wal_store_is_refused(store: ObjectStore, wrong: str) -> None:
    with Db.open("db", store, DbOptions(flush_interval=HOUR)) as db:
        db.put(b"k", b"acknowledged")
        with pytest.raises(WalStoreMissing):
            DbReader.open("db", store, options=DbReaderOptions(wal_url=wrong))
        reader = DbReader.open("db", store)
        assert reader.get(b"k") == b"acknowledged"
        reader.close()


def test_a_reader_with_another_separate_wal_store_is_refused(
    store: ObjectStore, wrong: str, tmp_path: Path
) -> None:
    right = tmp_path / "wal"
    right.mkdir()
    with Db.open("db", store, DbOptions(flush_interval=HOUR, wal_url=right.as_uri())) as db:
        db.put(b"k", b"acknowledged")
        with pytest.raises(WalStoreMissing):
            reader = DbReader.open("db", store, options=DbReaderOptions(wal_url=wrong))
            reader.close()


def test_gc_with_another_databases_wal_store_deletes_none_of_it(tmp_path: Path) -> None:
    """A GC given the wrong ``wal_url`` deletes WAL SSTs below *this* database's replay point in
    *that* store: another database's acknowledged writes, if it keeps its WAL there under the
    same path. It must refuse instead (the collector checks where the WAL is)."""
    shared = tmp_path / "shared-wal"
    shared.mkdir()
    other_main = open_store((tmp_path / "other").as_uri())
    other = Db.open("db", other_main, DbOptions(flush_interval=HOUR, wal_url=shared.as_uri()))
    for i in range(5):
        other.put(b"k%d" % i, b"acknowledged")
    other._simulate_crash()  # its writes are only in the shared WAL store

    main = open_store((tmp_path / "main").as_uri())
    with Db.open("db", main, DbOptions(flush_interval=HOUR)) as db:
        for i in range(10):
            db.put(b"x%d" % i, b"x")
            db.flush_memtable()
        assert db.manifest.manifest.replay_after_wal_id > 5
    zero = GarbageCollectorOptions(min_age=timedelta(0))
    with pytest.raises(WalStoreMissing):
        run_gc_once("db", main, zero, now=lambda: 2.0**40, wal_url=shared.as_uri())
    with Db.open(
        "db", other_main, DbOptions(flush_interval=HOUR, wal_url=shared.as_uri())
    ) as again:
        assert [again.get(b"k%d" % i) for i in range(5)] == [b"acknowledged"] * 5
