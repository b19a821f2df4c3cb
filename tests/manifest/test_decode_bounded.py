"""Crafted FlatBuffers objects stay bounded: a decoder copies at most a few times its input.

Issue 39, item 5: a 74 KB manifest whose L0 vector named one view N times made ``read_manifest``
copy 256 MiB (3,627x its size). FlatBuffers lets any number of offsets name one table, so every
decoder built on :class:`slatedb_core.manifest.flatbuf.FbReader` (ManifestV2, ManifestV1, SST
info, ``.compactions``) could be driven the same way. Each attack below is a script-like
reproduction; peak memory is measured with tracemalloc and must stay within
``PEAK_FACTOR * len(input) + PEAK_SLACK``.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable

from ulid import ULID

from slatedb_core.compactor.compactions import (
    CompactionRecord,
    CompactionsState,
    decode_state,
    encode_state,
)
from slatedb_core.errors import CorruptionError
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest.codec import decode_manifest, encode_manifest
from slatedb_core.manifest.model import CompactedSst, Manifest, SstInfo, SstView
from slatedb_core.manifest.tables import MANIFEST_OURS
from tests.manifest.fbtools import drop_slot

PEAK_FACTOR = 64
PEAK_SLACK = 2 << 20
N = 2000
BIG = 60_000  # a key/string that fits a 64 KiB-ish object


def assert_refused_within_bounds(decode: Callable[[], object], size: int) -> None:
    """``decode`` of ``size`` input bytes peaks within the bound and raises CorruptionError."""
    tracemalloc.start()
    try:
        try:
            decode()
            error = None
        except CorruptionError as e:
            error = e
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = PEAK_FACTOR * size + PEAK_SLACK
    assert peak <= bound, f"peak {peak >> 20} MiB for {size} input bytes (bound {bound >> 20})"
    assert error is not None


def _u32(buf: bytearray | bytes, at: int) -> int:
    return int(struct.unpack_from("<I", buf, at)[0])


def _follow(buf: bytearray | bytes, table: int, slot: int) -> int:
    """Where the offset field ``slot`` of the table at ``table`` points (positions in ``buf``,
    which starts with the 2-byte version prefix)."""
    vt = table - struct.unpack_from("<i", buf, table)[0]
    field = table + struct.unpack_from("<H", buf, vt + 4 + 2 * slot)[0]
    return int(field + _u32(buf, field))


def _root(buf: bytearray | bytes) -> int:
    return 2 + _u32(buf, 2)


def _alias(buf: bytearray, vector: int) -> None:
    """Make every element of the vector of tables at ``vector`` name its first element's table."""
    first = vector + 4
    target = first + _u32(buf, first)
    for i in range(1, _u32(buf, vector)):
        at = vector + 4 + 4 * i
        struct.pack_into("<I", buf, at, target - at)


def _big_range(key: bytes) -> BytesRange:
    return BytesRange(BytesBound.included(key), BytesBound.unbounded())


def _manifest_with_l0(views: list[SstView], sst: CompactedSst) -> bytearray:
    m = Manifest(ssts=(sst,), l0=tuple(views))
    # SlateDB's form (no table of ours, so no checksum of ours to repair after the surgery)
    return bytearray(drop_slot(encode_manifest(m, manifest_id=1), MANIFEST_OURS))


def test_l0_naming_one_view_n_times_is_refused_within_bounds() -> None:
    """The reported attack: L0's N elements all name the view whose range holds a 60 KB key."""
    sst = CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z"))
    big = SstView(ULID(), sst.id, _big_range(b"k" * BIG))
    small = [SstView(ULID.from_int(i + 1), sst.id) for i in range(N - 1)]
    buf = _manifest_with_l0([big, *small], sst)
    decode_manifest(bytes(buf), name="m")  # sound before the surgery
    _alias(buf, _follow(buf, _root(buf), 9))  # ManifestV2 slot 9: l0
    data = bytes(buf)
    assert_refused_within_bounds(lambda: decode_manifest(data, name="m"), len(data))


def test_views_sharing_one_range_are_refused_within_bounds() -> None:
    """Distinct views (ids and tables), each range offset naming one range with a 60 KB key:
    no view appears twice, yet each would copy the key again."""
    sst = CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z"))
    views = [SstView(ULID(), sst.id, _big_range(b"k" * BIG))]
    views += [SstView(ULID.from_int(i + 1), sst.id, _big_range(b"s")) for i in range(N - 1)]
    buf = _manifest_with_l0(views, sst)
    l0 = _follow(buf, _root(buf), 9)
    tables = [l0 + 4 + 4 * i + _u32(buf, l0 + 4 + 4 * i) for i in range(N)]
    target = _follow(buf, tables[0], 2)  # CompactedSsTableView slot 2: visible_range
    for t in tables[1:]:
        vt = t - struct.unpack_from("<i", buf, t)[0]
        field = t + struct.unpack_from("<H", buf, vt + 8)[0]
        struct.pack_into("<I", buf, field, target - field)
    data = bytes(buf)
    assert_refused_within_bounds(lambda: decode_manifest(data, name="m"), len(data))


def test_compactions_naming_one_record_n_times_is_refused_within_bounds() -> None:
    """``.compactions``: the records vector's N elements all name the record whose error string
    is 60 KB."""
    records = [
        CompactionRecord(
            id=ULID.from_int(i + 1),
            kind="l0",
            source_view_ids=(),
            source_run_ids=(),
            destination=0,
            status="failed",
            error="e" * BIG if i == 0 else "",
        )
        for i in range(N)
    ]
    buf = bytearray(encode_state(CompactionsState(compactor_epoch=1, compactions=tuple(records))))
    root = _root(buf)
    _alias(buf, _follow(buf, root, 1))  # CompactionsV1 slot 1: recent_compactions
    # our CRC-32 (slot 9) made right again, as an attacker would
    vt = root - struct.unpack_from("<i", buf, root)[0]
    at = root + struct.unpack_from("<H", buf, vt + 4 + 2 * 9)[0]
    struct.pack_into("<I", buf, at, zlib.crc32(bytes(buf[:at]) + bytes(4) + bytes(buf[at + 4 :])))
    data = bytes(buf)
    assert_refused_within_bounds(lambda: decode_state(data, "c"), len(data))


def test_a_large_sound_manifest_still_decodes() -> None:
    """The budget never refuses what the writer wrote: many views, each with its own large key."""
    sst = CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z"))
    views = [
        SstView(ULID.from_int(i + 1), sst.id, _big_range(bytes([i % 256]) * 5000))
        for i in range(200)
    ]
    m = Manifest(ssts=(sst,), l0=tuple(views))
    assert decode_manifest(encode_manifest(m, manifest_id=1), name="m").l0 == m.l0
