"""A database our writer keeps its WAL for in a separate store (``DbOptions.wal_url``, SlateDB RFC
0009) is refused by an opener without that store, even before any flush records a WAL id in the
manifest (issue 38 item 4; found by the surfaces helper: a table snapshot of such a shard read
no rows at all, silently)."""

from __future__ import annotations

import uuid

import pytest

from slatedb_core.errors import WalStoreMissing
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


def test_our_writer_marks_a_separate_wal_store(mem: ObjectStore) -> None:
    wal_url = f"memory://wal-{uuid.uuid4().hex}"
    db = Db.open("db", mem, DbOptions(wal_url=wal_url))
    db.put(b"k", b"acknowledged")  # durable in the WAL store; no flush records it
    db._simulate_crash()
    with pytest.raises(WalStoreMissing):
        DbReader.open("db", mem)
    with pytest.raises(WalStoreMissing):
        Db.open("db", mem)
    with DbReader.open("db", mem, options=DbReaderOptions(wal_url=wal_url)) as r:
        assert r.get(b"k") == b"acknowledged"
    assert open_store(wal_url).list("db/wal")
