"""Reads fold merge operands as SlateDB 0.17 does (issue 38, items 1 and 2, read side).

A key whose newest row is a merge operand reads as its operands, newest first down to its first
value or tombstone, folded oldest first onto that value (None for a tombstone or no base), over
every source (memtables, L0, sorted runs, several versions of the key in one SST, a reader's
replayed WAL). Without a merge operator a read of such a key raises ``MergeOperatorMissing``
naming it, and only it. The stream-level pieces are checked with crafted batches; the engine's
with our own writer (the interop with SlateDB's writer is in
tests/interop/test_ttl_merge_slatedb_writes.py)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import MergeOperatorMissing
from slatedb_core.lsm.entries import ENTRY_SCHEMA, KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.lsm.iterators import merge_sorted, newest_versions
from slatedb_core.lsm.merge_operator import string_append
from slatedb_core.lsm.version_table import VersionTable
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

V, T, M = KIND_VALUE, KIND_TOMBSTONE, KIND_MERGE


def batch(rows: list[tuple[bytes, int, int, bytes | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [{"key": k, "seq": s, "kind": kind, "value": v} for k, s, kind, v in rows],
        schema=ENTRY_SCHEMA,
    )


def rows_of(batches: list[pa.RecordBatch]) -> list[tuple[bytes, int]]:
    return [(r["key"], r["seq"]) for b in batches for r in b.to_pylist()]


def test_newest_versions_keeps_operand_chains_across_batches() -> None:
    """A chain cut by a batch boundary is held back whole; a closed key's older rows in the
    next batch go; keys without operands keep only their newest row."""
    b1 = batch([(b"a", 9, V, b"x"), (b"a", 8, V, b"y"), (b"b", 9, M, b"2"), (b"b", 8, M, b"1")])
    b2 = batch([(b"b", 7, V, b"0"), (b"b", 6, M, b"z"), (b"c", 9, V, b"c"), (b"c", 8, M, b"q")])
    b3 = batch([(b"c", 7, V, b"old"), (b"d", 5, M, b"d")])
    out = list(newest_versions([b1, b2, b3], keep_operands=True))
    assert rows_of(out) == [(b"a", 9), (b"b", 9), (b"b", 8), (b"b", 7), (b"c", 9), (b"d", 5)]
    with_b = [b.column(0).to_pylist() for b in out if b"b" in b.column(0).to_pylist()]
    assert len(with_b) == 1 and with_b[0].count(b"b") == 3  # b's chain whole in one batch
    assert rows_of(list(newest_versions([b1, b2, b3]))) == [
        (b"a", 9),
        (b"b", 9),
        (b"c", 9),
        (b"d", 5),
    ]


def test_merge_sorted_folds_chains_over_sources() -> None:
    newer = [batch([(b"a", 20, M, b"3"), (b"b", 20, M, b"y"), (b"c", 20, V, b"c")])]
    older = [batch([(b"a", 10, M, b"2"), (b"a", 9, V, b"1"), (b"b", 10, T, None)])]
    oldest = [batch([(b"a", 5, V, b"never"), (b"b", 5, V, b"gone"), (b"d", 5, M, b"d")])]
    sources = [newer, newest_versions(older, keep_operands=True), oldest]
    got = [r for b in merge_sorted(sources, merge_operator=string_append) for r in b.to_pylist()]
    assert [(r["key"], r["value"]) for r in got] == [
        (b"a", b"123"),  # folded onto the first value, older ones unread
        (b"b", b"y"),  # onto a tombstone: onto nothing
        (b"c", b"c"),
        (b"d", b"d"),  # no base at all
    ]
    with pytest.raises(MergeOperatorMissing) as e:
        list(merge_sorted([newer, older]))
    assert e.value.key == b"a"


def test_version_table_answers_reads() -> None:
    t = VersionTable(
        batch([(b"a", 1, V, b"1"), (b"a", 2, M, b"2"), (b"a", 3, M, b"3"), (b"b", 4, V, b"b")])
    )
    found = t.get(b"a")
    assert found is not None and found.kind == M and found.seq == 3
    assert [v.seq for v in t.versions(b"a")] == [3, 2, 1]
    assert t.get(b"z") is None
    assert rows_of(list(t.scan(b"a", b"b"))) == [(b"a", 3), (b"a", 2), (b"a", 1)]
    assert [v.seq for v in t.newer_than(1).versions(b"a")] == [3, 2]


OPS = DbOptions(flush_interval=timedelta(milliseconds=10), merge_operator="string_append")


def _history(db: Db) -> dict[bytes, bytes | None]:
    """Operands over a flushed value, over a flushed tombstone, over nothing, and in one batch;
    what every key reads."""
    db.put(b"k-base", b"b")
    db.put(b"k-del", b"gone")
    db.delete(b"k-del")
    db.put(b"k-plain", b"p")
    db.merge(b"k-base", b"1")
    db.flush()  # L0
    db.merge(b"k-base", b"2")
    db.merge(b"k-del", b"d")
    db.merge(b"k-none", b"n")
    db.merge(b"k-none", b"m")
    return {
        b"k-base": b"b12",
        b"k-del": b"d",
        b"k-none": b"nm",
        b"k-plain": b"p",
        b"k-zzz": None,
    }


def _check(reader: Db | DbReader, want: dict[bytes, bytes | None]) -> None:
    keys = list(want)
    assert [reader.get(k) for k in keys] == list(want.values())
    assert reader.get_many(keys) == list(want.values())
    live = [(k, v) for k, v in want.items() if v is not None]
    assert list(reader.scan()) == live
    t = reader.scan_arrow(batch_size=2).read_all()
    assert list(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True)) == live


def test_db_and_reader_fold_operands_over_every_source() -> None:
    store = open_store("memory://")
    with Db.open("db", store, OPS) as db:
        want = _history(db)
        _check(db, want)  # memtable over L0
        r = DbReader.open("db", store, options=DbReaderOptions(merge_operator="string_append"))
        try:
            _check(r, want)  # the replayed WAL over L0
        finally:
            r.close()
        db.flush()
        _check(db, want)  # all in L0


def test_without_an_operator_only_operand_keys_fail() -> None:
    store = open_store("memory://")
    with Db.open("db", store, OPS) as db:
        want = _history(db)
    r = DbReader.open("db", store, options=DbReaderOptions())  # opens: operands are per key
    try:
        assert r.get(b"k-plain") == b"p" and r.get(b"k-zzz") is None
        assert r.get_many([b"k-plain", b"k-zzz"]) == [b"p", None]
        for k in (b"k-base", b"k-del", b"k-none"):
            with pytest.raises(MergeOperatorMissing) as e:
                r.get(k)
            assert e.value.key == k
        with pytest.raises(MergeOperatorMissing):
            list(r.scan())
        assert list(r.scan(b"k-p")) == [(b"k-plain", b"p")]
    finally:
        r.close()
    assert want[b"k-plain"] == b"p"
