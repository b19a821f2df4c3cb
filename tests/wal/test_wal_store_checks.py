"""A separate WAL store is checked (issue 38, item 4): a ``wal_url`` that points at the wrong store,
a damaged ``_wal_store_id``, a conditional open that skips the check, or an open racing a WAL
store writer is a typed error (``WalStoreMismatch``/``CorruptionError``), never another store's
WAL read, written or collected."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import CorruptionError, WalStoreMissing
from slatedb_core.gc.service import run_gc_once
from slatedb_core.layout import wal_store_id_path
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
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


PATH = "db"


def test_a_writer_with_the_wrong_wal_store_is_refused_after_a_crash(
    store: ObjectStore, wrong: str
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_wal_store.py)."""
    db = Db.open("db", store, DbOptions(flush_interval=HOUR))
    db.put(b"k", b"acknowledged")
    db._simulate_crash()
    with pytest.raises(WalStoreMissing):
        Db.open("db", store, DbOptions(flush_interval=HOUR, wal_url=wrong))
    with Db.open("db", store, DbOptions(flush_interval=HOUR)) as again:
        assert again.get(b"k") == b"acknowledged"


def test_a_reader_with_the_wrong_wal_store_is_refused(store: ObjectStore, wrong: str) -> None:
    """Found by the review of issue 38 (was review/test_issue38_wal_store.py)."""
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
    """Found by the review of issue 38 (was review/test_issue38_wal_store.py)."""
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
    same path. It must refuse instead (the collector checks where the WAL is).

    Found by the review of issue 38 (was review/test_issue38_wal_store.py)."""
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


def test_conditional_open_without_the_wal_store_is_refused(tmp_path: Path) -> None:
    """Item 2 (97eb26f/cd50018): the table layer's conditional open (``if_manifest_id``) bumps
    without :meth:`WalLog.check_before_bump`; cd50018 re-checks the recorded id only when the
    opener has a separate store. One opened WITHOUT the WAL store bumped the epoch, erased
    ``separate_wal_store``/``wal_store_id`` from the manifest, found the main store's empty
    ``wal/`` acceptable and served the stale value; its flush then moved the replay point past
    the acknowledged write kept in the WAL store, lost for every later opener.

    Found by the review of issue 38, second pass (was review/test_issue38_review2.py)."""
    main_url = (tmp_path / "main").as_uri()
    wal_url = (tmp_path / "wal").as_uri()
    (tmp_path / "main").mkdir()
    (tmp_path / "wal").mkdir()
    main = open_store(main_url)
    with_wal = DbOptions(flush_interval=HOUR, wal_url=wal_url)
    with Db.open(PATH, main, with_wal) as db:
        db.put(b"k", b"old")
        db.flush_memtable()
    db = Db.open(PATH, main, with_wal)
    db.put(b"k", b"acknowledged")  # durable in the WAL store, not flushed to L0
    db._simulate_crash()
    latest = ManifestStore(main, PATH).read_latest()
    with pytest.raises(WalStoreMissing):
        Db.open(PATH, main, DbOptions(flush_interval=HOUR), if_manifest_id=latest.id).close()
    with Db.open(PATH, main, with_wal) as db:
        assert db.get(b"k") == b"acknowledged"


@pytest.mark.parametrize(
    "body", [b"", b"not hex at all", b"ab" * 15], ids=["empty", "text", "short"]
)
def test_a_damaged_wal_store_id_is_corruption_not_another_store(
    tmp_path: Path, body: bytes
) -> None:
    """Item 3 (97eb26f): a damaged ``<db>/_wal_store_id`` (a 0-byte object left by a crash of an
    unsynced store, a garbage or truncated body) in the RIGHT WAL store was reported as
    ``WalStoreMissing`` ("open it with the WAL store URL it was written with"): a damaged object
    read as a different store, sending the operator after a store that does not exist. It is a
    ``CorruptionError`` naming the object, for every opener; nothing is written.

    Found by the review of issue 38, second pass (was review/test_issue38_review2.py)."""
    (tmp_path / "main").mkdir()
    (tmp_path / "wal").mkdir()
    main = open_store((tmp_path / "main").as_uri())
    wal_url = (tmp_path / "wal").as_uri()
    with_wal = DbOptions(flush_interval=HOUR, wal_url=wal_url)
    with Db.open(PATH, main, with_wal) as db:
        db.put(b"k", b"v")
    wal_store = open_store(wal_url)
    wal_store.put(wal_store_id_path(PATH), body)
    before = ManifestStore(main, PATH).read_latest().id
    with pytest.raises(CorruptionError, match="_wal_store_id"):
        Db.open(PATH, main, with_wal)
    with pytest.raises(CorruptionError, match="_wal_store_id"):
        DbReader.open(PATH, main, options=DbReaderOptions(wal_url=wal_url))
    assert ManifestStore(main, PATH).read_latest().id == before


def test_an_open_racing_a_wal_store_writer_checks_the_manifest_it_bumps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 2b (97eb26f): an open checks the WAL store on the manifest it read (none, for a new
    database), then bumps whatever manifest is latest when its CAS lands. A writer with a
    separate WAL store that created the database and acknowledged a write in between (the stall
    forced here) had ``separate_wal_store``/``wal_store_id`` erased by the bump of an opener
    without the store, which served an empty database; the acknowledged write was then
    unreadable for good (the right opener is refused: "our writer last opened it with its WAL
    in the main store").

    Found by the review of issue 38, second pass (was review/test_issue38_review2.py)."""
    (tmp_path / "main").mkdir()
    (tmp_path / "wal").mkdir()
    main = open_store((tmp_path / "main").as_uri())
    with_wal = DbOptions(flush_interval=HOUR, wal_url=(tmp_path / "wal").as_uri())
    real = ManifestStore.create_initial
    stalled: list[bool] = []

    def create_then_stall(self: ManifestStore, m: Manifest) -> object:
        try:
            return real(self, m)
        finally:
            if not stalled:
                stalled.append(True)
                other = Db.open(PATH, main, with_wal)  # opens and writes during our stall
                other.put(b"k", b"acknowledged")
                other._simulate_crash()

    monkeypatch.setattr(ManifestStore, "create_initial", create_then_stall)
    try:
        with Db.open(PATH, main, DbOptions(flush_interval=HOUR)) as db:
            got = db.get(b"k")
    except WalStoreMissing:
        got = b"refused"
    assert stalled
    assert got != None  # never the empty database  # noqa: E711
    monkeypatch.setattr(ManifestStore, "create_initial", real)
    with Db.open(PATH, main, with_wal) as db:
        assert db.get(b"k") == b"acknowledged"
