"""The ``both_stores`` fixture: SlateDB's engine and ours meet on the local filesystem and on the
S3 server (issue 38: every data-model test runs on both)."""

from __future__ import annotations

from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import DB, Oracle


def test_slatedb_writes_we_read_on_both_stores(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    w = oracle.open_db()
    w.put(b"k", b"v")
    w.shutdown()
    with DbReader.open(DB, store) as r:
        assert r.get(b"k") == b"v"
