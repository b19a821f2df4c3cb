"""SlateDB features this engine does not implement: merge operands (its merge operator) and rows
with a TTL. Our reads and our compactor refuse them with a typed error instead of serving an
operand as the value, dropping the values beneath it, or making an expiring row live for ever
(docs/format.md, "What each engine ignores of the other's")."""

from __future__ import annotations

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import UnsupportedFeature
from slatedb_core.options import CompactorOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import Oracle, SlateWriter, settings

pytestmark = pytest.mark.slatedb


class _Concat(sdb.MergeOperator):  # type: ignore[misc]
    def merge(self, key: bytes, existing_value: bytes | None, operand: bytes) -> bytes:
        return (existing_value or b"") + operand


def _write_with_merges(oracle: Oracle) -> None:
    builder = sdb.DbBuilder("db", oracle.store())
    builder.with_settings(settings(compactor=False))
    builder.with_merge_operator(_Concat())
    w = SlateWriter(oracle, oracle.run(builder.build()))
    oracle._open.append(w.db.shutdown)
    w.put(b"plain", b"v")
    w.put(b"merged", b"a")
    w.flush_memtable()
    oracle.run(w.db.merge(b"merged", b"b"))
    w.flush_wal()
    w.flush_memtable()  # the operand is now in an L0 SST above the base value's
    assert w.get(b"merged") == b"ab"
    w.shutdown()


def test_our_reads_and_compactor_refuse_merge_operands(oracle: Oracle, store: ObjectStore) -> None:
    _write_with_merges(oracle)
    reader = DbReader.open("db", store, options=DbReaderOptions())
    try:
        assert reader.get(b"plain") == b"v"  # a key without operands reads as usual
        with pytest.raises(UnsupportedFeature, match="merge operand"):
            reader.get(b"merged")
        with pytest.raises(UnsupportedFeature, match="merge operand"):
            list(reader.scan())
    finally:
        reader.close()
    with pytest.raises(UnsupportedFeature, match="merge operand"):
        run_compaction_once("db", store, CompactorOptions(l0_trigger=1))
    # nothing was rewritten: SlateDB (with its merge operator) still reads the merged value
    builder = sdb.DbReaderBuilder("db", oracle.store())
    builder.with_merge_operator(_Concat())
    r = oracle.run(builder.build())
    try:
        assert oracle.run(r.get(b"merged")) == b"ab"
    finally:
        oracle.run(r.shutdown())


def test_our_compactor_refuses_rows_with_a_ttl(oracle: Oracle, store: ObjectStore) -> None:
    w = oracle.open_db(s=settings(compactor=False))
    w.put(b"plain", b"v")
    w.flush_memtable()
    w.put_ttl(b"ttl", b"expires-in-an-hour", 3_600_000)
    w.flush_memtable()
    w.shutdown()
    with pytest.raises(UnsupportedFeature, match="TTL"):
        run_compaction_once("db", store, CompactorOptions(l0_trigger=1))
    r = oracle.open_reader()
    assert r.get(b"ttl") == b"expires-in-an-hour"  # nothing was rewritten
