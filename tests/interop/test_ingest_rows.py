"""``Db.ingest_ssts`` of an SST SlateDB 0.17 wrote with TTL rows, merge operands and a snapshot's
versions (issue 38, item 1: every rewrite path carries the whole row). The re-encode keeps each
row's ``expire_ts``, turns the expired row into a tombstone, folds the operands with the
database's merge operator (stamping a key's remaining versions at distinct seqs, newest highest)
and drops the versions no snapshot of the target can read, deciding through
:func:`slatedb_core.lsm.retention.retain`. SlateDB reads back what it wrote. Before the change,
the ingest refused the SST (UnsupportedFeature, "merge operands")."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import MergeOperatorMissing
from slatedb_core.layout import sst_path
from slatedb_core.lsm.row_model import now_ms
from slatedb_core.options import DbOptions
from slatedb_core.sst import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, settings
from tests.lsm.slatedb_rows import LATEST, open_merging, rich_db, wait_dead

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10),
    manifest_poll_interval=timedelta(milliseconds=100),
    merge_operator="string_append",
)


def _sources(store: ObjectStore) -> list[str]:
    return [m.path for m in store.list("db/compacted") if m.path.endswith(".sst")]


def test_ingest_carries_ttls_and_operands_slatedb_reads_them(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    with rich_db(oracle) as rich:
        sources = _sources(store)
        assert len(sources) == 1
        wait_dead(rich)
        with Db.open("dst", store, FAST) as db:
            db.put(b"p", b"older")  # an earlier write: the ingested rows are newer
            before = db.manifest.manifest.last_l0_seq
            stats = db.ingest_ssts(sources)
            assert stats.ssts == 1
            ids = [v.sst_id for v in db.manifest.manifest.l0]
        rows = SstReader.open(store, sst_path("dst", ids[0])).read_all(timestamps=True)
        got = [
            (r["key"], r["kind"], r["value"], r["expire_ts"], r["seq"]) for r in rows.to_pylist()
        ]
        by_key: dict[bytes, list[tuple[int, bytes, int | None, int]]] = {}
        for key, kind, value, expire, seq in got:
            by_key.setdefault(key, []).append((kind, value, expire, seq))
        assert [v[:3] for v in by_key[b"m"]] == [(KIND_VALUE, b"abc", None)]
        assert [v[:3] for v in by_key[b"o"]] == [(KIND_MERGE, b"xy", None)]
        # an operand with its own expiry is not folded onto the base: two versions, two seqs
        mt = by_key[b"mt"]
        assert [v[:2] for v in mt] == [(KIND_MERGE, b"+1"), (KIND_VALUE, b"base")]
        assert mt[0][3] > mt[1][3] > before
        assert [v[:3] for v in by_key[b"s"]] == [(KIND_VALUE, b"v2", None)]
        assert [v[:3] for v in by_key[b"t-live"]] == [(KIND_VALUE, b"L", rich.t_live_expire_ts)]
        assert [v[:3] for v in by_key[b"t-dead"]] == [(KIND_TOMBSTONE, b"", None)]
        assert all(seq > before for _, _, _, _, seq in got)
    # SlateDB reads the ingested database with its own operator
    w = open_merging(oracle, "dst")
    try:
        for key, value in LATEST.items():
            assert w.get(key) == value, key
        kv = oracle.run(w.db.get_key_value(b"t-live"))
        assert kv.expire_ts == rich.t_live_expire_ts
    finally:
        w.shutdown()


def test_ingest_of_operands_needs_the_merge_operator(oracle: Oracle, store: ObjectStore) -> None:
    """Without an operator the operands cannot be folded: MergeOperatorMissing naming the key,
    and nothing is committed."""
    with rich_db(oracle) as _:
        sources = _sources(store)
    plain = DbOptions(flush_interval=timedelta(milliseconds=10))
    with Db.open("dst", store, plain) as db:
        db.put(b"p", b"older")
        with pytest.raises(MergeOperatorMissing) as e:
            db.ingest_ssts(sources)
        assert e.value.key in (b"m", b"mt", b"o")
        assert db.get(b"p") == b"older"
        assert len(db.manifest.manifest.l0) <= 1


def test_bulk_ingest_carries_ttls_slatedb_reads_them(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    """``bulk_ingest(ttl_column=, ttl=)`` as ``put_arrow`` takes them: each kept row (the later of
    two rows of a key) stores its own expiry, a delete none. Before, bulk_ingest took no TTL."""
    oracle, store, _ = both_stores
    hour = 3_600_000
    data = pa.table(
        {
            "key": [b"a", b"b", b"a", b"c", b"d"],
            "value": [b"a-old", b"b", b"a-new", None, b"d"],
            "ttl": pa.array([5 * hour, hour, 2 * hour, hour, None], pa.int64()),
        }
    )
    before = now_ms()
    with Db.open("dst", store, FAST) as db:
        stats = db.bulk_ingest(data, ttl_column="ttl", ttl=3 * hour)
        assert stats.rows == 5
    after = now_ms()
    w = oracle.open_db("dst", settings(compactor=False))
    try:
        for key, value, ttl in (
            (b"a", b"a-new", 2 * hour),
            (b"b", b"b", hour),
            (b"d", b"d", 3 * hour),
        ):
            kv = oracle.run(w.db.get_key_value(key))
            assert kv is not None and kv.value == value
            assert before + ttl <= kv.expire_ts <= after + ttl, key
        assert w.get(b"c") is None
    finally:
        w.shutdown()


def test_our_sst_with_ttls_and_operands_ingested_slatedb_reads_it(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    """The reverse direction: our writer's TTL puts and merge operands, flushed to an L0 SST,
    ingested (re-encoded) into another database: SlateDB reads the values and expiries."""
    oracle, store, _ = both_stores
    hour = 3_600_000
    with Db.open("src", store, FAST) as src:
        src.put(b"a", b"1")
        src.merge(b"a", b"2")
        src.merge(b"a", b"3", ttl=hour)  # an expiry of its own: not folded onto the base
        src.merge(b"b", b"x")
        src.put(b"t", b"T", ttl=hour)
        src.flush_memtable()
        m = src.manifest.manifest
        sources = [sst_path("src", v.sst_id) for v in reversed(m.l0)]
        t_expire = next(
            r["expire_ts"]
            for p in sources
            for r in SstReader.open(store, p).read_all(timestamps=True).to_pylist()
            if r["key"] == b"t"
        )
    with Db.open("dst", store, FAST) as db:
        db.ingest_ssts(sources)
        assert db.get(b"a") == b"123" and db.get(b"b") == b"x" and db.get(b"t") == b"T"
    w = open_merging(oracle, "dst")
    try:
        assert w.get(b"a") == b"123" and w.get(b"b") == b"x" and w.get(b"t") == b"T"
        assert oracle.run(w.db.get_key_value(b"t")).expire_ts == t_expire is not None
    finally:
        w.shutdown()
