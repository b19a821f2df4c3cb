"""Point lookups in raw cached blocks (slatedb_core/sst/raw_block.py) answer what the scan reads.

Issue 42, goal 1: a point lookup now binary-searches a block's restart offsets in its bytes
instead of decoding every row. Properties over random SSTs (many versions of a key newest
first, tombstones, merge operands, rows with an expire_ts, tiny and large blocks, restart
interval 1 and SlateDB's 16, uncompressed and zstd): ``get`` and ``get_sorted`` (with a cache,
cold and warm, and without one) return each key's newest row exactly as the full scan decodes
it, and None for absent keys; a scan after lookups filled the cache reads the same rows; a
damaged block raises ``CorruptionError`` and nothing else."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.format import ROW_SCHEMA
from slatedb_core.sst.raw_block import RawBlock
from slatedb_core.store.checksum import crc32

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
Row = tuple[bytes, int, int, bytes, int | None]  # key, seq, kind, value, expire_ts

_KEY = st.lists(st.sampled_from([0, 1, 0x61, 0x62, 0xFF]), min_size=1, max_size=20).map(bytes)


@st.composite
def sst_rows(draw: st.DrawFn) -> list[Row]:
    keys = sorted(set(draw(st.lists(_KEY, min_size=1, max_size=120))))
    rows: list[Row] = []
    seq = 10_000
    for k in keys:
        for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 20]))):  # versions, newest first
            kind = draw(st.sampled_from([0, 0, 0, 1, 2]))
            value = b"" if kind == 1 else draw(st.binary(max_size=draw(st.sampled_from([8, 300]))))
            expire = draw(st.sampled_from([None, None, None, 5, 10**12]))
            rows.append((k, seq, kind, value, None if kind == 1 else expire))
            seq -= 1
    return rows


def _batch(rows: list[Row]) -> pa.RecordBatch:
    cols = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(cols[0], pa.binary()),
            pa.array(cols[1], pa.uint64()),
            pa.array(cols[2], pa.uint8()),
            pa.array(cols[3], pa.binary()),
            pa.array(cols[4], pa.int64()),
            pa.array([None] * len(rows), pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )


def _newest_by_scan(reader: SstReader) -> dict[bytes, tuple[int, int, bytes]]:
    """Each key's first (newest) row, as the full decode of every block reads it."""
    out: dict[bytes, tuple[int, int, bytes]] = {}
    for batch in reader.scan():
        for k, s, kind, v in zip(*(batch.column(i).to_pylist() for i in range(4)), strict=True):
            out.setdefault(k, (s, kind, v))
    return out


OPTIONS = st.builds(
    SstOptions,
    block_size=st.sampled_from([1, 64, 256, 4096, 65536]),
    restart_interval=st.sampled_from([1, 1, 16]),
    compression=st.sampled_from(["none", "none", "zstd"]),
)


@SETTINGS
@given(rows=sst_rows(), options=OPTIONS, now=st.sampled_from([None, 7]), data=st.data())
def test_lookups_answer_what_the_scan_reads(
    rows: list[Row], options: SstOptions, now: int | None, data: st.DataObject
) -> None:
    blob, _ = encode_sst(_batch(rows), options)
    model = _newest_by_scan(SstReader.from_bytes(blob, "m", now_ms=now))
    present = sorted(model)
    absent = sorted(
        set(data.draw(st.lists(_KEY, max_size=30)))
        | {k + b"\x00" for k in present[:5]}
        | {b"\x00"} - set(present)
    )
    asked = sorted(set(present) | set(absent))
    want = [model.get(k) for k in asked]
    cache = BlockCache(64 << 20)
    for reader in (
        SstReader.from_bytes(blob, "c", cache=cache, now_ms=now),  # cold, then warm
        SstReader.from_bytes(blob, "c", cache=cache, now_ms=now),
        SstReader.from_bytes(blob, "n", now_ms=now),  # no cache
    ):
        assert [reader.get(k) for k in asked] == want
        assert reader.get_sorted(asked) == want
    # lookups filled the cache with raw blocks; a scan decodes them to the same rows
    cached = SstReader.from_bytes(blob, "c", cache=cache, now_ms=now)
    assert any(isinstance(cache.get("c", b), RawBlock) for b in range(cached.block_count))
    assert _newest_by_scan(cached) == model
    assert cached.read_all().equals(SstReader.from_bytes(blob, "x", now_ms=now).read_all())


@SETTINGS
@given(rows=sst_rows(), options=OPTIONS, reseal=st.booleans(), data=st.data())
def test_a_damaged_block_raises_corruption_and_nothing_else(
    rows: list[Row], options: SstOptions, reseal: bool, data: st.DataObject
) -> None:
    """A flipped byte under the stored CRC: every lookup that reads the block raises
    ``CorruptionError``. With the CRC recomputed (a buggy writer, not bit rot), a lookup
    raises ``CorruptionError`` or answers; no other exception escapes."""
    blob, _ = encode_sst(_batch(rows), options)
    good = SstReader.from_bytes(blob, "g")
    offs = good.block_offsets
    b = data.draw(st.integers(0, good.block_count - 1))
    at = data.draw(st.integers(offs[b], offs[b + 1] - (5 if reseal else 1)))
    bad = bytearray(blob)
    bad[at] ^= data.draw(st.integers(1, 255))
    if reseal:
        body = bytes(bad[offs[b] : offs[b + 1] - 4])
        bad[offs[b + 1] - 4 : offs[b + 1]] = crc32(body).to_bytes(4, "big")
    batches = list(good.scan())
    before = set(batches[b - 1].column(0).to_pylist()) if b else set()
    mine = [k for k in batches[b].column(0).to_pylist() if k not in before]
    assume(mine)  # a block holding only older versions of the block before's last key
    first = mine[0]  # its newest row is in block b: its lookup reads block b
    for cache in (BlockCache(1 << 20), None):
        reader = SstReader.from_bytes(bytes(bad), "d", cache=cache)
        if not reseal:
            with pytest.raises(CorruptionError):
                reader.get(first)
            with pytest.raises(CorruptionError):
                reader.get_sorted([first])
            continue
        for k in sorted({r[0] for r in rows}):
            try:
                reader.get(k)
            except CorruptionError:
                pass


def test_a_restart_offset_out_of_order_under_a_recomputed_crc_is_corruption() -> None:
    """Found by the property above run with 300 examples (issue 42, goal 1, session 2): a block
    whose stats count one row per restart skips the row walk, and gathered its restart rows'
    headers at offsets nobody had checked, raising IndexError for an offset past the rows."""
    rows: list[Row] = [(b"k%03d" % i, 100 - i, 0, b"v" * 10, None) for i in range(40)]
    blob, _ = encode_sst(_batch(rows), SstOptions(block_size=4096, restart_interval=1))
    good = SstReader.from_bytes(blob, "g")
    offs = good.block_offsets
    end = offs[1]
    body_end = end - 4  # the block's CRC follows
    count = int.from_bytes(blob[body_end - 2 : body_end], "big")
    assert count == 40  # one restart per row
    for bad_offset in (0xFFFF, 0x7000, 3):
        bad = bytearray(blob)
        at = body_end - 2 - 2 * count + 2 * 20  # the 21st restart offset
        bad[at : at + 2] = bad_offset.to_bytes(2, "big")
        bad[body_end:end] = crc32(bytes(bad[:body_end])).to_bytes(4, "big")
        for cache in (BlockCache(1 << 20), None):
            reader = SstReader.from_bytes(bytes(bad), "d", cache=cache)
            for k in (b"k000", b"k020", b"k039", b"zzz"):
                try:
                    reader.get(k)
                except CorruptionError:
                    pass
