"""We write TTL rows and merge operands, SlateDB 0.17 reads (issue 38, items 1 and 2, write side).

Our writer and SlateDB's own (the ``slatedb`` wheel, ``string_append`` as a Python merge operator
through ``DbBuilder.with_merge_operator``) make the same writes into two databases: puts with and
without TTLs (some expired before the memtable is flushed), merges onto values, tombstones and
nothing, merges with TTLs, write batches mixing puts, deletes and merges of one key, and (ours)
a ``put_arrow`` with a TTL column where SlateDB writes the same rows as one batch. SlateDB's
reader, with the operator, must then read our database exactly as it reads its own, key by key
and by scan: from the WAL (nothing flushed), after our L0 flush (which applies SlateDB's flush
retention: expired values are tombstones, expired operands gone), and after our writer crashed
with the rows only in the WAL and a new writer of ours replayed and flushed them.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, SlateWriter
from tests.interop.oracle_merge import Op, open_reader_at, ours_write, slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = pytest.mark.slatedb

SHORT = 1
LONG = 3_600_000
OURS = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")

WRITES: list[list[Op]] = [
    [("put", b"v", b"base", None)],
    [("merge", b"v", b"+1", None)],
    [("merge", b"v", b"+2", LONG)],
    [("merge", b"o", b"a", None)],
    [("merge", b"o", b"b", None)],
    [("delete", b"t", None, None)],
    [("merge", b"t", b"z", None)],
    [("put", b"bb", b"B", None), ("merge", b"bb", b"+", None), ("delete", b"x", None, None)],
    [("merge", b"b2", b"!", LONG), ("put", b"b3", b"3", LONG)],
    [("put", b"ttl-long", b"L", LONG)],
    [("put", b"ttl-short", b"S", SHORT)],
    [("put", b"mt", b"M", None)],
    [("merge", b"mt", b"x", SHORT)],
    [("merge", b"ms", b"only", SHORT)],
]
ARROW: list[Op] = [
    ("put", b"a1", b"A1", LONG),
    ("put", b"a2", b"A2", SHORT),
    ("put", b"a3", b"A3", None),
    ("delete", b"a4", None, None),
]
LAST: list[Op] = [("put", b"last", b"Z", LONG)]
"""Written after the short TTLs passed: the memtable's last tick, at which both flushes expire."""

KEYS = sorted({op[1] for w in [*WRITES, ARROW, LAST] for op in w} | {b"absent"})


def ours_all(db: Db) -> None:
    for ops in WRITES:
        ours_write(db, ops)
    table = pa.table(
        {
            "key": [op[1] for op in ARROW],
            "value": [op[2] for op in ARROW],
            "ttl": pa.array([op[3] for op in ARROW], pa.int64()),
        }
    )
    db.put_arrow(table, ttl_column="ttl")
    time.sleep(0.02)
    ours_write(db, LAST)


def theirs_all(w: SlateWriter) -> None:
    for ops in WRITES:
        slatedb_write(w, ops)
    slatedb_write(w, ARROW)
    time.sleep(0.02)
    slatedb_write(w, LAST)


def slatedb_reads(oracle: Oracle, path: str) -> tuple[dict[bytes, bytes | None], list[object]]:
    reader = open_reader_at(oracle, path, StringAppend())
    gets = {k: reader.get(k) for k in KEYS}
    scan: list[object] = list(reader.scan())
    reader.shutdown()
    return gets, scan


WAL_EXPECTED = {
    b"v": b"base+1+2",
    b"o": b"ab",
    b"t": b"z",
    b"bb": b"B+",
    b"x": None,
    b"b2": b"!",
    b"mt": b"Mx",
    b"ms": b"only",
    b"ttl-short": b"S",
    b"a2": b"A2",
    b"a4": None,
}
"""What SlateDB reads before any flush: reads apply no TTL (an expired row reads as written)."""
L0_EXPECTED = {**WAL_EXPECTED, b"mt": b"M", b"ms": None, b"ttl-short": None, b"a2": None}
"""After a memtable flush: expired values are tombstones, expired operands are dropped."""


def test_slatedb_reads_our_ttls_and_merges_as_its_own(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    twin = open_merge_db(oracle, StringAppend(), path="twin")
    theirs_all(twin)
    twin.flush_wal()
    want_wal = slatedb_reads(oracle, "twin")
    assert {k: want_wal[0][k] for k in WAL_EXPECTED} == WAL_EXPECTED
    twin.flush_memtable()
    want_l0 = slatedb_reads(oracle, "twin")
    assert {k: want_l0[0][k] for k in L0_EXPECTED} == L0_EXPECTED
    twin.shutdown()

    with Db.open("db", store, OURS) as db:
        ours_all(db)
        db.flush()
        assert slatedb_reads(oracle, "db") == want_wal  # from our WAL
        db.flush_memtable()
        assert slatedb_reads(oracle, "db") == want_l0  # from our L0 SST

    crashed = Db.open("crash", store, OURS)
    ours_all(crashed)
    crashed.flush()
    crashed._simulate_crash()
    with Db.open("crash", store, OURS) as again:  # replays the WAL into its memtable
        assert slatedb_reads(oracle, "crash") == want_wal
        again.flush_memtable()
        assert slatedb_reads(oracle, "crash") == want_l0
