"""A merge operator that raises on replayed WAL operands fails reads of those keys, not the open.

Issue 38 (follow-up, item B): ``Db.open`` replayed the WAL tail by folding each merge operand
onto the key's replayed entry, so an operator that raised (a different operator than the one the
operands were written with, or a changed application operator) made the open fail AFTER the old
writer was fenced: the database could not be opened at all. SlateDB 0.17 does not call the
operator at replay (``wal_replay.rs`` puts every row into the memtable as it is; reads and the
flush fold them): the open succeeds and a read of an affected key raises. Here: the open
succeeds, reads of the affected keys raise MergeOperatorFailed, other keys read normally, and
every acknowledged version survives the flush, so a reopen with the right operator reads it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import MergeOperatorFailed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

PATH = "db"
APPEND = DbOptions(merge_operator="string_append", flush_interval=timedelta(milliseconds=10))


def refuse_b(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """An application operator that refuses operands starting with b"b"."""
    if operand.startswith(b"b"):
        raise ValueError(f"bad operand {operand!r}")
    return (existing or b"") + operand


def crashed_with_operands(store: ObjectStore) -> Db:
    """A writer whose WAL holds acknowledged operands (nothing flushed to L0), then crashed."""
    db = Db.open(PATH, store, APPEND)
    db.put(b"k1", b"base")
    db.merge(b"k1", b"a")
    db.merge(b"k1", b"b")  # refused by refuse_b when folded
    db.merge(b"k1", b"c")
    db.merge(b"k2", b"x")
    db.merge(b"k2", b"y")
    db.put(b"k3", b"plain")
    db.flush()  # the WAL is durable: every write above is acknowledged
    db._simulate_crash()
    return db


@pytest.mark.parametrize(
    "operator",
    [pytest.param(refuse_b, id="raising"), pytest.param("add_int64", id="different")],
)
def test_open_with_a_raising_operator_succeeds_and_fails_only_affected_reads(
    store: ObjectStore, operator: object
) -> None:
    crashed_with_operands(store)
    options = DbOptions(merge_operator=operator, flush_interval=timedelta(milliseconds=10))
    with Db.open(PATH, store, options) as db:
        with pytest.raises(MergeOperatorFailed) as raised:
            db.get(b"k1")
        assert raised.value.key == b"k1"
        assert db.get(b"k3") == b"plain"
        if operator is refuse_b:
            assert db.get(b"k2") == b"xy"
        else:
            with pytest.raises(MergeOperatorFailed):  # add_int64 refuses 1-byte operands
                db.get(b"k2")
        db.flush_memtable()  # the flush keeps every acknowledged version
        with pytest.raises(MergeOperatorFailed):
            db.get(b"k1")
    # no acknowledged write was lost: the right operator reads every one of them
    with Db.open(PATH, store, APPEND) as db:
        assert db.get(b"k1") == b"baseabc"
        assert db.get(b"k2") == b"xy"
        assert db.get(b"k3") == b"plain"


def test_replay_without_flush_keeps_every_operand_for_the_right_operator(
    store: ObjectStore,
) -> None:
    crashed_with_operands(store)
    Db.open(PATH, store, DbOptions(merge_operator=refuse_b)).close()
    with Db.open(PATH, store, APPEND) as db:
        assert db.get(b"k1") == b"baseabc"
        assert db.get(b"k2") == b"xy"


def test_writes_onto_an_unresolved_key_keep_every_version(store: ObjectStore) -> None:
    crashed_with_operands(store)
    with Db.open(PATH, store, DbOptions(merge_operator=refuse_b)) as db:
        db.merge(b"k1", b"d")  # onto the unresolved key: stacked, acknowledged
        with pytest.raises(MergeOperatorFailed):
            db.get(b"k1")
        db.put(b"k2", b"new")  # a put replaces an entry as always
        db.merge(b"k2", b"z")
        assert db.get(b"k2") == b"newz"
    with Db.open(PATH, store, APPEND) as db:
        assert db.get(b"k1") == b"baseabcd"
        assert db.get(b"k2") == b"newz"


def test_a_scan_over_an_unresolved_key_fails_as_its_read_does(store: ObjectStore) -> None:
    crashed_with_operands(store)
    with Db.open(PATH, store, DbOptions(merge_operator=refuse_b)) as db:
        assert dict(db.scan(b"k2", b"k4")) == {b"k2": b"xy", b"k3": b"plain"}
        with pytest.raises(MergeOperatorFailed):
            dict(db.scan())
