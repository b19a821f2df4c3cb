"""SlateDB 0.17's SsTableInfo table (schemas/sst.fbs): our codec against itself, and against SST
footers and manifests the slatedb 0.17 wheel writes (docs/format.md, "Manifest")."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.sst_info import decode_sst_info, encode_sst_info

U64 = st.integers(0, 2**64 - 1)
KEYS = st.none() | st.binary(max_size=40)

INFOS = st.builds(
    SstInfo,
    first_key=KEYS,
    last_key=KEYS,
    index_offset=U64,
    index_len=U64,
    filter_offset=U64,
    filter_len=U64,
    compression=st.integers(0, 4),
    entry_count=U64,
    size_bytes=U64,
    sst_type=st.integers(0, 1),
    stats_offset=U64,
    stats_len=U64,
    filter_format=st.integers(0, 1),
)


@given(INFOS)
def test_round_trip(info: SstInfo) -> None:
    assert decode_sst_info(encode_sst_info(info), "x") == info


def test_absent_and_empty_keys_differ() -> None:
    assert decode_sst_info(encode_sst_info(SstInfo(first_key=b"")), "x").first_key == b""
    assert decode_sst_info(encode_sst_info(SstInfo()), "x").first_key is None


def _slots(buf: bytes) -> list[int]:
    """The vtable of a standalone root: the offset of each slot (0 = absent)."""
    root = struct.unpack_from("<I", buf, 0)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    vsize = struct.unpack_from("<H", buf, vt)[0]
    return list(struct.unpack_from(f"<{(vsize - 4) // 2}H", buf, vt + 4))


def test_ours_sit_past_slateDBs_slots_and_only_when_known() -> None:
    known = _slots(encode_sst_info(SstInfo(b"a", b"b", entry_count=3, size_bytes=99)))
    assert len(known) == 18 and known[16] and known[17]  # SlateDB 0.17 uses slots 0-10
    assert not any(known[11:16])
    unknown = _slots(encode_sst_info(SstInfo(b"a", b"b")))
    assert len(unknown) == 11  # nothing of ours: the vtable is as long as SlateDB's


def test_values_out_of_range_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        encode_sst_info(SstInfo(index_offset=2**64))
    with pytest.raises(InvalidArgument):
        encode_sst_info(SstInfo(compression=256))


@pytest.mark.parametrize("cut", [0, 3, 7, 20, 60])
def test_truncated_bytes_are_corruption_naming_the_object(cut: int) -> None:
    data = encode_sst_info(SstInfo(b"first", b"last", 1, 2, 3, 4, entry_count=5, size_bytes=6))
    with pytest.raises(CorruptionError, match="sst-17"):
        decode_sst_info(data[:cut], "sst-17")


def test_bad_offsets_are_corruption() -> None:
    data = bytearray(encode_sst_info(SstInfo(b"first", b"last")))
    struct.pack_into("<I", data, 0, len(data) + 100)
    with pytest.raises(CorruptionError):
        decode_sst_info(bytes(data), "x")


def _footer_info(sst: bytes) -> memoryview:
    """SlateDB 0.17's SST tail: [...][info][u32 crc][u64 BE info offset][u16 BE version 2]."""
    assert struct.unpack_from(">H", sst, len(sst) - 2)[0] == 2
    offset = struct.unpack_from(">Q", sst, len(sst) - 10)[0]
    return memoryview(sst)[offset : len(sst) - 14]


@pytest.mark.slatedb
def test_decodes_the_footers_slatedb_writes(tmp_path: Path) -> None:
    from tests.interop.oracle import Oracle, settings

    root = tmp_path
    oracle = Oracle(root)
    try:
        db = oracle.open_db(s=settings(compactor=False))
        for i in range(300):
            db.put(b"key%05d" % i, b"value-%d" % i)
        db.flush_wal()
        db.flush_memtable()
        db.put(b"tail", b"in the WAL")
        db.flush_wal()
        db.shutdown()
        views = {v.sst.id.value: v.sst.info for v in oracle.admin().latest().l0}
    finally:
        oracle.close()
    compacted = sorted((root / "db" / "compacted").glob("*.sst"))
    assert compacted and len(compacted) == len(views)
    for path in compacted:
        ours = decode_sst_info(_footer_info(path.read_bytes()), str(path))
        theirs = views[path.stem]
        assert ours.first_key == theirs.first_entry and ours.last_key == theirs.last_entry
        assert (ours.index_offset, ours.index_len) == (theirs.index_offset, theirs.index_len)
        assert (ours.filter_offset, ours.filter_len) == (theirs.filter_offset, theirs.filter_len)
        assert (ours.stats_offset, ours.stats_len) == (theirs.stats_offset, theirs.stats_len)
        assert ours.sst_type == 0 and ours.compression == 0
        assert ours.filter_format == theirs.filter_format.value
        assert ours.entry_count == 0 and ours.size_bytes == 0  # SlateDB writes none of ours
        assert decode_sst_info(encode_sst_info(ours), "again") == ours
    wals = [p for p in sorted((root / "db" / "wal").glob("*.sst")) if p.stat().st_size]
    assert wals
    for path in wals:
        info = decode_sst_info(_footer_info(path.read_bytes()), str(path))
        assert info.sst_type == 1 and info.first_key is not None and len(info.first_key) == 8
