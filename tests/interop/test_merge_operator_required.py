"""A database with SlateDB merge operands, opened without a merge operator: reads of an operand's
key and compactions over it fail with MergeOperatorMissing instead of serving an operand as the
value or dropping the values beneath it; other keys read as usual (SlateDB's
MergeOperatorRequiredIterator). Rows with a TTL are compacted keeping their expire_ts (issue 38:
both were refused whole before)."""

from __future__ import annotations

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import MergeOperatorMissing, UnsupportedFeature
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.sst import SstReader
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


def test_without_an_operator_operand_keys_and_their_compaction_fail(
    oracle: Oracle, store: ObjectStore
) -> None:
    _write_with_merges(oracle)
    reader = DbReader.open("db", store, options=DbReaderOptions())
    try:
        assert reader.get(b"plain") == b"v"  # a key without operands reads as usual
        with pytest.raises(MergeOperatorMissing) as e:
            reader.get(b"merged")
        assert e.value.key == b"merged"
        with pytest.raises(MergeOperatorMissing):
            list(reader.scan())
    finally:
        reader.close()
    before = ManifestStore(store, "db").read_latest().manifest
    with pytest.raises(MergeOperatorMissing):
        run_compaction_once("db", store, CompactorOptions(l0_trigger=1))
    assert isinstance(MergeOperatorMissing(b"k"), UnsupportedFeature)
    # with the operator, the same database reads the folded value
    with DbReader.open("db", store, options=DbReaderOptions(merge_operator="string_append")) as r:
        assert r.get(b"merged") == b"ab"
    after = ManifestStore(store, "db").read_latest().manifest
    assert (after.l0, after.compacted) == (before.l0, before.compacted)  # nothing committed
    # nothing was rewritten: SlateDB (with its merge operator) still reads the merged value
    builder = sdb.DbReaderBuilder("db", oracle.store())
    builder.with_merge_operator(_Concat())
    r = oracle.run(builder.build())
    try:
        assert oracle.run(r.get(b"merged")) == b"ab"
    finally:
        oracle.run(r.shutdown())


def test_our_compactor_keeps_rows_with_a_ttl(oracle: Oracle, store: ObjectStore) -> None:
    w = oracle.open_db(s=settings(compactor=False))
    w.put(b"plain", b"v")
    w.flush_memtable()
    w.put_ttl(b"ttl", b"expires-in-an-hour", 3_600_000)
    w.flush_memtable()
    w.shutdown()
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=1)) is not None
    r = oracle.open_reader()
    assert r.get(b"ttl") == b"expires-in-an-hour"
    assert r.get(b"plain") == b"v"
    (run,) = ManifestStore(store, "db").read_latest().manifest.compacted
    expire = [
        ts
        for view in run.views
        for ts in SstReader.open(store, f"db/compacted/{view.sst_id}.sst")
        .read_all(timestamps=True)
        .column("expire_ts")
        .to_pylist()
        if ts is not None
    ]
    assert len(expire) == 1  # the TTL row kept its expire_ts through our rewrite
