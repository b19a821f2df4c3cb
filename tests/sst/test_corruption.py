from __future__ import annotations

import dataclasses
import struct
import zlib

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.model import SstInfo
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.format import TAIL, TAIL_LEN, Tail, encode_footer
from slatedb_core.store.url import open_store
from tests.sst import batch_of, entries_of, numbered

ENTRIES = numbered(12, value_len=6)
NAME = "compacted/01J0000000000000000000000.sst"


def small_sst(codec: str) -> tuple[bytes, SstInfo]:
    opts = SstOptions(block_size=120, compression=codec)
    return encode_sst(batch_of(ENTRIES), opts, metadata={"writer_epoch": 3})


def read_everything(data: bytes) -> None:
    reader = SstReader.from_bytes(data, NAME)
    assert entries_of(reader.read_all()) == ENTRIES  # a wrong answer fails the test outright
    for key, seq, kind, value in ENTRIES:
        assert reader.get(key) == (seq, kind, value)
    assert reader.metadata == {"writer_epoch": 3}


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_flipping_any_byte_raises_corruption_naming_the_object(codec: str, mask: int) -> None:
    data, info = small_sst(codec)
    read_everything(data)
    assert info.index_offset > 0 and len(data) < 4096
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= mask
        with pytest.raises(CorruptionError) as exc:
            read_everything(bytes(bad))
        assert exc.value.name == NAME, pos


def test_a_flip_inside_a_block_surfaces_only_when_that_block_is_read() -> None:
    data, _ = small_sst("none")
    good = SstReader.from_bytes(data, NAME)
    assert good.block_count >= 3
    block1 = good._offs[1]
    bad = bytearray(data)
    bad[block1 + 3] ^= 0x10
    reader = SstReader.from_bytes(bytes(bad), NAME)  # index and footer are intact: opens fine
    first_key = good._index.first_keys[0]
    assert reader.get(first_key) == good.get(first_key)  # block 0 is unaffected
    with pytest.raises(CorruptionError, match="block 1"):
        reader.get(good._index.first_keys[1])
    with pytest.raises(CorruptionError, match="block 1"):
        list(reader.scan())


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_truncating_or_extending_the_object_raises_corruption(codec: str) -> None:
    data, info = small_sst(codec)
    cuts = {0, 1, 8, 63, 64, 65, info.index_offset, info.filter_offset, info.index_offset - 8,
            info.index_offset + 3, len(data) // 2, len(data) - 65, len(data) - 64, len(data) - 1}
    for cut in sorted(cuts):
        with pytest.raises(CorruptionError):
            read_everything(data[:cut])
    for extra in (b"\x00", bytes(64), data[-64:]):
        with pytest.raises(CorruptionError):
            read_everything(data + extra)


def test_a_truncated_object_in_the_store_raises_corruption_with_and_without_info() -> None:
    data, info = small_sst("none")
    store = open_store("memory://")
    for cut in (10, info.index_offset, len(data) - 1):
        store.put("t.sst", data[:cut])
        with pytest.raises(CorruptionError):
            SstReader.open(store, "t.sst")
        with pytest.raises(CorruptionError):
            SstReader.open(store, "t.sst", info)


def test_sst_info_that_disagrees_with_the_object_is_corruption() -> None:
    data, info = small_sst("none")
    store = open_store("memory://")
    store.put("t.sst", data)
    assert SstReader.open(store, "t.sst", info).info == info
    for change in (
        {"entry_count": 11}, {"first_key": b"key-000001"}, {"last_key": None},
        {"compression": 4}, {"filter_len": info.filter_len - 1},
        {"index_offset": info.index_offset + 8}, {"size_bytes": len(data) - 1},
        {"index_offset": len(data) + 5},
    ):
        with pytest.raises(CorruptionError):
            SstReader.open(store, "t.sst", dataclasses.replace(info, **change))


def test_garbage_and_foreign_objects_raise_corruption() -> None:
    for blob in (b"", b"x", bytes(64), bytes(1000), b"PAR1" * 100, small_sst("none")[0][::-1]):
        with pytest.raises(CorruptionError):
            SstReader.from_bytes(blob, NAME)


def reseal_block(data: bytearray, start: int, end: int) -> None:
    """Recompute a block's CRC after editing it, as a buggy writer (not bit rot) would leave it."""
    data[end - 4 : end] = struct.pack("<I", zlib.crc32(bytes(data[start : end - 4])))


def test_blocks_with_valid_checksums_but_impossible_structure_are_corruption() -> None:
    data, _ = small_sst("none")
    good = SstReader.from_bytes(data, NAME)
    start, end = good._offs[1], good._offs[2]
    n = good._counts[1]
    edits = {
        "key offset past the end": (8 * n + 4, struct.pack("<i", 10_000)),
        "empty key": (8 * n + 4, struct.pack("<i", 0)),
        "value offsets decrease": (12 * n + 8, struct.pack("<i", -1)),
        "unknown kind": (16 * n + 8, b"\x07"),
        "entry count": (end - start - 8, struct.pack("<I", n + 1)),
        "raw length": (end - start - 12, struct.pack("<I", 3)),
        "body length": (end - start - 16, struct.pack("<I", 1 << 30)),
        "first key": (17 * n + 8, b"A"),
    }
    for what, (at, patch) in edits.items():
        bad = bytearray(data)
        bad[start + at : start + at + len(patch)] = patch
        reseal_block(bad, start, end)
        reader = SstReader.from_bytes(bytes(bad), NAME)
        with pytest.raises(CorruptionError, match="block 1"):
            list(reader.scan())
        with pytest.raises(CorruptionError, match="block 1"):
            reader.get(good._index.first_keys[1])
        assert what


def test_footer_and_index_with_valid_checksums_but_wrong_offsets_are_corruption() -> None:
    data, info = small_sst("none")
    tail_at = len(data) - TAIL_LEN
    fields = list(TAIL.unpack_from(data, tail_at))
    meta = data[tail_at - fields[5] : tail_at]
    for field, delta in ((0, 8), (1, 1), (2, -1), (3, 2), (4, 1), (5, 1), (9, 1), (9, -1)):
        forged = fields.copy()
        forged[field] += delta
        io, il, fo, fl, count, meta_len, codec, _, version, blocks = forged[:10]
        tail = Tail(io, il, fo, fl, count, meta_len, codec, version, blocks)
        bad = data[: tail_at - fields[5]] + encode_footer(tail, meta)
        with pytest.raises(CorruptionError):
            read_everything(bad)
    index = bytearray(data[info.index_offset : info.filter_offset])
    index[8:16] = struct.pack("<Q", 8)  # block 0 no longer starts at 0
    index[-4:] = struct.pack("<I", zlib.crc32(bytes(index[:-4])))
    with pytest.raises(CorruptionError, match="index"):
        read_everything(data[: info.index_offset] + bytes(index) + data[info.filter_offset :])
