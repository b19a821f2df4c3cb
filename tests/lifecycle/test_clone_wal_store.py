"""Cloning a database whose WAL is in a separate object store (SlateDB RFC 0009), written by
SlateDB 0.17's engine, on the local filesystem and on the S3 server (issue 38, item 4; the gap
left after it landed: the clone looked for its parent's WAL in the main store).

With ``parent_wal_url`` the clone reads the parent's WAL from the WAL store and keeps its own
copy in the same WAL store at the clone's path, as SlateDB's clone with a WAL object store does
(one WAL admin for source and clone), and its manifest records it, so a reader of the clone
needs the WAL store too (our reader without it: WalStoreMissing). Without it the clone is
refused with ``WalStoreMissing`` before anything is written: never a clone missing part of its
WAL."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import WalStoreMissing
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.expect import Model, check_reads, scanner
from tests.interop.oracle import settings
from tests.interop.oracle_wal import WalStores, wal_stores
from tests.interop.rounds_steps import slate_rounds

pytestmark = pytest.mark.slatedb

__all__ = ["wal_stores"]  # the fixture, used by name


def paths(store: ObjectStore) -> dict[str, str]:
    return {m.path: m.e_tag or str(m.size) for m in store.list("")}


def test_clone_of_a_database_with_a_wal_store(wal_stores: WalStores) -> None:
    s = wal_stores
    model = Model()
    w = s.oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 2)
    for i in range(5):  # durable writes in WAL SSTs of the WAL store
        w.put(b"w/%d" % i, b"in the WAL")
        model.put(b"w/%d" % i, b"in the WAL")
    cp = s.oracle.admin().create_checkpoint()  # SlateDB's checkpoint: it flushes nothing
    with DbReader.open(
        "db", s.store, cp, DbReaderOptions(mode=ReaderMode.CHECKPOINT, wal_url=s.wal_url)
    ) as reader:
        at_checkpoint = list(reader.scan())
    before = (paths(s.store), paths(s.wal_store))
    with pytest.raises(WalStoreMissing):
        create_clone("clone", "db", s.store, cp)
    assert (paths(s.store), paths(s.wal_store)) == before  # nothing written
    r = CliRunner().invoke(
        cli,
        ["--url", s.url, "--path", "clone2", "--wal-url", s.wal_url, "clone", "--parent", "db"],
    )
    assert r.exit_code == 0, r.stderr
    create_clone("clone", "db", s.store, cp, parent_wal_url=s.wal_url)
    with_wal = DbReaderOptions(wal_url=s.wal_url)
    with pytest.raises(WalStoreMissing):
        DbReader.open("clone", s.store, options=DbReaderOptions())
    with DbReader.open("clone", s.store, options=with_wal) as clone:
        assert list(clone.scan()) == at_checkpoint
    expected = Model()
    for k, v in at_checkpoint:
        expected.put(k, v)
    slate = s.oracle.open_reader("clone")  # with the WAL store
    check_reads(expected, slate.get, slate.scan, who="SlateDB DbReader of the clone")
    with DbReader.open("clone2", s.store, options=with_wal) as clone2:
        # the CLI's clone of the latest state holds SlateDB's WAL tail, copied from the WAL store
        check_reads(model, clone2.get, scanner(clone2), who="our reader of the CLI's clone")
