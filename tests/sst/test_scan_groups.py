"""Scans that hand over the blocks decoded together as one batch (``SstReader.scan(groups=True)``,
what a database scan uses) and block decoding straight from the read's bytes (falling back to a
padded copy when a fixed-width gather runs past the end): the rows, their "keys distinct" flags
and the newest versions must be exactly those of the per-block scan and of the entries written."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst import decode as decode_mod
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.reader import SstScan
from slatedb_core.store.url import open_store
from tests.sst import Entry, batch_of, entries_of, newest_in_range


@st.composite
def versioned_entries(draw: st.DrawFn) -> list[Entry]:
    """Sorted keys of 1..40 bytes (shared prefixes likely), each with 1..3 versions newest
    first; values empty to 150 bytes; some tombstones."""
    prefix = draw(st.binary(max_size=30))
    keys = sorted(
        draw(
            st.sets(
                st.binary(min_size=1, max_size=10).map(lambda s: prefix + s),
                min_size=1,
                max_size=60,
            )
        )
    )
    out: list[Entry] = []
    seq = 10_000
    for key in keys:
        for _ in range(draw(st.integers(1, 3))):
            tomb = draw(st.integers(0, 5)) == 0
            value = b"" if tomb else draw(st.binary(max_size=150))
            out.append((key, seq, 1 if tomb else 0, value))
            seq -= 1
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=versioned_entries(),
    block_size=st.sampled_from([1, 64, 300, 65536]),
    interval=st.sampled_from([1, 16]),
    readahead=st.sampled_from([1, 700, 5000, None]),
    bounds=st.tuples(st.none() | st.binary(max_size=3), st.none() | st.binary(max_size=3)),
    cached=st.booleans(),
)
def test_grouped_scans_hold_the_rows_flags_and_newest_versions_of_per_block_scans(
    entries: list[Entry],
    block_size: int,
    interval: int,
    readahead: int | None,
    bounds: tuple[bytes | None, bytes | None],
    cached: bool,
) -> None:
    data, _ = encode_sst(
        batch_of(entries), SstOptions(block_size=block_size, restart_interval=interval)
    )
    store = open_store("memory://")
    store.put("t.sst", data)
    cache = BlockCache(1 << 24) if cached else None
    reader = SstReader.open(store, "t.sst", cache=cache)
    if cached:  # some blocks then come from the cache, between groups decoded by one GET
        for e in entries[::4]:
            reader.get(e[0])
    lo, hi = bounds
    plain = [r for b in reader.scan(lo, hi) for r in entries_of(b)]
    grouped = reader.scan(lo, hi, readahead=readahead, groups=True)
    assert isinstance(grouped, SstScan)
    got: list[Entry] = []
    for batch, distinct, first, last in grouped.flagged():
        rows = entries_of(batch)
        keys = [r[0] for r in rows]
        assert rows and (first, last) == (keys[0], keys[-1])
        # a wrong True would make newest_versions serve an older version
        assert not distinct or all(a < b for a, b in itertools.pairwise(keys))
        got += rows
    assert (
        got
        == plain
        == [e for e in entries if (lo is None or e[0] >= lo) and (hi is None or e[0] < hi)]
    )
    scan = reader.scan(lo, hi, readahead=readahead, groups=True)
    assert [r for b in newest_versions(scan) for r in entries_of(b)] == newest_in_range(
        entries, lo, hi
    )


def test_versions_straddling_blocks_of_one_group_are_not_flagged_distinct() -> None:
    """One row per block, every block distinct, all read by one GET: the joined batch repeats
    keys at its block boundaries, so it must not be flagged distinct."""
    entries = [(b"k%02d" % (i // 3), 100 - i, 0, b"v%d" % i) for i in range(30)]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=1))
    reader = SstReader.from_bytes(data, "t")
    flagged = list(reader.scan(groups=True).flagged())
    assert len(flagged) == 1 and flagged[0][0].num_rows == 30 and not flagged[0][1]
    assert [r for b in newest_versions(reader.scan(groups=True)) for r in entries_of(b)] == entries[
        ::3
    ]
    distinct = [(b"k%02d" % i, 100 - i, 0, b"v") for i in range(30)]
    data, _ = encode_sst(batch_of(distinct), SstOptions(block_size=1))
    flagged = list(SstReader.from_bytes(data, "t").scan(groups=True).flagged())
    assert len(flagged) == 1 and flagged[0][1]


def test_a_gather_past_the_end_falls_back_to_a_padded_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """64-byte keys, then a last row with a one-byte key and an empty value: the key matrix's
    gather of the last row (64 bytes) runs past the block's bytes, so the walk is redone on a
    padded copy and decodes the same rows."""
    entries = [(b"%064d" % i, 50 - i, 0, b"x" * (i % 3)) for i in range(3)]
    entries.append((b"z", 1, 0, b""))
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=65536, restart_interval=16))
    pads: list[int] = []
    walk = decode_mod._walk_padded

    def spy(*args: object) -> decode_mod.Decoded:
        pads.append(int(args[-1]))  # type: ignore[call-overload]
        return walk(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(decode_mod, "_walk_padded", spy)
    reader = SstReader.from_bytes(data, "t")
    assert entries_of(reader.read_all()) == entries
    assert pads == [0, decode_mod._PAD]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=versioned_entries(), interval=st.sampled_from([1, 16]))
def test_unpadded_and_padded_walks_decode_the_same_rows(
    entries: list[Entry],
    interval: int,
) -> None:
    """Whatever path a block takes, the rows are those written; and decoding from a padded
    copy (the fallback) gives the same columns as decoding in place."""
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=65536, restart_interval=interval))
    reader = SstReader.from_bytes(data, "t")
    assert entries_of(reader.read_all()) == entries
    offs = reader.block_offsets
    raw = memoryview(data)[offs[0] : offs[1] - 4]  # block 0 without its CRC (uncompressed)
    buf = np.frombuffer(raw, dtype=np.uint8)
    dec = decode_mod.decode_blocks("t", pa.py_buffer(bytes(raw)), [(0, len(raw))], 0, 0)
    padded = np.concatenate(
        [np.zeros(decode_mod._PAD, np.uint8), buf, np.zeros(decode_mod._PAD, np.uint8)]
    )
    n_restarts = int.from_bytes(bytes(raw[-2:]), "big")
    starts = np.frombuffer(
        bytes(raw[len(raw) - 2 - 2 * n_restarts : len(raw) - 2]), dtype=">u2"
    ).astype(np.int64)
    ends = np.append(starts[1:], len(raw) - 2 - 2 * n_restarts)
    ref = decode_mod._walk_padded(
        pa.py_buffer(bytes(raw)),
        padded,
        starts,
        ends,
        np.zeros(len(starts), np.int64),
        1,
        0,
        decode_mod._PAD,
    )
    assert dec.keys.equals(ref.keys) and dec.values.equals(ref.values)
    assert np.array_equal(dec.seqs, ref.seqs) and np.array_equal(dec.kinds, ref.kinds)


def _decode_both(raw: bytes) -> tuple[object, object]:
    """Block 0 of ``raw`` (a block without its CRC) decoded in place (what decode_blocks does)
    and from a padded copy: each the Decoded, or the exception's class name."""
    out: list[object] = []
    for padded_walk in (False, True):
        try:
            if not padded_walk:
                out.append(decode_mod.decode_blocks("t", pa.py_buffer(raw), [(0, len(raw))], 0, 0))
                continue
            buf = np.frombuffer(raw, dtype=np.uint8)
            n_restarts = int.from_bytes(raw[-2:], "big")
            data_end = len(raw) - 2 - 2 * n_restarts
            if n_restarts == 0 or data_end < 0:
                raise ValueError("restarts")
            starts = np.frombuffer(raw[data_end : len(raw) - 2], dtype=">u2").astype(np.int64)
            if starts[0] != 0 or (starts[1:] <= starts[:-1]).any() or starts[-1] >= data_end:
                raise ValueError("restarts")
            ends = np.append(starts[1:], data_end)
            padded = np.concatenate(
                [np.zeros(decode_mod._PAD, np.uint8), buf, np.zeros(decode_mod._PAD, np.uint8)]
            )
            out.append(
                decode_mod._walk_padded(
                    pa.py_buffer(raw),
                    padded,
                    starts,
                    ends,
                    np.zeros(len(starts), np.int64),
                    1,
                    0,
                    decode_mod._PAD,
                )
            )
        except Exception as e:  # any failure counts: both paths must agree
            out.append(
                "error"
                if isinstance(e, ValueError | IndexError | pa.ArrowException | CorruptionError)
                else repr(e)
            )
    return out[0], out[1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=versioned_entries(),
    interval=st.sampled_from([1, 16]),
    flips=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=3
    ),
)
def test_damaged_blocks_decode_in_place_as_from_a_padded_copy(
    entries: list[Entry],
    interval: int,
    flips: list[tuple[float, int]],
) -> None:
    """Bytes of a block changed (as if under a valid checksum): decoding in place either fails
    as the padded decode does, or gives exactly its rows; never other rows."""
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=65536, restart_interval=interval))
    offs = SstReader.from_bytes(data, "t").block_offsets
    raw = bytearray(data[offs[0] : offs[1] - 4])
    for at, byte in flips:
        raw[int(at * len(raw))] = byte
    in_place, padded = _decode_both(bytes(raw))
    if isinstance(in_place, decode_mod.Decoded) and isinstance(padded, decode_mod.Decoded):
        assert in_place.keys.equals(padded.keys) and in_place.values.equals(padded.values)
        assert np.array_equal(in_place.seqs, padded.seqs)
        assert np.array_equal(in_place.kinds, padded.kinds)
    else:
        assert in_place == "error" and padded == "error", (in_place, padded)


@pytest.mark.parametrize("shift", ["first", "last"])
def test_a_block_of_a_group_that_disagrees_with_its_index_key_is_corruption(shift: str) -> None:
    """A scan decodes a GET's blocks as one Block (issue 42: 4 KiB blocks); each block's first
    and last key must still lie between its index keys, as the per-block check required: an
    index key raised above block 5's first key (or lowered below block 4's last) names the
    block."""
    entries = [(b"k%03d" % i, 100, 0, b"v") for i in range(40)]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=1))
    reader = SstReader.from_bytes(data, "t")
    keys = list(reader.index_keys)
    assert len(keys) == 40
    keys[5] = b"k005\x00" if shift == "first" else b"k003\x00"
    reader._index_keys = keys  # what a misplaced block looks like to the index check
    with pytest.raises(CorruptionError, match=r"block [45] keys disagree with the index"):
        list(reader.scan(groups=True))
    with pytest.raises(CorruptionError, match=r"block [45] keys disagree with the index"):
        list(reader.blocks(0, reader.block_count))
