"""A separate WAL store with SlateDB 0.17's engine, after the WAL store id (issue 38, items 4
and 5), both directions, on the local filesystem and the S3 server:

* our writer creates a database with ``wal_url``, which puts ``<db>/_wal_store_id`` in the WAL
  store (outside ``wal/``, where SlateDB parses every name as a WAL id): SlateDB opens it with
  its WAL store, reads, writes, runs its GC and reads back; our openers then read SlateDB's writes
  and our writer reopens with the same id;
* SlateDB wrote a database with a WAL store whose latest manifest is the ManifestV1 an earlier
  SlateDB left (``wal_object_store_uri`` = ""): SlateDB opens it with its WAL store and not
  without; ours likewise, our writer's V2 commit keeps the mark, SlateDB reads our writes back.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc.service import run_gc_once
from slatedb_core.layout import wal_store_id_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import DB, Oracle, settings
from tests.interop.oracle_wal import WalStores, wal_stores
from tests.interop.rounds_steps import slate_rounds, slate_tail
from tests.manifest.v1_fixture import encode_v1, from_model

pytestmark = pytest.mark.slatedb

__all__ = ["wal_stores"]  # the fixture, used by name

HOUR = timedelta(hours=1)


def paths(s: WalStores) -> list[str]:
    return sorted(o.path for o in s.wal_store.list(DB))


def test_slatedb_opens_writes_and_collects_our_wal_store(wal_stores: WalStores) -> None:
    s = wal_stores
    model = Model()
    options = DbOptions(flush_interval=HOUR, wal_url=s.wal_url)
    with Db.open(DB, s.store, options) as db:
        for key, value in rows(1, 200):
            db.put(key, value)
            model.put(key, value)
        db.flush_memtable()
        for key, value in rows(2, 30, step=3):
            db.put(key, value)  # only in our WAL
            model.put(key, value)
    sid = ManifestStore(s.store, DB).read_latest().manifest.wal_store_id
    assert sid is not None and wal_store_id_path(DB) in paths(s)
    w = s.oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db, WAL store with our id object")
    slate_rounds(w, model, 2, first=5)
    slate_tail(w, model)
    s.oracle.admin().run_gc(0)  # SlateDB's GC over a WAL store holding our id object
    assert wal_store_id_path(DB) in paths(s)
    r = s.oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader after its GC")
    w.shutdown()
    with DbReader.open(DB, s.store, options=DbReaderOptions(wal_url=s.wal_url)) as ours:
        check_reads(model, ours.get, scanner(ours), who="our DbReader after SlateDB")
    run_gc_once(DB, s.store, GarbageCollectorOptions(min_age=timedelta(0)), wal_url=s.wal_url)
    assert wal_store_id_path(DB) in paths(s)
    with Db.open(DB, s.store, options) as db:  # the same store: the same id
        assert db.manifest.manifest.wal_store_id == sid
        db.put(b"t/ours-again", b"x")
        model.put(b"t/ours-again", b"x")
    w2 = s.oracle.open_db(s=settings(compactor=False))
    check_reads(model, w2.get, w2.scan, who="SlateDB Db after our second writer")


def as_v1_with_wal_store(s: WalStores) -> ManifestStore:
    """Rewrite the latest manifest in place as the ManifestV1 SlateDB before 0.17 left with a
    WAL store configured (``wal_object_store_uri`` = "")."""
    ms = ManifestStore(s.store, DB)
    latest = ms.read_latest()
    v1 = dataclasses.replace(from_model(latest.manifest), wal_object_store_uri="")
    s.store.put(ms.seq.path(latest.id), encode_v1(v1))
    assert s.oracle.admin().latest().wal_object_store_uri == ""
    return ms


def test_a_v1_manifest_with_a_wal_store_both_engines(wal_stores: WalStores) -> None:
    """SlateDB's readers rewrite the manifest (their checkpoints) as V2, which drops the mark, so
    each engine's first opener is checked on a fresh V1."""
    s = wal_stores
    model = Model()
    w = s.oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 2)
    slate_tail(w, model)
    w.shutdown()
    as_v1_with_wal_store(s)
    r = s.oracle.open_reader()
    check_reads(model, r.get, r.scan, who="SlateDB DbReader on V1 with its WAL store")
    r.shutdown()
    ms = as_v1_with_wal_store(s)
    with pytest.raises(WalStoreMissing, match="ManifestV1"):
        DbReader.open(DB, s.store)
    with pytest.raises(WalStoreMissing, match="ManifestV1"):
        Db.open(DB, s.store, DbOptions(flush_interval=HOUR))
    with DbReader.open(DB, s.store, options=DbReaderOptions(wal_url=s.wal_url)) as ours:
        check_reads(model, ours.get, scanner(ours), who="our DbReader on V1, wal_url")
    with Db.open(DB, s.store, DbOptions(flush_interval=HOUR, wal_url=s.wal_url)) as db:
        check_reads(model, db.get, scanner(db), who="our Db on V1, wal_url")
        for key, value in rows(9, 40, step=2):
            db.put(key, value)
            model.put(key, value)
    ours_v2 = ms.read_latest()
    assert ours_v2.version == 2 and ours_v2.manifest.wal_object_store_uri == ""
    with pytest.raises(WalStoreMissing, match="--wal-url"):
        DbReader.open(DB, s.store)
    w2 = s.oracle.open_db(s=settings(compactor=False))
    check_reads(model, w2.get, w2.scan, who="SlateDB Db after our V2 commit")
    w2.shutdown()
    # SlateDB's V2 rewrite dropped the mark (and our table); its fence still tells ours
    assert ms.read_latest().manifest.wal_object_store_uri is None
    with pytest.raises(WalStoreMissing):
        DbReader.open(DB, s.store)


def test_the_wheel_enforces_the_v1_mark_as_we_do(wal_stores: WalStores) -> None:
    """SlateDB 0.17's wheel on the same V1 mark: its reader and writer refuse the database
    without the WAL store ("wal store reconfiguration unsupported", its
    ``validate_wal_object_store_uri``) and write nothing; ours refuse it the same way."""
    s = wal_stores
    w = s.oracle.open_db(s=settings(compactor=False))
    w.put(b"k", b"v")
    w.shutdown()
    ms = as_v1_with_wal_store(s)
    before = sorted(o.path for o in s.store.list(DB))
    with pytest.raises(Exception, match="wal store reconfiguration"):
        Oracle.open_reader(s.oracle)
    with pytest.raises(Exception, match="wal store reconfiguration"):
        Oracle.open_db(s.oracle, s=settings(compactor=False))
    with pytest.raises(WalStoreMissing, match="ManifestV1"):
        DbReader.open(DB, s.store)
    assert sorted(o.path for o in s.store.list(DB)) == before
    assert ms.read_latest().version == 1
