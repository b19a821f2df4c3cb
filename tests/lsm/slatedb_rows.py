"""A SlateDB 0.17 database (written by the real wheel, :mod:`tests.interop.oracle`) whose SSTs hold
everything SlateDB stores per row (issue 38, items 1 and 6): TTL rows (one live, one that has
expired by the time a test rewrites it), merge operands (over a base, without one, with an expiry
of their own) and versions a live snapshot still reads. The rewrite-path tests
(``tests/lsm/test_rewrite_registry.py``, ``tests/interop/test_ingest_rows.py``) run every path
over it and check what each keeps.

What the SSTs hold (SlateDB's flush folds operands at or below the snapshot and expires rows, so
the shapes are what SlateDB itself writes)::

    m      c (operand, above the snapshot)   ab (value: a + b folded at the flush)
    mt     +1 (operand, own expiry)          base (value: the differing expiry stops the fold)
    o      y (operand)                       x (operand: nothing to fold onto)
    p      plain
    s      v2                                v1 (the snapshot's)
    t-dead D, expired by the time DEAD_AFTER_S has passed
    t-live L, expiring in an hour
    zz     outside (written with the rows above s's v2 in one batch: one WAL SST)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.lsm.merge_operator import string_append
from tests.interop.oracle import Oracle, SlateWriter, settings

HOUR_MS = 3_600_000
DEAD_TTL_MS = 700
"""t-dead's TTL: it outlives SlateDB's flush (a few ms), not the test."""

OUTSIDE = b"zz"
"""A key outside :data:`CLONE_RANGE`, written in the WAL SST holding the operands and TTLs."""
LATEST: dict[bytes, bytes | None] = {
    b"m": b"abc",
    b"mt": b"base+1",
    b"o": b"xy",
    b"p": b"plain",
    b"s": b"v2",
    b"t-dead": None,  # expired: a rewrite turns it into a tombstone (or keeps its expire_ts)
    b"t-live": b"L",
    OUTSIDE: b"outside",
}
"""What a read of each key returns once t-dead has expired (string append operator)."""
AT_SNAPSHOT: dict[bytes, bytes | None] = {b"m": b"ab", b"o": b"x", b"s": b"v1"}
"""What the live snapshot reads of the keys written since it was taken."""


class Append(sdb.MergeOperator):  # type: ignore[misc]  # the wheel's class is untyped
    """SlateDB's side of :func:`~slatedb_core.lsm.merge_operator.string_append`."""

    def merge(self, key: bytes, existing_value: bytes | None, operand: bytes) -> bytes:
        return string_append(key, existing_value, operand)


@dataclass
class RichDb:
    writer: SlateWriter
    """SlateDB's writer, still open: it holds the snapshot (compactor and GC off)."""
    snapshot: sdb.DbSnapshot
    snapshot_seq: int
    """The highest seq the snapshot reads."""
    t_dead_expire_ts: int
    t_live_expire_ts: int


def _ttl(ms: int) -> sdb.Ttl:
    return sdb.Ttl.EXPIRE_AFTER_MILLIS(ms)


def _write(w: SlateWriter, batch: sdb.WriteBatch) -> None:
    async def run() -> None:
        handle = await w.db.write(batch)
        await handle.await_durable()

    w.oracle.run(run())


def open_merging(oracle: Oracle, path: str = "db") -> SlateWriter:
    """SlateDB's writer of ``path`` with the string-append operator, its compactor and GC off."""
    builder = sdb.DbBuilder(path, oracle.store())
    builder.with_settings(settings(compactor=False))
    builder.with_merge_operator(Append())
    return SlateWriter(oracle, oracle.run(builder.build()))


@contextmanager
def rich_db(oracle: Oracle, path: str = "db") -> Iterator[RichDb]:
    """Write the rows of the module doc with SlateDB and flush them to ONE L0 SST (the WAL SSTs
    hold them too, unfolded); the writer stays open holding the snapshot until the block ends.
    The caller waits :func:`wait_dead` before a rewrite that should see t-dead expired."""
    w = open_merging(oracle, path)
    try:
        w.put(b"m", b"a")
        before = sdb.WriteBatch()
        before.merge(b"m", b"b")
        before.merge(b"o", b"x")
        before.put(b"mt", b"base")
        before.put(b"s", b"v1")
        before.put(b"p", b"plain")
        _write(w, before)
        snap = w.snapshot()
        snapshot_seq = oracle.run(w.db.get_key_value(b"p")).seq
        # one batch: one WAL SST holding every kind of row (and a key a clone's range leaves out)
        after = sdb.WriteBatch()
        after.merge(b"m", b"c")
        after.merge(b"o", b"y")
        after.merge_with_options(b"mt", b"+1", sdb.MergeOptions(ttl=_ttl(HOUR_MS)))
        after.put(b"s", b"v2")
        after.put_with_options(b"t-live", b"L", sdb.PutOptions(ttl=_ttl(HOUR_MS)))
        after.put_with_options(b"t-dead", b"D", sdb.PutOptions(ttl=_ttl(DEAD_TTL_MS)))
        after.put(OUTSIDE, b"outside")
        _write(w, after)
        live = oracle.run(w.db.get_key_value(b"t-live")).expire_ts
        dead = oracle.run(w.db.get_key_value(b"t-dead")).expire_ts
        w.flush_wal()
        w.flush_memtable()
        yield RichDb(w, snap, snapshot_seq, dead, live)
    finally:
        try:
            w.shutdown()
        except sdb.Error:
            pass


def wait_dead(db: RichDb) -> None:
    """Sleep until t-dead has expired (by the wall clock both engines use)."""
    left = db.t_dead_expire_ts / 1000 - time.time()
    if left > -0.01:
        time.sleep(left + 0.02)
