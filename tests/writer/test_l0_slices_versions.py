"""An L0 flush written a slice of rows at a time must be byte for byte the one-shot encoding
also when one key's versions straddle a slice boundary: kept merge operands (no operator, or
operands of different ``expire_ts``), operands expiring exactly at the flush's tick, duplicate
keys inside one batch, tombstones over run rows. Adversarial review of 6aef2b2 (review51,
session 51)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from slatedb_core import Db, DbOptions
from slatedb_core.errors import SlateDBError
from slatedb_core.layout import sst_path
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_VALUE, ROW_SCHEMA, Version
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.store.url import open_store
from slatedb_core.testing.faults import FaultyStore
from slatedb_core.writer import l0_flush
from slatedb_core.writer.l0_flush import l0_rows, write_l0_sst

OPTIONS = SstOptions(block_size=256)
TICK = 1000


def _one_key_many_operands() -> ImmutableMemtable:
    """3000 operands of one key (no operator: all kept), expiring before, at and after the tick,
    between two other keys."""
    m = Memtable()
    m.put(b"a", 1, b"before")
    m.put(b"z", 2, b"after")
    m.put_version(b"m", Version(3, KIND_VALUE, b"base", None, 5), None)
    for i in range(3000):
        expire = (TICK - 1, TICK, TICK + 1, None)[i % 4]
        m.put_version(b"m", Version(4 + i, KIND_MERGE, b"o%d" % i, expire, 10 + i % 7), None)
    return m.freeze(last_write_ms=TICK)


def _many_keys_few_versions() -> ImmutableMemtable:
    m = Memtable()
    m.put_batch(
        pa.RecordBatch.from_arrays(
            [
                pa.array([b"k%05d" % i for i in range(2000)], pa.binary()),
                pa.array(range(1, 2001), pa.uint64()),
                pa.array([1 if i % 11 == 0 else 0 for i in range(2000)], pa.uint8()),
                pa.array([None if i % 11 == 0 else b"v%d" % i for i in range(2000)]),
            ],
            schema=ENTRY_SCHEMA,
        )
    )
    seq = 3000
    for i in range(0, 2000, 3):
        for j in range(i % 5 + 1):
            expire = TICK if j % 2 else TICK + 50 + j
            m.put_version(b"k%05d" % i, Version(seq, KIND_MERGE, b"x%d" % j, expire, 1), None)
            seq += 1
    return m.freeze(last_write_ms=TICK)


def _duplicates_inside_a_batch() -> ImmutableMemtable:
    m = Memtable()
    keys = [b"d%04d" % (i // 3) for i in range(3000)]  # each key three times, newest last
    m.put_batch(
        pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(range(1, 3001), pa.uint64()),
                pa.array([0] * 3000, pa.uint8()),
                pa.array([b"v%d" % i for i in range(3000)]),
            ],
            schema=ENTRY_SCHEMA,
        )
    )
    for i in range(0, 1000, 7):
        m.put(b"d%04d" % i, 5000 + i, None)
    return m.freeze()


def _ttl_rows_in_runs() -> ImmutableMemtable:
    """Runs of rows with timestamps (WAL replay's shape) expiring before, at and after the
    flush's tick, some keys written again by a later run, and a dict on top."""
    m = Memtable()
    seq = 1
    for r in range(3):
        keys = [b"t%05d" % (i * 3 + r) for i in range(700)] + [b"t%05d" % i for i in range(400)]
        keys = sorted(set(keys))
        n = len(keys)
        expire = [(TICK - 1, TICK, TICK + 1, None)[(i + r) % 4] for i in range(n)]
        m.put_rows(
            pa.RecordBatch.from_arrays(
                [
                    pa.array(keys, pa.binary()),
                    pa.array(range(seq, seq + n), pa.uint64()),
                    pa.array([0] * n, pa.uint8()),
                    pa.array([b"r%d-%d" % (r, i) for i in range(n)], pa.binary()),
                    pa.array(expire, pa.int64()),
                    pa.array([TICK - 5] * n, pa.int64()),
                ],
                schema=ROW_SCHEMA,
            ),
            None,
        )
        seq += n
    for i in range(0, 2100, 13):
        m.put(b"t%05d" % i, seq, None if i % 2 else b"d")
        seq += 1
    return m.freeze(last_write_ms=TICK)


SHAPES = {
    "ttl rows in runs": _ttl_rows_in_runs,
    "one key, many operands": _one_key_many_operands,
    "many keys, few versions": _many_keys_few_versions,
    "duplicates inside a batch": _duplicates_inside_a_batch,
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 1024])
def test_slices_concatenate_to_the_l0_batch(shape: str, rows: int) -> None:
    imm = SHAPES[shape]()
    slices = list(imm.l0_slices(rows))
    whole = pa.Table.from_batches(slices).combine_chunks()
    assert whole.equals(pa.Table.from_batches([imm.l0_batch()]))


@pytest.mark.parametrize("store_url", ["file", "memory://"])
@pytest.mark.parametrize("shape", SHAPES)
def test_streamed_flush_is_the_one_shot_encoding(
    shape: str, store_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(l0_flush, "L0_SLICE_BYTES", 1)  # 1024-row slices, the least
    imm = SHAPES[shape]()
    store = open_store(f"file://{tmp_path}/lake" if store_url == "file" else store_url)
    sst = write_l0_sst(store, "db", imm, OPTIONS)
    want, info = encode_sst(l0_rows(imm), OPTIONS)
    assert store.get(sst_path("db", sst.id)).data == want
    assert sst.info == info


@pytest.mark.parametrize("after_effect", [False, True])
@pytest.mark.parametrize("store_url", ["file", "memory://"])
def test_a_failed_l0_create_is_reported_and_names_no_row_twice(
    store_url: str, after_effect: bool, tmp_path: object
) -> None:
    """The L0 SST's create fails (before it lands, or after: its answer lost): flush_memtable
    raises or retries, never commits the rows twice, and every acknowledged row reads once,
    before and after a reopen."""
    inner = open_store(f"file://{tmp_path}/lake" if store_url == "file" else store_url)
    store = FaultyStore(inner)
    rows = [(b"r%05d" % i, b"v%d" % i) for i in range(3000)]
    with Db.open("db", store, DbOptions()) as db:
        for k, v in rows:
            db.put(k, v, await_durable=False)
        db.flush()
        rule = store.fail_next("put_if_absent", "db/compacted/*", after_effect=after_effect)
        try:
            db.flush_memtable()
        except SlateDBError:
            pass
        db.flush_memtable()
        assert rule.hits == 1
        assert list(db.scan()) == rows
        l0 = db.manifest.manifest.l0
        assert len(l0) == 1
    with Db.open("db", inner, DbOptions()) as db:
        assert list(db.scan()) == rows
        assert [db.get(k) for k, _ in rows[::97]] == [v for _, v in rows[::97]]
