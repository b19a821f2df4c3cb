"""An L0 flush encodes and writes its SST a slice of rows at a time (issue 42, goal 3: the flush
no longer holds the frozen rows' sorted copy, their encoding and its joined copy at once).

What must not change: the SST's bytes and info are what the one-shot encoder made of
``l0_rows`` before (tests/interop reads them with SlateDB 0.17), for every shape of frozen
memtable (runs of batches, single puts, both, replaced rows, TTLs, merge operands); and the
create stays create-if-absent on every store.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.layout import sst_path
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.lsm.memtable import ImmutableMemtable, Memtable
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_VALUE, ROW_SCHEMA, Version
from slatedb_core.sst import SstOptions, encode_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer import l0_flush
from slatedb_core.writer.l0_flush import l0_rows, write_l0_sst

OPTIONS = SstOptions(block_size=512)


def _batch(keys: list[bytes], seq0: int, tomb_every: int = 0) -> pa.RecordBatch:
    n = len(keys)
    tomb = [bool(tomb_every) and i % tomb_every == 0 for i in range(n)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(range(seq0, seq0 + n), pa.uint64()),
            pa.array([1 if t else 0 for t in tomb], pa.uint8()),
            pa.array([None if t else b"v%d" % (seq0 + i) * 3 for i, t in enumerate(tomb)]),
        ],
        schema=ENTRY_SCHEMA,
    )


def _keys(rng: random.Random, n: int, width: int | None = 8) -> list[bytes]:
    return [rng.randbytes(width or rng.randint(1, 12)) for _ in range(n)]


def _runs_only(rng: random.Random) -> ImmutableMemtable:
    m = Memtable()
    seq = 1
    for _ in range(3):
        keys = _keys(rng, 5000)
        m.put_batch(_batch(keys, seq, tomb_every=7))
        seq += len(keys)
    return m.freeze()


def _runs_with_replaced_rows_and_dict(rng: random.Random) -> ImmutableMemtable:
    m = Memtable()
    seq = 1
    older = _keys(rng, 6000)
    m.put_batch(_batch(older, seq))
    seq += 6000
    m.put_batch(_batch(older[:2500] + _keys(rng, 2500), seq, tomb_every=5))
    seq += 5000
    for k in older[3000:3400] + _keys(rng, 300):  # single puts: a dict over the runs
        m.put(k, seq, None if seq % 9 == 0 else b"p%d" % seq)
        seq += 1
    return m.freeze()


def _one_run_in_order() -> ImmutableMemtable:
    m = Memtable()
    m.put_batch(_batch([b"k%06d" % i for i in range(9000)], 1))
    return m.freeze()


def _dict_only(rng: random.Random) -> ImmutableMemtable:
    m = Memtable()
    for i, k in enumerate(_keys(rng, 3000, width=None)):
        m.put(k, i + 1, b"x" * (i % 50))
    return m.freeze()


def _variable_width_runs(rng: random.Random) -> ImmutableMemtable:
    m = Memtable()
    m.put_batch(_batch(_keys(rng, 4000, width=None), 1))
    m.put_batch(_batch(_keys(rng, 4000, width=None), 4001))
    return m.freeze()


def _with_ttls_and_merges(rng: random.Random) -> ImmutableMemtable:
    m = Memtable()
    m.put_batch(_batch(_keys(rng, 3000), 1))
    seq = 3001
    keys = _keys(rng, 500)
    for i, k in enumerate(keys):
        expire = 50 if i % 3 == 0 else None  # expired at the freeze's tick
        m.put_version(k, Version(seq, KIND_VALUE, b"t%d" % i, expire, 10), None)
        seq += 1
    for k in keys[:40]:
        m.put_version(k, Version(seq, KIND_MERGE, b"m", 10_000 if seq % 2 else None, 20), None)
        seq += 1
    return m.freeze(last_write_ms=100)


SHAPES = {
    "runs": _runs_only,
    "runs, replaced rows, dict": _runs_with_replaced_rows_and_dict,
    "one run in order": lambda rng: _one_run_in_order(),
    "dict only": _dict_only,
    "variable-width runs": _variable_width_runs,
    "ttls and merge operands": _with_ttls_and_merges,
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rows", [1, 777, 100_000])
def test_slices_are_the_l0_batch(shape: str, rows: int) -> None:
    imm = SHAPES[shape](random.Random(shape))
    slices = list(imm.l0_slices(rows))
    assert all(0 < s.num_rows <= rows for s in slices)
    whole = pa.Table.from_batches(slices).combine_chunks() if slices else None
    want = imm.l0_batch()
    assert whole is not None and whole.equals(pa.Table.from_batches([want]))


def test_slices_of_runs_leave_the_sorted_batch_unbuilt() -> None:
    """The flush of a table of runs never makes (nor caches) the sorted copy of all its rows."""
    imm = _runs_only(random.Random(1))
    for _ in imm.l0_slices(1000):
        pass
    assert imm._batch is None  # what the flush used to build and keep


@pytest.mark.parametrize("shape", ["dict only", "runs, replaced rows, dict"])
def test_slices_of_single_puts_leave_the_sorted_batch_unbuilt(shape: str) -> None:
    """A flush of single puts (a dict, alone or over runs) seals the dict into a run and gathers
    from it: it holds the entries once, not also their sorted copy (issue 42, goal 3, session
    54: the dict alone used to be sorted whole through :attr:`ImmutableMemtable.batch`)."""
    imm = SHAPES[shape](random.Random(2))
    for _ in imm.l0_slices(1000):
        pass
    assert imm._batch is None


def _store(kind: str, tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake" if kind == "file" else "memory://")


@pytest.mark.parametrize("store_kind", ["file", "memory"])
@pytest.mark.parametrize("shape", SHAPES)
def test_flushed_sst_is_the_one_shot_encoding(
    shape: str, store_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(l0_flush, "L0_SLICE_BYTES", 20_000)  # many slices, many parts
    imm = SHAPES[shape](random.Random(shape))
    store = _store(store_kind, tmp_path)
    sst = write_l0_sst(store, "db", imm, OPTIONS)
    want, info = encode_sst(l0_rows(imm), OPTIONS)
    assert store.get(sst_path("db", sst.id)).data == want
    assert sst.info == info


def test_empty_table_flushes_the_empty_sst(tmp_path: Path) -> None:
    imm = Memtable().freeze()
    store = _store("file", tmp_path)
    sst = write_l0_sst(store, "db", imm, OPTIONS)
    want, info = encode_sst(l0_rows(imm), OPTIONS)
    assert store.get(sst_path("db", sst.id)).data == want and sst.info == info


def test_a_flush_whose_rows_all_expire_writes_what_the_one_shot_encoder_does(
    tmp_path: Path,
) -> None:
    m = Memtable()
    m.put_version(b"a", Version(1, KIND_MERGE, b"m", 5, 1), None)
    imm = m.freeze(last_write_ms=100)
    store = _store("file", tmp_path)
    sst = write_l0_sst(store, "db", imm, OPTIONS)
    want, info = encode_sst(l0_rows(imm), OPTIONS)
    assert store.get(sst_path("db", sst.id)).data == want and sst.info == info
    assert l0_rows(imm).schema.equals(ROW_SCHEMA) and l0_rows(imm).num_rows == 0
