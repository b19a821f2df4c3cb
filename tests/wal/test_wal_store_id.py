"""The id of a separate WAL store (issue 38, item 4; the strict xfail of
``tests/wal/test_wal_store_checks.py``): our writer records it in the manifest
(``Manifest.wal_store_id``) and in ``<db>/_wal_store_id`` of the WAL store, so every opener given
*another* separate WAL store is refused with ``WalStoreMissing`` even before an L0 flush records
any WAL id: reader, writer, GC, checkpoint and CLI. A writer that died between its epoch bump and
its fence stays openable with the right store; GC keeps the id object; a database without a
separate store pays no request for it. On the local filesystem and on the S3 server."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.cli.main import cli
from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc.service import run_gc_once
from slatedb_core.layout import wal_store_id_path
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db
from slatedb_core.writer.recovery import bump_epoch
from tests.conftest import MotoS3

HOUR = timedelta(hours=1)


@dataclass
class Stores:
    """A main store and two separate WAL stores: ``right`` (the database's) and ``wrong``."""

    main: ObjectStore
    url: str
    right: str
    wrong: str


@pytest.fixture(
    params=[pytest.param("local", id="local"), pytest.param("s3", id="s3", marks=pytest.mark.s3)]
)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "local":
        urls = []
        for name in ("main", "right", "wrong"):
            (tmp_path / name).mkdir()
            urls.append((tmp_path / name).as_uri())
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        urls = [moto.url(moto.new_bucket()) for _ in range(3)]
    yield Stores(open_store(urls[0]), urls[0], urls[1], urls[2])


def crashed_writer(s: Stores) -> None:
    """Our writer with the WAL store ``right`` acknowledges a write and dies before any L0
    flush: the write is only in ``right``'s WAL, and the manifest records no WAL id."""
    db = Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right))
    db.put(b"k", b"acknowledged")
    db._simulate_crash()
    m = ManifestStore(s.main, "db").read_latest().manifest
    assert m.replay_after_wal_id >= max(m.wal_id_last_seen, m.next_wal_sst_id - 1)


def listing(url: str) -> list[str]:
    return sorted(o.path for o in open_store(url).list(""))


def test_every_opener_with_another_wal_store_is_refused(stores: Stores) -> None:
    s = stores
    crashed_writer(s)
    before = listing(s.wrong), listing(s.url)
    with pytest.raises(WalStoreMissing, match="_wal_store_id"):
        DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.wrong))
    with pytest.raises(WalStoreMissing):
        Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.wrong))
    with pytest.raises(WalStoreMissing):
        run_gc_once("db", s.main, GarbageCollectorOptions(min_age=timedelta(0)), wal_url=s.wrong)
    with pytest.raises(WalStoreMissing):
        create_checkpoint("db", s.main, wal_url=s.wrong)
    for args in (("scan",), ("get", "k")):
        out = CliRunner().invoke(cli, ["--url", s.url, "--path", "db", "--wal-url", s.wrong, *args])
        assert out.exit_code == 1 and "WalStoreMissing" in out.stderr, (args, out.stderr)
    assert (listing(s.wrong), listing(s.url)) == before  # nothing written anywhere
    with DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.right)) as r:
        assert r.get(b"k") == b"acknowledged"
    with Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right)) as db:
        assert db.get(b"k") == b"acknowledged"


def test_a_writer_dead_between_bump_and_fence_opens_with_its_store(stores: Stores) -> None:
    """The state the check skips our own epoch for: the newest writer's bump is in the manifest
    and its fence is not. Its WAL store's id object was created before the bump, so the right
    store opens it and another one is refused."""
    s = stores
    crashed_writer(s)
    wal = WalLog(WalLocation.open(s.main, s.right), "db")
    fm = bump_epoch(ManifestStore(s.main, "db"), 1, wal=wal)  # ... and dies before its fence
    assert fm.stored.manifest.wal_store_id is not None
    with pytest.raises(WalStoreMissing):
        DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.wrong))
    with DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.right)) as r:
        assert r.get(b"k") == b"acknowledged"
    with Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right)) as db:
        assert db.get(b"k") == b"acknowledged"


def test_a_conditional_bump_with_another_wal_store_is_refused(stores: Stores) -> None:
    """The table layer's conditional open (``if_manifest_id``) bumps with no check before it:
    the bump itself compares the store's id with the one the manifest records."""
    s = stores
    crashed_writer(s)
    ms = ManifestStore(s.main, "db")
    latest = ms.read_latest()
    wrong = WalLog(WalLocation.open(s.main, s.wrong), "db")
    with pytest.raises(WalStoreMissing):
        bump_epoch(ms, 1, if_manifest_id=latest.id, wal=wrong)
    assert ms.read_latest().id == latest.id and listing(s.wrong) == []
    right = WalLog(WalLocation.open(s.main, s.right), "db")
    assert bump_epoch(ms, 1, if_manifest_id=latest.id, wal=right).stored.id == latest.id + 1


def test_gc_keeps_the_id_and_the_store_stays_recognised(stores: Stores) -> None:
    s = stores
    with Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right)) as db:
        for i in range(6):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()
        db.put(b"tail", b"only in the WAL")
    stats = run_gc_once(
        "db", s.main, GarbageCollectorOptions(min_age=timedelta(0)), wal_url=s.right
    )
    assert stats.wal.deleted > 0
    assert wal_store_id_path("db") in listing(s.right)
    with pytest.raises(WalStoreMissing):
        DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.wrong))
    with DbReader.open("db", s.main, options=DbReaderOptions(wal_url=s.right)) as r:
        assert r.get(b"tail") == b"only in the WAL"


def test_a_clone_in_the_wal_store_has_its_own_id(stores: Stores) -> None:
    """A clone's WAL lives in its parent's WAL store under the clone's path: the parent's id
    (which names the parent's path) is not the clone's; its writer records its own."""
    s = stores
    with Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right)) as db:
        db.put(b"k", b"parent")
    clone = create_clone("clone", "db", s.main, parent_wal_url=s.right)
    assert clone.wal_store_id is None and clone.separate_wal_store
    with Db.open("clone", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right)) as db:
        assert db.get(b"k") == b"parent"
        db.put(b"c", b"clone")
    with DbReader.open("clone", s.main, options=DbReaderOptions(wal_url=s.right)) as r:
        assert r.get(b"c") == b"clone"
    with pytest.raises(WalStoreMissing):
        DbReader.open("clone", s.main, options=DbReaderOptions(wal_url=s.wrong))


def test_the_check_costs_one_get_and_none_without_an_id(tmp_path: Path) -> None:
    """One GET of the id object per location and database, only when the manifest records an
    id and a separate store is given; none for a manifest without one."""
    main = open_store((tmp_path / "main").as_uri())
    wal_url = (tmp_path / "wal").as_uri()
    with Db.open("db", main, DbOptions(flush_interval=HOUR, wal_url=wal_url)) as db:
        db.put(b"k", b"v")
    m = ManifestStore(main, "db").read_latest().manifest
    assert m.wal_store_id is not None
    for recorded, gets in ((m, 1), (dataclasses.replace(m, wal_store_id=None), 0)):
        sep = open_store(wal_url)
        wal = WalLog(WalLocation(main, sep), "db")
        before = sep.counters.snapshot().get("get", 0)
        for _ in range(3):
            wal.list_live(recorded)
            wal.check_present(recorded, ())
        assert sep.counters.snapshot().get("get", 0) - before == gets


def test_a_hard_destroy_leaves_nothing_in_the_wal_store(stores: Stores) -> None:
    """Issue 38 review 2: a hard destroy given the WAL store deleted the database's WAL SSTs there
    but kept its ``_wal_store_id``, which a new database at the same path then adopted."""
    s = stores
    db = Db.open("db", s.main, DbOptions(flush_interval=HOUR, wal_url=s.right))
    db.put(b"k", b"v")
    db.close()
    assert wal_store_id_path("db") in listing(s.right)
    Db.destroy("db", s.main, soft=False, wal_url=s.right)
    assert listing(s.right) == []
