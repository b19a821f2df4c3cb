from __future__ import annotations

import itertools
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.sst import ENTRY_SCHEMA, SstOptions, SstReader, encode_sst
from slatedb_core.sst.rows import plan_blocks
from tests.sst import Entry, batch_of, entries_of, numbered

CODECS = ["none", "snappy", "zlib", "lz4", "zstd"]


@st.composite
def sorted_entries(draw: st.DrawFn) -> list[Entry]:
    keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=24), max_size=60)))
    out: list[Entry] = []
    for key in keys:
        seq = draw(st.integers(0, 2**64 - 1))
        if draw(st.booleans()):
            out.append((key, seq, 1, b""))
        else:
            big = draw(st.integers(0, 20)) == 0
            size = draw(st.integers(0, 3000 if big else 40))
            out.append((key, seq, 0, bytes([len(key) % 256]) * size))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=sorted_entries(),
    block_size=st.sampled_from([1, 64, 512, 4096, 65536]),
    codec=st.sampled_from(CODECS),
    bits=st.sampled_from([0, 1, 10]),
    interval=st.sampled_from([1, 2, 16]),
)
def test_random_sorted_batches_round_trip_through_every_read_path(
    entries: list[Entry], block_size: int, codec: str, bits: int, interval: int
) -> None:
    opts = SstOptions(
        block_size=block_size, bloom_bits_per_key=bits, compression=codec, restart_interval=interval
    )
    data, info = encode_sst(batch_of(entries), opts)
    reader = SstReader.from_bytes(data, "t")
    assert entries_of(reader.read_all()) == entries
    assert reader.info == info
    assert info.size_bytes == len(data) and info.entry_count == len(entries)
    for key, seq, kind, value in entries:
        assert reader.may_contain(key)
        assert reader.get(key) == (seq, kind, value)
        assert reader.get(key + b"\x00") is None or any(e[0] == key + b"\x00" for e in entries)


def test_info_records_first_and_last_key_and_the_codec() -> None:
    entries = numbered(300)
    data, info = encode_sst(batch_of(entries), SstOptions(block_size=256, compression="zstd"))
    assert (info.first_key, info.last_key) == (entries[0][0], entries[-1][0])
    assert info.compression == 4
    # SlateDB's order after the data blocks: filter, index, stats, then the info
    assert info.index_offset == info.filter_offset + info.filter_len
    assert info.stats_offset == info.index_offset + info.index_len
    assert info.filter_len > 0 and info.stats_len > 0 and info.filter_format == 1
    assert info.sst_type == 0
    reader = SstReader.from_bytes(data, "t")
    assert reader.block_count > 10
    assert (reader.first_key, reader.last_key, reader.entry_count) == (
        entries[0][0],
        entries[-1][0],
        300,
    )


def test_get_finds_present_keys_and_misses_absent_ones_in_gaps_and_outside() -> None:
    entries = numbered(500)
    reader = SstReader.from_bytes(encode_sst(batch_of(entries), SstOptions(block_size=300))[0], "t")
    for i, (key, seq, kind, value) in enumerate(entries):
        assert reader.get(key) == (seq, kind, value)
        assert reader.get(b"key-%06d" % (2 * i + 1)) is None
    for absent in (b"a", b"key-", b"key-0000000", b"key-999999", b"zzz", b"key-000998\x00"):
        assert reader.get(absent) is None


def test_values_of_several_mebibytes_get_their_own_blocks() -> None:
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB
    entries = [(b"a", 1, 0, b"x"), (b"b", 2, 0, big), (b"c", 3, 1, b""), (b"d", 4, 0, big[::-1])]
    for codec in CODECS:
        data, _ = encode_sst(batch_of(entries), SstOptions(block_size=1024, compression=codec))
        reader = SstReader.from_bytes(data, "t")
        assert reader.get(b"b") == (2, 0, big)
        assert reader.get(b"d") == (4, 0, big[::-1])
        assert entries_of(reader.read_all()) == entries


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_round_trips_and_compressible_data_shrinks(codec: str) -> None:
    entries = numbered(2000, value_len=200)
    data, _ = encode_sst(batch_of(entries), SstOptions(compression=codec))
    assert entries_of(SstReader.from_bytes(data, "t").read_all()) == entries
    if codec != "none":
        plain, _ = encode_sst(batch_of(entries))
        assert len(data) < len(plain) / 3


def test_an_empty_sst_still_has_a_footer_and_an_index() -> None:
    data, info = encode_sst(batch_of([]))
    assert info.entry_count == 0 and info.first_key is None and info.last_key is None
    assert info.filter_len == 0 and info.index_len > 0
    reader = SstReader.from_bytes(data, "wal/00001.sst")
    assert reader.read_all().num_rows == 0 and reader.block_count == 0
    assert reader.read_all().schema == ENTRY_SCHEMA
    assert reader.get(b"k") is None and not reader.may_contain(b"k")
    assert list(reader.scan(b"a", b"z")) == []
    assert len(data) < 200


def test_merge_operands_empty_values_and_long_keys_round_trip() -> None:
    long_key = b"d" + bytes(range(256)) * 200  # 51,201 bytes: varints of three bytes
    entries = [
        (b"a", 9, 2, b"operand"),
        (b"b", 8, 0, b""),
        (b"c", 7, 2, b""),
        (long_key, 6, 0, b"v" * 300),
        (long_key + b"\x00", 5, 1, b""),
    ]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=512))
    reader = SstReader.from_bytes(data, "t")
    assert entries_of(reader.read_all()) == entries
    assert reader.get(b"a") == (9, 2, b"operand") and reader.get(long_key) == (6, 0, b"v" * 300)
    assert reader.stats is not None
    assert (reader.stats.num_puts, reader.stats.num_deletes, reader.stats.num_merges) == (2, 1, 2)


def test_versions_of_a_key_newest_first_are_kept_and_get_returns_the_newest() -> None:
    """SlateDB keeps several versions of a key in one SST (newest first); lookups return the
    newest even when the versions straddle a block boundary."""
    entries = [
        (b"k%03d" % (i // 4), 1000 - i, i % 2, b"" if i % 2 else b"v%d" % i) for i in range(400)
    ]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=64))
    reader = SstReader.from_bytes(data, "t")
    assert reader.block_count > 20 and entries_of(reader.read_all()) == entries
    for i in range(0, 400, 4):
        assert reader.get(entries[i][0]) == entries[i][1:]
        assert [
            r[0] for b in reader.scan(entries[i][0], entries[i][0] + b"\x00") for r in entries_of(b)
        ] == [entries[i][0]] * 4


@pytest.mark.parametrize(
    "keys",
    [[b"b", b"a"], [b"a", b"a"], [b"a", b"c", b"b"], [b"a", b"b", b"b", b"c"]],
    ids=["descending", "duplicate-pair", "out-of-order-tail", "duplicate-middle"],
)
def test_unsorted_keys_or_versions_of_one_seq_are_rejected(keys: list[bytes]) -> None:
    with pytest.raises(InvalidArgument, match=r"sorted|descending seqs"):
        encode_sst(batch_of([(k, 1, 0, b"v") for k in keys]))


def test_bad_entries_and_options_are_rejected() -> None:
    with pytest.raises(InvalidArgument, match="empty"):
        encode_sst(batch_of([(b"", 1, 0, b"v")]))
    with pytest.raises(InvalidArgument, match="kind"):
        encode_sst(batch_of([(b"a", 1, 3, b"v")]))
    with pytest.raises(InvalidArgument, match="tombstone"):
        encode_sst(batch_of([(b"a", 1, 1, b"v")]))
    with pytest.raises(InvalidArgument, match="no 'seq'"):
        encode_sst(pa.RecordBatch.from_pydict({"key": [b"a"], "value": [b"v"]}))
    with pytest.raises(InvalidArgument, match="binary"):
        encode_sst(
            pa.RecordBatch.from_pydict({"key": [1], "seq": [1], "kind": [0], "value": [b""]})
        )
    with pytest.raises(InvalidArgument, match="seq"):
        encode_sst(
            pa.RecordBatch.from_pydict({"key": [b"a"], "seq": [-1], "kind": [0], "value": [b""]})
        )
    with pytest.raises(InvalidArgument, match="nulls"):
        encode_sst(
            pa.RecordBatch.from_pydict(
                {"key": [b"a", None], "seq": [1, 2], "kind": [0, 0], "value": [b"", b""]}
            )
        )
    for bad in (
        {"block_size": 0},
        {"block_size": 65537},
        {"bloom_bits_per_key": -1},
        {"compression": "gzip"},
        {"min_filter_keys": -1},
    ):
        with pytest.raises(InvalidArgument):
            SstOptions(**bad)


def test_tables_sliced_batches_large_binary_and_null_values_are_accepted() -> None:
    entries = numbered(100)
    expected = entries[10:90]
    sliced = batch_of(entries).slice(10, 80)  # non-zero array offsets
    table = pa.Table.from_batches([batch_of(expected[:30]), batch_of(expected[30:])])
    large = pa.RecordBatch.from_arrays(
        [
            pa.array([e[0] for e in expected], pa.large_binary()),
            pa.array([e[1] for e in expected], pa.int64()),
            pa.array([e[2] for e in expected], pa.int8()),
            pa.array([e[3] or None for e in expected], pa.large_binary()),
        ],
        names=["key", "seq", "kind", "value"],
    )
    for source in (sliced, table, large):
        data, _ = encode_sst(source, SstOptions(block_size=200))
        assert entries_of(SstReader.from_bytes(data, "t").read_all()) == expected


def test_encoding_is_deterministic() -> None:
    batch = batch_of(numbered(1000))
    opts = SstOptions(block_size=1000, compression="lz4")
    assert encode_sst(batch, opts) == encode_sst(batch, opts)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=4), max_size=12))
def test_input_is_accepted_exactly_when_rows_are_in_key_then_descending_seq_order(
    keys: list[bytes],
) -> None:
    batch = batch_of([(k, 100 - i, 0, b"") for i, k in enumerate(keys)])
    if all(a <= b for a, b in itertools.pairwise(keys)):
        data, _ = encode_sst(batch)
        assert [e[0] for e in entries_of(SstReader.from_bytes(data, "t").read_all())] == keys
    else:
        with pytest.raises(InvalidArgument):
            encode_sst(batch)


def test_timestamps_round_trip_and_expired_rows_read_as_tombstones_at_a_given_clock() -> None:
    """expire_ts / create_ts (SlateDB's ms) are stored per row when present; a row expires when
    the reader is given a clock at or past its expire_ts, and only then (SlateDB's reads leave
    expired rows to its rewrites)."""
    table = pa.table(
        {
            "key": pa.array([b"a", b"b", b"c", b"d"], pa.binary()),
            "seq": pa.array([4, 3, 2, 1], pa.uint64()),
            "kind": pa.array([0, 0, 1, 0], pa.uint8()),
            "value": pa.array([b"live", b"dies", b"", b"plain"], pa.binary()),
            "expire_ts": pa.array([2_000, 1_000, None, None], pa.int64()),
            "create_ts": pa.array([10, None, 30, 40], pa.int64()),
        }
    )
    data, _ = encode_sst(table, SstOptions(block_size=64))
    plain = encode_sst(table.drop_columns(["expire_ts", "create_ts"]))[0]
    assert not SstReader.from_bytes(plain, "t").has_expiring_rows
    reader = SstReader.from_bytes(data, "t")
    assert reader.has_expiring_rows
    assert reader.read_all(timestamps=True).to_pylist() == table.to_pylist()
    assert reader.get(b"b") == (3, 0, b"dies")  # no clock: nothing expires
    at = SstReader.from_bytes(data, "t", now_ms=1_000)
    assert entries_of(at.read_all()) == [
        (b"a", 4, 0, b"live"),
        (b"b", 3, 1, b""),
        (b"c", 2, 1, b""),
        (b"d", 1, 0, b"plain"),
    ]
    assert at.get(b"b") == (3, 1, b"") and at.get(b"a") == (4, 0, b"live")
    assert SstReader.from_bytes(data, "t", now_ms=2_000).get(b"a") == (4, 1, b"")


def _naive_plan(sizes: list[int], block_size: int) -> list[int]:
    """SlateDB's block builder, row by row: a row joins the block while rows + a u16 restart
    offset per row + the u16 count fit in ``block_size`` (the first row always joins)."""
    bounds, used, rows = [0], 0, 0
    for i, size in enumerate(sizes):
        if rows and used + size + 2 * (rows + 1) + 2 > block_size:
            bounds.append(i)
            used, rows = 0, 0
        used += size
        rows += 1
    if sizes:
        bounds.append(len(sizes))
    return bounds


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), max_size=200),
    block_size=st.sampled_from([1, 50, 256, 1000, 4096]),
)
def test_block_plan_with_a_restart_every_row_matches_a_row_by_row_builder(
    sizes: list[int], block_size: int
) -> None:
    rsize = np.asarray(sizes, dtype=np.int64)
    assert plan_blocks(rsize, rsize, block_size, 1) == _naive_plan(sizes, block_size)


@pytest.mark.parametrize("interval", [1, 16])
def test_restart_interval_sets_the_restart_points_and_keys_are_whole_at_each(
    interval: int,
) -> None:
    entries = numbered(100)
    data, info = encode_sst(
        batch_of(entries), SstOptions(block_size=65536, restart_interval=interval)
    )
    reader = SstReader.from_bytes(data, "t")
    assert reader.block_count == 1 and entries_of(reader.read_all()) == entries
    end = info.filter_offset - 4  # the single block's CRC follows its restart count
    (count,) = struct.unpack_from(">H", data, end - 2)
    assert count == -(-100 // interval)
    restarts = struct.unpack_from(f">{count}H", data, end - 2 - 2 * count)
    for j, off in enumerate(restarts):  # shared 0, then the whole key of row j * interval
        key = entries[j * interval][0]
        assert data[off] == 0 and data[off + 1] == len(key)
        assert data[off + 3 : off + 3 + len(key)] == key


def test_restart_interval_out_of_range_is_refused() -> None:
    for bad in (0, -1, 1 << 17):
        with pytest.raises(InvalidArgument):
            SstOptions(restart_interval=bad)
