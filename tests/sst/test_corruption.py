from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.sst_info import encode_sst_info
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.format import FOOTER_LEN, encode_footer, seal
from slatedb_core.sst.index import decode_index, encode_index
from slatedb_core.store.url import open_store
from tests.sst import batch_of, entries_of, numbered

ENTRIES = numbered(12, value_len=6)
NAME = "compacted/01J0000000000000000000000.sst"


def small_sst(codec: str) -> tuple[bytes, SstInfo]:
    opts = SstOptions(block_size=120, compression=codec)
    return encode_sst(batch_of(ENTRIES), opts)


def read_everything(data: bytes) -> None:
    reader = SstReader.from_bytes(data, NAME)
    assert entries_of(reader.read_all()) == ENTRIES  # a wrong answer fails the test outright
    for key, seq, kind, value in ENTRIES:
        assert reader.get(key) == (seq, kind, value)


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
    block1 = good.block_offsets[1]
    bad = bytearray(data)
    bad[block1 + 3] ^= 0x10
    reader = SstReader.from_bytes(bytes(bad), NAME)  # index and footer are intact: opens fine
    first_key = ENTRIES[0][0]
    assert reader.get(first_key) == good.get(first_key)  # block 0 is unaffected
    with pytest.raises(CorruptionError, match="block 1"):
        reader.get(block_first_key(good, 1))
    with pytest.raises(CorruptionError, match="block 1"):
        list(reader.scan())


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_truncating_or_extending_the_object_raises_corruption(codec: str) -> None:
    data, info = small_sst(codec)
    cuts = {
        0,
        1,
        8,
        63,
        64,
        65,
        info.index_offset,
        info.filter_offset,
        info.index_offset - 8,
        info.index_offset + 3,
        len(data) // 2,
        len(data) - 65,
        len(data) - 64,
        len(data) - 1,
    }
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
        {"entry_count": 11},
        {"first_key": b"key-000001"},
        {"last_key": None},
        {"compression": 4},
        {"filter_len": info.filter_len - 1},
        {"index_offset": info.index_offset + 8},
        {"size_bytes": len(data) - 1},
        {"index_offset": len(data) + 5},
    ):
        with pytest.raises(CorruptionError):
            SstReader.open(store, "t.sst", dataclasses.replace(info, **change))


def test_garbage_and_foreign_objects_raise_corruption() -> None:
    for blob in (b"", b"x", bytes(64), bytes(1000), b"PAR1" * 100, small_sst("none")[0][::-1]):
        with pytest.raises(CorruptionError):
            SstReader.from_bytes(blob, NAME)


def block_first_key(reader: SstReader, b: int) -> bytes:
    return bytes(list(reader.scan())[b].column(0)[0].as_py())


def reseal_block(data: bytearray, start: int, end: int) -> None:
    """Recompute a block's CRC after editing it, as a buggy writer (not bit rot) would leave it."""
    data[end - 4 : end] = struct.pack(">I", zlib.crc32(bytes(data[start : end - 4])))


def test_blocks_with_valid_checksums_but_impossible_structure_are_corruption() -> None:
    data, _ = small_sst("none")
    good = SstReader.from_bytes(data, NAME)
    start, end = good.block_offsets[1], good.block_offsets[2]
    first = block_first_key(good, 1)
    unshared, vlen = data[start + 1], data[start + 2]  # row 0: shared, unshared, value_len
    flags_at = 3 + unshared + vlen + 8
    trailer = end - 4 - start  # restart offsets, then their count, end here
    edits = {
        "restart row shares a prefix": (0, b"\x01"),
        "key runs past the block": (1, b"\x7f"),
        "value runs past the block": (2, b"\x7f"),
        "empty key": (1, b"\x00"),
        "unknown flags": (flags_at, b"\x10"),
        "tombstone and merge": (flags_at, b"\x09"),
        "no restart points": (trailer - 2, b"\x00\x00"),
        "restart offset past the rows": (trailer - 4, b"\xff\xff"),
        "first key below the index key": (3, b"A"),
        "a varint of six bytes": (1, b"\xff\xff\xff\xff\xff\xff"),
    }
    for what, (at, patch) in edits.items():
        bad = bytearray(data)
        bad[start + at : start + at + len(patch)] = patch
        reseal_block(bad, start, end)
        reader = SstReader.from_bytes(bytes(bad), NAME)
        with pytest.raises(CorruptionError, match="block 1"):
            list(reader.scan())
        with pytest.raises(CorruptionError, match="block 1"):
            reader.get(first)
        assert what


def test_footer_and_index_with_valid_checksums_but_wrong_offsets_are_corruption() -> None:
    data, info = small_sst("none")
    info_at = int.from_bytes(data[-FOOTER_LEN:-2], "big")
    changes: list[dict[str, Any]] = [
        {"index_offset": info.index_offset + 8},
        {"index_len": info.index_len + 1},
        {"filter_offset": info.filter_offset - 1},
        {"filter_len": info.filter_len + 2},
        {"stats_len": info.stats_len + 1},
        {"compression": 9},
        {"index_len": 0},
        {"stats_offset": len(data)},
    ]
    for change in changes:
        forged = encode_sst_info(dataclasses.replace(info, **change))
        with pytest.raises(CorruptionError):
            read_everything(data[:info_at] + encode_footer(forged, info_at))
    for version in (1, 3):
        with pytest.raises(CorruptionError, match="version"):
            read_everything(data[:-2] + version.to_bytes(2, "big"))
    end = info.index_offset + info.index_len
    offsets, keys = decode_index(NAME, data[info.index_offset : end - 4])
    for wrong in ([8, *offsets[1:]], [offsets[0], offsets[2], offsets[1], *offsets[3:]]):
        index = b"".join(seal(0, encode_index(wrong, keys)))
        assert len(index) == info.index_len
        with pytest.raises(CorruptionError, match="index"):
            read_everything(data[: info.index_offset] + index + data[end:])
