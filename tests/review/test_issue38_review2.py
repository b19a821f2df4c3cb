"""Adversarial review 2 of issue 38's follow-ups (44a3bf0, 97eb26f/cd50018, b48846d, b06a87a).

Each test is a hole found by the review (issue 38 review 2, item named in its docstring); each
failed before its fix.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import CorruptionError, MergeOperatorFailed, WalStoreMissing
from slatedb_core.layout import wal_store_id_path
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

PATH = "db"
APPEND = DbOptions(merge_operator="string_append", flush_interval=timedelta(milliseconds=10))
HOUR_MS = 3_600_000
HOUR = timedelta(hours=1)


def needs_existing(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """An application operator that only appends onto an existing value."""
    if existing is None:
        raise ValueError("no existing value to append to")
    return existing + operand


def test_replay_fold_of_ttl_parts_that_raises_does_not_fail_open(store: ObjectStore) -> None:
    """Item 1 (b06a87a): replay folds an operand twice when the key holds versions with other
    TTLs (the entry and the ``parts`` SlateDB's flush writes); the operator raising on the second
    fold (two operands, no base) escaped ReplayOperator and failed ``Db.open`` after the fence,
    the very failure b06a87a removes. Now the key is left Unresolved and no write is lost."""
    db = Db.open(PATH, store, APPEND)
    db.put(b"k", b"base")
    batch = WriteBatch()  # one clock read: both operands get the same expire_ts
    batch.merge(b"k", b"a", ttl=HOUR_MS)  # another TTL than the base's: its own version
    batch.merge(b"k", b"b", ttl=HOUR_MS)  # folds onto "a" alone: op(None, "a") then "b"
    db.write(batch)
    db.put(b"other", b"v")
    db.flush()
    db._simulate_crash()
    options = DbOptions(merge_operator=needs_existing, flush_interval=timedelta(milliseconds=10))
    with Db.open(PATH, store, options) as db:
        assert db.get(b"other") == b"v"
        # the entry folds onto the base, so the read may succeed or fail for this key only
        try:
            assert db.get(b"k") == b"baseab"
        except MergeOperatorFailed as e:
            assert e.key == b"k"
        db.flush_memtable()
    with Db.open(PATH, store, APPEND) as db:
        assert db.get(b"k") == b"baseab"
        assert db.get(b"other") == b"v"


def test_conditional_open_without_the_wal_store_is_refused(tmp_path: Path) -> None:
    """Item 2 (97eb26f/cd50018): the table layer's conditional open (``if_manifest_id``) bumps
    without :meth:`WalLog.check_before_bump`; cd50018 re-checks the recorded id only when the
    opener has a separate store. One opened WITHOUT the WAL store bumped the epoch, erased
    ``separate_wal_store``/``wal_store_id`` from the manifest, found the main store's empty
    ``wal/`` acceptable and served the stale value; its flush then moved the replay point past
    the acknowledged write kept in the WAL store, lost for every later opener."""
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
    ``CorruptionError`` naming the object, for every opener; nothing is written."""
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
    in the main store")."""
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
