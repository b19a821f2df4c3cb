"""Arrow runs in the memtable (slatedb_core.lsm.runs) against a dict model: single puts, write
batches and Arrow batches mixed, with repeated keys inside and across batches and tombstones,
read through get, get_many, scans, the frozen batch, a reader's overlaid tables, and through a Db
(memtable, L0 flush, reopen)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.lsm import memtable as memtable_mod
from slatedb_core.lsm.entries import KIND_TOMBSTONE, KIND_VALUE, batch_from_lists
from slatedb_core.lsm.memtable import ENTRY_OVERHEAD, ImmutableMemtable, Memtable
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks

Entry = tuple[int, bytes | None]
Row = tuple[bytes, int, int, bytes | None]

# 16-byte keys (the uniform-width, u64-prefix path), keys sharing their first 8 bytes (the
# whole-key sort), and short keys of several widths (the padded form), in one alphabet.
KEYS = (
    [b"%016d" % i for i in range(6)]
    + [b"samepfx-%08d" % i for i in range(4)]
    + [b"a", b"ab", b"b", b"a\x00", b"zz\x00\x00"]
)


@contextmanager
def run_min_rows(n: int) -> Iterator[None]:
    """Send put_many batches of at least ``n`` rows to runs (1: every one)."""
    old = memtable_mod.RUN_MIN_ROWS
    memtable_mod.RUN_MIN_ROWS = n
    try:
        yield
    finally:
        memtable_mod.RUN_MIN_ROWS = old


def live_size(entries: dict[bytes, Entry]) -> int:
    return sum(len(k) + ENTRY_OVERHEAD + len(v or b"") for k, (_, v) in entries.items())


def rows(batches: list[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for b in batches:
        out.extend(zip(*(b.column(i).to_pylist() for i in range(4)), strict=True))
    return out


def expected(entries: dict[bytes, Entry], start: bytes | None, end: bytes | None) -> list[Row]:
    return [
        (k, s, KIND_TOMBSTONE if v is None else KIND_VALUE, v)
        for k, (s, v) in sorted(entries.items())
        if (start is None or k >= start) and (end is None or k < end)
    ]


writes_st = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=5))),
    min_size=1,
    max_size=12,
)
ops_st = st.lists(st.tuples(st.sampled_from(["put", "many", "batch"]), writes_st), max_size=14)
bound_st = st.one_of(st.none(), st.sampled_from(KEYS), st.just(b"samepfx-"))


def apply(
    m: Memtable, ops: list[tuple[str, list[tuple[bytes, bytes | None]]]]
) -> dict[bytes, Entry]:
    model: dict[bytes, Entry] = {}
    seq = 0
    for how, writes in ops:
        keys = [k for k, _ in writes]
        values = [v for _, v in writes]
        seqs = list(range(seq + 1, seq + 1 + len(writes)))
        seq += len(writes)
        if how == "put":
            for k, s, v in zip(keys, seqs, values, strict=True):
                m.put(k, s, v)
        elif how == "many":
            m.put_many(keys, seqs, values)
        else:
            # a tombstone's value in an Arrow batch is empty (WAL, put_arrow) or null: kind decides
            kinds = [KIND_TOMBSTONE if v is None else KIND_VALUE for v in values]
            stored = [b"" if v is None and s % 2 else v for v, s in zip(values, seqs, strict=True)]
            m.put_batch(batch_from_lists(keys, seqs, kinds, stored))
        for k, s, v in zip(keys, seqs, values, strict=True):
            model[k] = (s, v)
        assert m.size_bytes == live_size(model)
        assert m.entry_count == len(model)
    return model


@settings(max_examples=300, deadline=None)
@given(ops=ops_st, start=bound_st, end=bound_st)
def test_runs_dict_and_single_puts_agree_with_a_model(
    ops: list[tuple[str, list[tuple[bytes, bytes | None]]]],
    start: bytes | None,
    end: bytes | None,
) -> None:
    with run_min_rows(1):
        m = Memtable()
        model = apply(m, ops)
    probes = [*KEYS, b"missing", b"0" * 16]
    want = [model.get(k) for k in probes]
    assert [m.get(k) for k in probes] == want
    assert m.get_many(probes) == want
    assert rows(list(m.scan(start, end))) == expected(model, start, end)
    if model:
        assert (m.min_seq, m.max_seq) == (1, max(s for s, _ in model.values()) if ops else None)
    frozen = m.freeze()
    assert rows([frozen.batch]) == expected(model, None, None)
    assert rows(list(frozen.scan(start, end))) == expected(model, start, end)
    assert [frozen.get(k) for k in probes] == want
    assert frozen.get_many(probes) == want
    assert frozen.size_bytes == live_size(model) and frozen.entry_count == len(model)
    # the frozen memtable's batch is what an L0 flush writes: sorted, one row per key
    keys = frozen.batch.column(0).to_pylist()
    assert keys == sorted(set(keys))


@settings(max_examples=150, deadline=None)
@given(older=ops_st, newer=ops_st)
def test_overlaid_tables_of_runs_take_the_newer_entry(
    older: list[tuple[str, list[tuple[bytes, bytes | None]]]],
    newer: list[tuple[str, list[tuple[bytes, bytes | None]]]],
) -> None:
    with run_min_rows(1):
        a, b = Memtable(), Memtable()
        ma = apply(a, older)
        shift = max((s for s, _ in ma.values()), default=0)
        mb = {k: (s + shift, v) for k, (s, v) in apply(b, newer).items()}
    # b's seqs must be above a's: rebuild b from its model at the shifted seqs, as one batch
    b = Memtable()
    if mb:
        ks = sorted(mb)
        vs = [mb[k][1] for k in ks]
        b.put_batch(
            batch_from_lists(
                ks,
                [mb[k][0] for k in ks],
                [KIND_TOMBSTONE if v is None else KIND_VALUE for v in vs],
                vs,
            )
        )
    fa, fb = a.freeze(), b.freeze()
    both = {**ma, **mb}
    merged: ImmutableMemtable = fa.overlaid(fb)
    assert rows([merged.batch]) == expected(both, None, None)
    assert merged.size_bytes == live_size(both) and merged.entry_count == len(both)
    assert [merged.get(k) for k in KEYS] == [both.get(k) for k in KEYS]
    assert rows([fa.batch]) == expected(ma, None, None)  # the inputs are unchanged


def test_a_key_too_wide_for_a_run_keeps_later_batches_in_the_dict() -> None:
    wide = b"w" * 100
    with run_min_rows(1):
        m = Memtable()
        m.put_many([b"k1", b"k2"], [1, 2], [b"a", b"b"])  # a run
        m.put(wide, 3, b"c")  # a dict entry the next batch cannot seal into a run
        m.put_many([b"k1", wide, b"k3"], [4, 5, 6], [None, b"d", b"e"])
        m.put_batch(batch_from_lists([b"k2"], [7], [KIND_VALUE], [b"f"]))
    model = {b"k1": (4, None), b"k2": (7, b"f"), wide: (5, b"d"), b"k3": (6, b"e")}
    assert {k: m.get(k) for k in model} == model
    assert m.size_bytes == live_size(model) and m.entry_count == len(model)
    assert rows([m.freeze().batch]) == expected(model, None, None)


def test_runs_merge_in_size_tiers() -> None:
    m = Memtable()
    with run_min_rows(1):
        _tiers(m)


def _tiers(m: Memtable) -> None:
    for i in range(16):
        keys = [b"%016d" % (i * 1000 + j) for j in range(300)]
        m.put_many(keys, list(range(i * 300 + 1, i * 300 + 301)), [b"v"] * 300)
        assert len(m._view[1]) <= 6  # at most 3 runs a tier of 4x: 16 batches end in one
    assert len(m._view[1]) == 1 and m.entry_count == 16 * 300


# ---- through a Db: put, WriteBatch, put_arrow, delete; flush to L0; reopen -------------------
db_op_st = st.tuples(
    st.sampled_from(["put", "delete", "write", "arrow"]),
    st.lists(
        st.tuples(st.sampled_from(KEYS[:12]), st.one_of(st.none(), st.binary(max_size=4))),
        min_size=1,
        max_size=40,
    ),
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    phases=st.lists(st.lists(db_op_st, max_size=8), min_size=1, max_size=3),
    flush_after=st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_db_writes_of_every_kind_agree_with_a_model_through_flush_and_reopen(
    tmp_path: Path,
    phases: list[list[tuple[str, list[tuple[bytes, bytes | None]]]]],
    flush_after: list[bool],
) -> None:
    d = tmp_path / f"db-{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    store = open_store(f"file://{d}")
    model: dict[bytes, bytes] = {}

    def check(db: Db) -> None:
        assert [db.get(k) for k in KEYS] == [model.get(k) for k in KEYS]
        assert db.get_many(KEYS) == [model.get(k) for k in KEYS]
        assert list(db.scan()) == sorted(model.items())
        assert db.scan_arrow().read_all().num_rows == len(model)

    with run_min_rows(8):
        for phase, flush in zip(phases, flush_after, strict=False):
            with Db.open("db", store, DbOptions()) as db:
                check(db)
                for how, writes in phase:
                    if how == "put":
                        for k, v in writes:
                            db.put(k, v or b"", await_durable=False)
                            model[k] = v or b""
                    elif how == "delete":
                        for k, _ in writes:
                            db.delete(k, await_durable=False)
                            model.pop(k, None)
                    elif how == "write":
                        wb = WriteBatch()
                        for k, v in writes:
                            wb.put(k, v) if v is not None else wb.delete(k)
                        db.write(wb, await_durable=False)
                    else:
                        table = pa.table(
                            {
                                "key": pa.array([k for k, _ in writes], pa.binary()),
                                "value": pa.array([v for _, v in writes], pa.binary()),
                            }
                        )
                        db.put_arrow(table, await_durable=False)
                    if how in ("write", "arrow"):
                        for k, v in writes:
                            if v is None:
                                model.pop(k, None)
                            else:
                                model[k] = v
                    check(db)
                if flush:
                    db.flush_memtable()
                    check(db)
                db.flush()
        with Db.open("db", store, DbOptions()) as db:
            check(db)


@pytest.mark.parametrize("rows_per_batch", [300, 10_000])
def test_put_arrow_batches_size_accounting_triggers_flushes(rows_per_batch: int) -> None:
    """size_bytes counts each live key once, so repeated keys across batches do not trigger a
    flush early: 30k writes to the same 3k keys stay in one memtable of ~3k entries."""
    total, distinct = 30_000, 3_000
    store = open_store("memory://")
    hooks = WriterHooks()  # its steps show the writer's state
    with Db.open("db", store, DbOptions(l0_sst_size_bytes=1 << 20), hooks=hooks) as db:
        for i in range(0, total, rows_per_batch):
            n = min(rows_per_batch, total - i)
            keys = [b"%016d" % ((i + j) % distinct) for j in range(n)]
            db.put_arrow(
                pa.table({"key": pa.array(keys, pa.binary()), "value": [b"v" * 100] * n}),
                await_durable=False,
            )
        assert hooks.steps is not None
        mt = hooks.steps.state().memtable
        assert mt.entry_count == distinct
        assert mt.size_bytes == distinct * (16 + 100 + ENTRY_OVERHEAD)
        assert not hooks.steps.state().imm and not db.manifest.manifest.l0
