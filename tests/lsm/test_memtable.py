from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm import memtable as memtable_mod
from slatedb_core.lsm.entries import ENTRY_SCHEMA, KIND_TOMBSTONE, KIND_VALUE, batch_from_lists
from slatedb_core.lsm.memtable import ENTRY_OVERHEAD, ImmutableMemtable, Memtable

Entry = tuple[int, bytes | None]


def live_size(m: Memtable | ImmutableMemtable, entries: dict[bytes, Entry]) -> int:
    """What size_bytes must be: the live entries' key + value bytes plus the fixed overhead."""
    return sum(len(k) + ENTRY_OVERHEAD + len(v or b"") for k, (_, v) in entries.items())


def rows(batches: list[pa.RecordBatch]) -> list[tuple[bytes, int, int, bytes | None]]:
    out: list[tuple[bytes, int, int, bytes | None]] = []
    for b in batches:
        assert b.schema.equals(ENTRY_SCHEMA)
        out.extend(zip(*(b.column(i).to_pylist() for i in range(4)), strict=True))
    return out


def expected_rows(
    entries: dict[bytes, Entry], start: bytes | None = None, end: bytes | None = None
) -> list[tuple[bytes, int, int, bytes | None]]:
    return [
        (k, s, KIND_TOMBSTONE if v is None else KIND_VALUE, v)
        for k, (s, v) in sorted(entries.items())
        if (start is None or k >= start) and (end is None or k < end)
    ]


def test_put_get_overwrite_and_tombstone() -> None:
    assert (Memtable().min_seq, Memtable().max_seq) == (None, None)
    m = Memtable()
    assert m.get(b"a") is None and m.is_empty()
    m.put(b"a", 1, b"one")
    m.put(b"b", 2, b"two")
    assert m.get(b"a") == (1, b"one")
    m.put(b"a", 3, b"uno")
    assert m.get(b"a") == (3, b"uno")
    m.put(b"b", 4, None)
    assert m.get(b"b") == (4, None)  # a tombstone is found, not "absent"
    assert m.get(b"c") is None
    assert m.entry_count == 2
    assert (m.min_seq, m.max_seq) == (1, 4)


def test_size_accounts_live_entries_exactly() -> None:
    m = Memtable()
    m.put(b"key", 1, b"12345")
    assert m.size_bytes == 3 + 5 + ENTRY_OVERHEAD
    m.put(b"key", 2, b"1")  # an overwrite credits back the old value
    assert m.size_bytes == 3 + 1 + ENTRY_OVERHEAD
    m.put(b"key", 3, None)
    assert m.size_bytes == 3 + ENTRY_OVERHEAD
    m.put(b"k2", 4, b"")
    assert m.size_bytes == 3 + 2 + 2 * ENTRY_OVERHEAD


ops_st = st.lists(
    st.tuples(
        st.sampled_from(["put", "many", "batch"]),
        st.lists(
            st.tuples(
                st.sampled_from([b"a", b"b", b"c", b"dd", b""]),
                st.one_of(st.none(), st.binary(max_size=4)),
            ),
            max_size=6,
        ),
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(ops=ops_st)
def test_put_many_and_put_batch_agree_with_put(
    ops: list[tuple[str, list[tuple[bytes, bytes | None]]]],
) -> None:
    m = Memtable()
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
            kinds = [KIND_TOMBSTONE if v is None else KIND_VALUE for v in values]
            m.put_batch(batch_from_lists(keys, seqs, kinds, values))
        for k, s, v in zip(keys, seqs, values, strict=True):
            model[k] = (s, v)
        assert m.size_bytes == live_size(m, model)
    assert {k: m.get(k) for k in model} == model
    assert m.entry_count == len(model)
    assert rows(list(m.scan())) == expected_rows(model)
    if model:
        assert m.max_seq == seq
    frozen = m.freeze()
    assert rows([frozen.batch]) == expected_rows(model)
    assert frozen.size_bytes == live_size(frozen, model)


def test_put_batch_takes_kind_as_authority_over_value() -> None:
    m = Memtable()
    m.put_batch(batch_from_lists([b"a", b"b"], [1, 2], [KIND_TOMBSTONE, KIND_VALUE], [b"", b""]))
    assert m.get(b"a") == (1, None)
    assert m.get(b"b") == (2, b"")


def test_put_many_rejects_ragged_columns() -> None:
    with pytest.raises(InvalidArgument):
        Memtable().put_many([b"a"], [1, 2], [b"x"])


def test_freeze_produces_sorted_batch_with_latest_values() -> None:
    m = Memtable()
    for i in range(300):
        m.put(b"%03d" % ((i * 7) % 100), i, b"v%d" % i)
    m.put(b"050", 1000, None)
    m.last_wal_id = 17
    imm = m.freeze()
    assert imm is m.freeze()
    assert (imm.last_wal_id, imm.entry_count, imm.max_seq, imm.min_seq) == (17, 100, 1000, 0)
    got = rows([imm.batch])
    assert [r[0] for r in got] == [b"%03d" % i for i in range(100)]
    latest = {b"%03d" % ((i * 7) % 100): i for i in range(300)}
    for key, seq, kind, value in got:
        if key == b"050":
            assert (seq, kind, value) == (1000, KIND_TOMBSTONE, None)
        else:
            assert (seq, kind, value) == (latest[key], KIND_VALUE, b"v%d" % latest[key])
    assert imm.get(b"050") == (1000, None) and imm.get(b"zzz") is None


def test_frozen_memtable_rejects_writes_but_still_reads() -> None:
    m = Memtable()
    m.put(b"a", 1, b"x")
    m.freeze()
    with pytest.raises(TypeError):
        m.put(b"b", 2, b"y")
    with pytest.raises(TypeError):
        m.put_many([b"b"], [2], [b"y"])
    with pytest.raises(TypeError):
        m.put_batch(batch_from_lists([b"b"], [2], [0], [b"y"]))
    assert m.get(b"a") == (1, b"x") and m.get(b"b") is None
    assert m.size_bytes == 1 + 1 + ENTRY_OVERHEAD


def test_empty_memtable_freezes_and_scans_to_nothing() -> None:
    m = Memtable()
    imm = m.freeze()
    assert imm.batch.num_rows == 0 and imm.batch.schema.equals(ENTRY_SCHEMA)
    assert list(imm.scan()) == []
    assert list(Memtable().scan()) == []


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (None, None),
        (b"010", None),
        (None, b"010"),
        (b"010", b"020"),
        (b"0105", b"0155"),
        (b"020", b"010"),
        (b"zzz", None),
        (None, b""),
    ],
)
def test_scan_bounds_active_and_frozen(start: bytes | None, end: bytes | None) -> None:
    m = Memtable()
    model: dict[bytes, Entry] = {}
    for i in range(30):
        k = b"%03d" % i
        v = None if i % 5 == 0 else b"v%d" % i
        m.put(k, i + 1, v)
        model[k] = (i + 1, v)
    assert rows(list(m.scan(start, end))) == expected_rows(model, start, end)
    imm = m.freeze()
    assert rows(list(imm.scan(start, end))) == expected_rows(model, start, end)


def test_scans_are_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtable_mod, "SCAN_CHUNK_ROWS", 4)
    m = Memtable()
    m.put_many([b"%02d" % i for i in range(10)], list(range(10)), [b"v"] * 10)
    assert [b.num_rows for b in m.scan()] == [4, 4, 2]
    assert [b.num_rows for b in m.freeze().scan(b"01", b"08")] == [4, 3]


def test_scan_is_a_point_in_time_snapshot() -> None:
    m = Memtable()
    m.put(b"a", 1, b"1")
    it = m.scan()
    m.put(b"b", 2, b"2")
    m.put(b"a", 3, b"3")
    assert rows(list(it)) == [(b"a", 1, KIND_VALUE, b"1")]


def test_readers_need_no_lock_while_one_writer_writes() -> None:
    m = Memtable()
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                got = m.get(b"%05d" % 7)
                assert got is None or got[1] == b"%d" % got[0]
                keys = [r[0] for r in rows(list(m.scan(b"00100", b"00200")))]
                assert keys == sorted(set(keys))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    seq = 0
    for round_ in range(20):
        keys = [b"%05d" % i for i in range(round_ * 50, round_ * 50 + 200)]
        for k in keys[:100]:
            seq += 1
            m.put(k, seq, b"%d" % seq)
        seqs = list(range(seq + 1, seq + 101))
        m.put_many(keys[100:], seqs, [b"%d" % s for s in seqs])
        seq += 100
    stop.set()
    for t in threads:
        t.join()
    assert not errors
