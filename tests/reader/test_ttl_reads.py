"""Rows with a TTL read as SlateDB 0.17 reads them (issue 38, item 1, read side).

SlateDB 0.17 applies no TTL on read (its reads do not look at ``expire_ts`` since it removed TTL
read-filtering; only a compaction, or a memtable flush at the memtable's last clock tick, drops an
expired row; tests/interop/test_ttl_merge_slatedb_writes.py checks it against the wheel). Every
read path of ours must therefore return an expired row's value while the row is where the write
left it: the active memtable (``get``, ``get_many`` under the writer lock, ``scan``,
``scan_arrow``), L0 after a flush, and a reader's replayed WAL."""

from __future__ import annotations

import time
from datetime import timedelta

from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(milliseconds=10))
KEYS = [b"a-plain", b"b-short", b"c-long", b"d-none"]


def _write(db: Db) -> None:
    db.put(b"a-plain", b"p")
    db.put(b"b-short", b"s", ttl=50)
    db.put(b"c-long", b"l", ttl=timedelta(hours=1))
    time.sleep(0.06)  # b-short's expire_ts is past (the flush's tick, the last write, is not)


def _check(reader: Db | DbReader) -> None:
    want = [b"p", b"s", b"l", None]
    assert [reader.get(k) for k in KEYS] == want
    assert reader.get_many(KEYS) == want
    assert reader.get_many(list(reversed(KEYS))) == list(reversed(want))
    assert list(reader.scan()) == [(b"a-plain", b"p"), (b"b-short", b"s"), (b"c-long", b"l")]
    table = reader.scan_arrow().read_all()
    assert table.column(0).to_pylist() == [b"a-plain", b"b-short", b"c-long"]


def test_expired_rows_in_the_active_memtable_read_as_written() -> None:
    store = open_store("memory://")
    with Db.open("db", store, QUIET) as db:
        _write(db)
        _check(db)


def test_expired_rows_in_l0_and_a_readers_wal_read_as_written() -> None:
    store: ObjectStore = open_store("memory://")
    with Db.open("db", store, QUIET) as db:
        _write(db)
        reader = DbReader.open("db", store, options=DbReaderOptions())  # the WAL tail
        try:
            _check(reader)
        finally:
            reader.close()
        db.flush()
        _check(db)  # from L0: the flush's tick is the newest write, before c-long expires
