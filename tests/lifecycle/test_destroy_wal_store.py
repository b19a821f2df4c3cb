"""Destroying a database whose WAL is in a separate object store (SlateDB RFC 0009), written by
SlateDB 0.17's engine, on the local filesystem and on the S3 server (issue 38, item 4; the gap
left after it landed: ``destroy`` fenced in and deleted from the main store only, so SlateDB's WAL
objects stayed in the WAL store for ever and its writer's WAL was not fenced).

With ``wal_url``: a hard destroy deletes the WAL objects in the WAL store too; a soft destroy
fences there and the GC, with the WAL store, deletes them after the grace. Without it, both
refuse with ``WalStoreMissing`` and change nothing."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import SlateWriter, settings
from tests.interop.oracle_wal import WalStores, wal_stores

pytestmark = pytest.mark.slatedb

__all__ = ["wal_stores"]  # the fixture, used by name


def paths(store: ObjectStore) -> dict[str, str]:
    return {m.path: m.e_tag or str(m.size) for m in store.list("db")}


def slatedb_wrote(s: WalStores, *, shutdown: bool) -> SlateWriter:
    w = s.oracle.open_db(s=settings(compactor=False))
    for i in range(3):
        w.put(b"k%d" % i, b"v")
        w.flush_memtable()
    w.put(b"tail", b"only in the WAL")
    if shutdown:
        w.shutdown()
    assert any("/wal/" in p for p in paths(s.wal_store))
    return w


def test_hard_destroy_deletes_the_wal_in_the_wal_store(wal_stores: WalStores) -> None:
    s = wal_stores
    slatedb_wrote(s, shutdown=True)
    before = (paths(s.store), paths(s.wal_store))
    with pytest.raises(WalStoreMissing):
        destroy("db", s.store, soft=False)
    assert (paths(s.store), paths(s.wal_store)) == before  # nothing destroyed, nothing deleted
    r = CliRunner().invoke(
        cli, ["--url", s.url, "--path", "db", "--wal-url", s.wal_url, "destroy", "--hard", "-y"]
    )
    assert r.exit_code == 0, r.stderr
    assert paths(s.wal_store) == {}
    assert all("/gc/" in p for p in paths(s.store))  # only the tombstone's boundary files


def test_soft_destroy_fences_in_the_wal_store_and_gc_deletes_it(wal_stores: WalStores) -> None:
    s = wal_stores
    w = slatedb_wrote(s, shutdown=False)  # SlateDB's writer still open
    before = (paths(s.store), paths(s.wal_store))
    with pytest.raises(WalStoreMissing):
        destroy("db", s.store)
    assert (paths(s.store), paths(s.wal_store)) == before
    destroy("db", s.store, wal_url=s.wal_url)
    assert ManifestStore(s.store, "db").read_latest().manifest.destroyed_at_s is not None
    assert not any("/wal/" in p for p in paths(s.store))  # the fence went to the WAL store
    # SlateDB's writer is fenced now: shut it down before the GC deletes the database under it
    # (on S3 its shutdown then retried until the teardown's 60 s limit)
    with contextlib.suppress(sdb.Error, TimeoutError):
        s.oracle.run(asyncio.wait_for(w.db.shutdown(), 10))
    options = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))
    stats = run_gc_once("db", s.store, options, wal_url=s.wal_url)
    assert stats.database_deleted
    assert paths(s.wal_store) == {}
    assert all("/gc/" in p for p in paths(s.store))
