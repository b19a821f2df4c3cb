"""encode_ranges: one sort of unsorted rows into SSTs cut at key ranges, on reused buffers."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.entries import KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.options import DbOptions
from slatedb_core.sst.builder import SstOptions, encode_sst
from slatedb_core.sst.reader import SstReader
from slatedb_core.sst.scratch import Scratch, thread_scratch
from slatedb_core.table.staged import RangeSst, encode_ranges, packed_order

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])


def batches(rows: list[tuple[bytes, bytes | None]], size: int = 7) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pylist(
            [{"key": k, "value": v} for k, v in rows[i : i + size]], schema=SCHEMA
        )
        for i in range(0, len(rows), size)
    ]


def decoded(ssts: list[tuple[int, int, bytes]]) -> dict[int, list[list[tuple[bytes, int, bytes]]]]:
    """range index -> its SSTs' entries ``(key, kind, value)`` in order."""
    out: dict[int, list[list[tuple[bytes, int, bytes]]]] = {}
    for index, _, data in ssts:
        table = SstReader.from_bytes(data, "t").read_all()
        rows = list(
            zip(
                table.column("key").to_pylist(),
                table.column("kind").to_pylist(),
                table.column("value").to_pylist(),
                strict=True,
            )
        )
        out.setdefault(index, []).append(rows)
    return out


def run(
    rows: list[tuple[bytes, bytes | None]],
    splits: list[bytes],
    options: DbOptions | None = None,
    size: int = 7,
) -> list[tuple[int, int, bytes]]:
    # copy each SST's bytes out before the next one reuses the buffer
    return [
        (s.range_index, s.part, bytes(s.data))
        for s in encode_ranges(batches(rows, size), splits, options=options, scratch=Scratch())
    ]


def expected_ranges(
    rows: list[tuple[bytes, bytes | None]], splits: list[bytes]
) -> dict[int, list[tuple[bytes, int, bytes]]]:
    last = dict(rows)  # for unique keys the only row; tests with duplicates check separately
    out: dict[int, list[tuple[bytes, int, bytes]]] = {}
    for k in sorted(last):
        index = sum(k >= s for s in splits)
        v = last[k]
        out.setdefault(index, []).append(
            (k, KIND_TOMBSTONE, b"") if v is None else (k, KIND_VALUE, v)
        )
    return out


def flatten(got: dict[int, list[list[tuple[bytes, int, bytes]]]]) -> dict[int, list]:
    return {i: [e for sst in ssts for e in sst] for i, ssts in got.items()}


def test_random_fixed_width_rows_land_sorted_in_their_ranges() -> None:
    rng = np.random.default_rng(7)
    keys = [rng.bytes(16) for _ in range(5000)]
    rows = [(k, rng.bytes(100)) for k in keys]
    splits = [b"\x40", b"\x80\x00", b"\xc0"]
    ssts = run(rows, splits, size=999)
    assert flatten(decoded(ssts)) == expected_ranges(rows, splits)
    assert sorted({i for i, _, _ in ssts}) == [0, 1, 2, 3]


def test_bytes_equal_encode_sst_of_the_same_entries() -> None:
    rows = [(b"k%05d" % i, b"v%d" % i) for i in range(0, 3000, 3)][::-1]
    ((index, part, data),) = run(rows, [])
    assert (index, part) == (0, 0)
    table = SstReader.from_bytes(data, "t").read_all()
    ref, info = encode_sst(table, SstOptions(DbOptions().block_size))
    assert ref == data and info.size_bytes == len(data)


def test_keys_sharing_their_first_eight_bytes_sort_exactly() -> None:
    rng = np.random.default_rng(3)
    rows = [(b"prefix00" + rng.bytes(4), b"x") for _ in range(2000)]
    rows = list(dict(rows).items())
    ssts = run(rows, [b"prefix00\x80"])
    assert flatten(decoded(ssts)) == expected_ranges(rows, [b"prefix00\x80"])


def test_variable_width_keys_values_and_tombstones() -> None:
    rows: list[tuple[bytes, bytes | None]] = [
        (b"a", b"1"),
        (b"abc", None),
        (b"ab", b""),
        (b"b" * 40, b"long" * 50),
        (b"\x00", b"z"),
        (b"ab\x00", b"q"),
        (b"zz", None),
        (b"m", b"mm"),
    ]
    splits = [b"ab", b"abd", b"m"]
    assert flatten(decoded(run(rows, splits, size=3))) == expected_ranges(rows, splits)


def test_split_points_longer_than_the_keys() -> None:
    rows = [(b"k%02d" % i, b"v") for i in range(40)]
    splits = [b"k10\x00\x00\x00", b"k2", b"k25zzzzzzzzzzzzzzzzzz"]
    assert flatten(decoded(run(rows, splits))) == expected_ranges(rows, splits)


def test_one_row_per_duplicate_key() -> None:
    rows = [(b"k%03d" % (i % 50), b"v%d" % i) for i in range(400)]
    got = flatten(decoded(run(rows, [b"k025"])))
    keys = [k for i in sorted(got) for k, _, _ in got[i]]
    assert keys == sorted({k for k, _ in rows})
    candidates: dict[bytes, set[bytes]] = {}
    for k, v in rows:
        candidates.setdefault(k, set()).add(v)
    assert all(v in candidates[k] for i in got for k, _, v in got[i])


def test_small_target_size_gives_disjoint_ascending_parts() -> None:
    rows = [(b"k%05d" % i, b"v" * 30) for i in range(3000)]
    ssts = run(rows, [b"k01500"], DbOptions(l0_sst_size_bytes=8192))
    by_range = decoded(ssts)
    assert all(len(parts) > 3 for parts in by_range.values())
    for parts in by_range.values():
        for a, b in itertools.pairwise(parts):
            assert a[-1][0] < b[0][0]
    assert [p for i, p, _ in ssts if i == 0] == list(range(len(by_range[0])))
    assert flatten(by_range) == expected_ranges(rows, [b"k01500"])


def test_info_describes_the_bytes() -> None:
    rows = [(b"k%03d" % i, b"v") for i in range(100)]
    for s in encode_ranges(batches(rows), [b"k050"], scratch=Scratch()):
        assert isinstance(s, RangeSst)
        reader = SstReader.from_bytes(bytes(s.data), "t")
        assert reader.info == s.info


def test_bad_input_raises_before_anything_is_encoded() -> None:
    with pytest.raises(InvalidArgument):
        list(encode_ranges(batches([(b"", b"v")]), []))
    with pytest.raises(InvalidArgument):
        list(encode_ranges(batches([(b"k", b"v")]), [b"b", b"a"]))
    with pytest.raises(InvalidArgument):
        list(encode_ranges(batches([(b"k", b"v")]), [b""]))
    with pytest.raises(InvalidArgument, match="exceeds"):
        list(
            encode_ranges(batches([(b"k", b"v" * 100)]), [], options=DbOptions(max_value_bytes=10))
        )
    assert list(encode_ranges([], [b"m"])) == []


def test_scratch_is_reused_across_calls() -> None:
    scratch = thread_scratch()
    rows = [(b"k%05d" % i, b"v" * 20) for i in range(2000)]
    for _ in encode_ranges(batches(rows, 500), [b"k01000"], scratch=scratch):
        pass
    held = scratch.nbytes
    for _ in encode_ranges(batches(rows, 500), [b"k01000"], scratch=scratch):
        pass
    assert scratch.nbytes == held > 0


keys_st = st.binary(min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.dictionaries(keys_st, st.one_of(st.none(), st.binary(max_size=20)), max_size=60),
    splits=st.lists(keys_st, max_size=4, unique=True).map(sorted),
    size=st.integers(1, 20),
)
def test_matches_a_plain_model(
    rows: dict[bytes, bytes | None], splits: list[bytes], size: int
) -> None:
    items = list(rows.items())
    assert flatten(decoded(run(items, splits, size=size))) == expected_ranges(items, splits)


def test_a_few_keys_tying_on_their_leading_bytes_are_ordered_by_the_rest() -> None:
    rng = np.random.default_rng(11)
    keys = {rng.bytes(16) for _ in range(4000)}
    # 10 groups of keys sharing their first 12 bytes (ties in the packed sort words)
    for g in range(10):
        head = rng.bytes(12)
        keys |= {head + bytes([g, i, 0, 0]) for i in rng.permutation(5).tolist()}
    rows = [(k, k[::-1]) for k in keys]
    rng.shuffle(rows)  # type: ignore[arg-type]
    flat = np.frombuffer(b"".join(k for k, _ in rows), np.uint8).copy()
    order = packed_order(flat, 16, len(rows), Scratch())
    assert order is not None, "few ties: fixed run by run, no fallback"
    assert [rows[i][0] for i in order.tolist()] == sorted(keys)
    splits = [b"\x55", b"\xaa"]
    assert flatten(decoded(run(rows, splits, size=333))) == expected_ranges(rows, splits)


def test_packed_order_gives_up_on_keys_that_mostly_tie() -> None:
    keys = [b"same-8-b" + bytes([i % 251, i // 251]) * 4 for i in range(3000)]
    flat = np.frombuffer(b"".join(keys), np.uint8).copy()
    assert packed_order(flat, 16, len(keys), Scratch()) is None


@settings(max_examples=100, deadline=None)
@given(
    rows=st.dictionaries(
        st.binary(min_size=5, max_size=5),
        st.binary(min_size=3, max_size=3),
        min_size=1,
        max_size=80,
    ),
    dups=st.lists(st.integers(0, 79), max_size=10),
    splits=st.lists(st.binary(min_size=1, max_size=6), max_size=3, unique=True).map(sorted),
    size=st.integers(1, 20),
    target=st.sampled_from([1, 64, 1000, 64 << 20]),
    block=st.sampled_from([1, 30, 200, 65536]),
)
def test_fixed_width_rows_match_the_model_and_the_general_encoder(
    rows: dict[bytes, bytes],
    dups: list[int],
    splits: list[bytes],
    size: int,
    target: int,
    block: int,
) -> None:
    """One key width and one value width take the fixed-width encoder (every key stored whole,
    so every row has one length): the same entries as the model and the general encoder."""
    items = list(rows.items())
    # duplicate keys (the kept row is unspecified): give them their original value again
    items += [items[i % len(items)] for i in dups]
    options = DbOptions(l0_sst_size_bytes=target, block_size=block)
    ssts = run(items, splits, options, size=size)
    assert flatten(decoded(ssts)) == expected_ranges(items, splits)
    for _, _, data in ssts:
        table = SstReader.from_bytes(data, "t").read_all()
        general = encode_sst(table, SstOptions(block, DbOptions().bloom_bits_per_key))[0]
        assert SstReader.from_bytes(general, "g").read_all().equals(table)
        assert _fixed_layout(data, table)
    parts: dict[int, list[int]] = {}
    for index, part, _ in ssts:
        parts.setdefault(index, []).append(part)
    assert all(p == list(range(len(p))) for p in parts.values())


def _fixed_layout(data: bytes, table: pa.Table) -> bool:
    """Whether the SST's first block is in the fixed-width layout: rows of one length
    (SlateDB's row codec v2 with ``shared`` 0), a restart point at every row (our default
    restart interval, ``SstOptions.restart_interval``)."""
    kw, vw = len(table.column("key")[0].as_py()), len(table.column("value")[0].as_py())
    if kw >= 128 or vw >= 128:
        return True  # one-byte varints only below: longer widths are checked by the decode
    row = 3 + kw + vw + 9
    offsets = SstReader.from_bytes(data, "t").block_offsets
    body = data[offsets[0] : offsets[1] - 4]
    count = int.from_bytes(body[-2:], "big")
    restarts = [
        int.from_bytes(body[len(body) - 2 - 2 * (count - i) :][:2], "big") for i in range(count)
    ]
    return data[0] == 0 and restarts == [row * i for i in range(count)]
