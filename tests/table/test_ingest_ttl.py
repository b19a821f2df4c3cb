"""A table ingest with TTLs (issue 38, item 1: "a TTL column ... in Spark ingest"): the staged SSTs
carry each put's ``expire_ts`` (staging time + the row's TTL, the fixed one, or the database's
default), the commit keeps it, and SlateDB 0.17 reads the same expiry back with
``get_key_value``. Before the change a ``ttl`` column was ignored and every row lived for ever."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.layout import sst_path
from slatedb_core.lsm.row_model import now_ms
from slatedb_core.sst import KIND_TOMBSTONE, SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, attempt_dir, commit_shard, plan_ingest, stage_ssts
from slatedb_core.table.overwrite import overwrite_table
from slatedb_core.writer.db import Db
from tests.interop import conftest as interop
from tests.interop.oracle import Oracle, settings

HOUR = 3_600_000
both_stores, root = interop.both_stores, interop.root  # SlateDB and ours on local and S3


def _rows(ttls: list[int | None], deleted: int | None = None) -> pa.RecordBatch:
    keys = [b"k%03d" % i for i in range(len(ttls))]
    values = [None if i == deleted else b"v%d" % i for i in range(len(ttls))]
    return pa.record_batch(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(ttls, pa.int64())],
        ["key", "value", "ttl"],
    )


def _ingest(store: ObjectStore, rows: pa.RecordBatch, ttl_ms: int | None = None) -> str:
    Table.create("t", store).close()
    plan = plan_ingest("t", store)
    staged = list(
        stage_ssts(store, plan, attempt_dir(plan, "r", 0, 0), 0, [rows], partition=0, ttl_ms=ttl_ms)
    )
    shard = plan.shards[0]
    stats = commit_shard(
        store, plan, "r", shard, [s.path for s in staged], seqs=[s.seq for s in staged]
    )
    assert stats.status == WRITTEN
    return shard.db_path


def _stored(store: ObjectStore, db_path: str) -> dict[bytes, tuple[int, int | None]]:
    """key -> (kind, expire_ts) of every row of the database's L0 SSTs."""
    with Db.open(db_path, store) as db:
        ids = [v.sst_id for v in db.manifest.manifest.l0]
    out: dict[bytes, tuple[int, int | None]] = {}
    for i in ids:
        t = SstReader.open(store, sst_path(db_path, i)).read_all(timestamps=True)
        for r in t.to_pylist():
            out[r["key"]] = (r["kind"], r["expire_ts"])
    return out


@pytest.mark.slatedb
def test_staged_ttls_are_stored_and_slatedb_reads_them(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    before = now_ms()
    db_path = _ingest(store, _rows([HOUR, None, 2 * HOUR, 5], deleted=1), ttl_ms=3 * HOUR)
    after = now_ms()
    rows = _stored(store, db_path)
    for key, ttl in ((b"k000", HOUR), (b"k002", 2 * HOUR)):
        kind, expire = rows[key]
        assert kind == 0 and expire is not None and before + ttl <= expire <= after + ttl
    assert rows[b"k001"] == (KIND_TOMBSTONE, None)  # a delete carries no TTL
    # SlateDB reads each expiry back; a row whose 5 ms have passed reads as deleted
    w = oracle.open_db(db_path, settings(compactor=False))
    kv = w.db
    for key, ttl in ((b"k000", HOUR), (b"k002", 2 * HOUR)):
        got = oracle.run(kv.get_key_value(key))
        assert got is not None and got.expire_ts == rows[key][1], (key, got)
        assert before + ttl <= got.expire_ts <= after + ttl
    assert w.get(b"k001") is None
    got = oracle.run(kv.get_key_value(b"k003"))
    expire = rows[b"k003"][1]
    assert got is not None and expire is not None and got.expire_ts == expire <= after + 5
    w.shutdown()


def test_a_fixed_ttl_and_the_database_default(local: ObjectStore) -> None:
    before = now_ms()
    db_path = _ingest(local, _rows([None, None]), ttl_ms=HOUR)
    rows = _stored(local, db_path)
    assert all(e is not None and before + HOUR <= e <= now_ms() + HOUR for _, e in rows.values())


def test_rows_without_a_ttl_stay_plain(local: ObjectStore) -> None:
    """No TTL anywhere: the staged SSTs are what they were (no timestamp on any row)."""
    db_path = _ingest(local, _rows([None, None]))
    assert {e for _, e in _stored(local, db_path).values()} == {None}


@pytest.mark.parametrize("column, fixed", [(-1, None), (1, -1), (1, 2**63)])
def test_bad_ttls_are_refused_before_anything_is_staged(
    local: ObjectStore, column: int, fixed: int | None
) -> None:
    Table.create("t", local).close()
    plan = plan_ingest("t", local)
    with pytest.raises(InvalidArgument, match="ttl"):
        list(
            stage_ssts(
                local, plan, attempt_dir(plan, "r", 0, 0), 0, [_rows([1, column])], ttl_ms=fixed
            )
        )
    assert not [m for m in local.list("t/_ingest") if m.path.endswith(".sst")]


def test_an_overwrite_stores_ttls(local: ObjectStore) -> None:
    """``overwrite_table`` stages its rows as an ingest does: a ``ttl`` column, else ``ttl``."""
    Table.create("t", local).close()
    before = now_ms()
    overwrite_table("t", local, [_rows([HOUR, None])], ttl=2 * HOUR)
    with Table.open("t", local) as t:
        db_path = t.shard_map.shards[0].db_path
    rows = _stored(local, db_path)
    assert before + HOUR <= (rows[b"k000"][1] or 0) <= now_ms() + HOUR
    assert before + 2 * HOUR <= (rows[b"k001"][1] or 0) <= now_ms() + 2 * HOUR
    # a bad TTL is refused before the overwrite is planned: the map is unchanged
    with Table.open("t", local) as t:
        map_id = t.shard_map.id
    with pytest.raises(InvalidArgument, match="ttl"):
        overwrite_table("t", local, [_rows([-5, None])])
    with Table.open("t", local) as t:
        assert t.shard_map.id == map_id
