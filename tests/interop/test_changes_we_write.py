"""We write; SlateDB 0.17's own WAL reader (RFC 0019, the wheel's ``SlateDbWalReader``) reads the
same changes our feed does, row for row (issue 43, item 1, the reverse direction).

Our ``Db`` writes puts, deletes, a write batch, TTL rows and merge operands over several WAL
SSTs with an L0 flush between them; SlateDB's WAL reader, iterated from WAL SST 1 to the tail,
must return the rows our ``changes`` returns, in the same order, with the same kind, value, seq
and timestamps, on the local filesystem and on S3.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.feed import ChangeFeed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop.oracle import DB, Oracle
from tests.interop.oracle_changes import Row, slatedb_wal_rows

pytestmark = pytest.mark.slatedb

QUIET = DbOptions(flush_interval=timedelta(hours=1), merge_operator="add_int64")


def write(store: ObjectStore) -> None:
    with Db.open(DB, store, QUIET) as db:
        for r in range(4):
            db.put(b"k%d" % r, b"v%d" % r)
            db.put(b"t%d" % r, b"ttl", ttl=timedelta(minutes=5))
            db.merge(b"n", (r + 1).to_bytes(8, "little"))
            batch = WriteBatch()
            batch.put(b"b%d" % r, b"x")
            batch.delete(b"k%d" % r)
            db.write(batch)
            if r == 1:
                db.flush_memtable()


def test_slatedb_wal_reader_reads_what_our_feed_reads(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    write(store)
    ours: list[Row] = [
        (r["key"], r["op"], r["value"], r["seq"], r["create_ts"], r["expire_ts"])
        for b in ChangeFeed(DB, store).changes()
        for r in b.rows.to_pylist()
    ]
    assert len(ours) == 4 * 5
    assert [r[1] for r in ours[:5]] == ["put", "put", "merge", "put", "delete"]
    assert slatedb_wal_rows(oracle) == ours
