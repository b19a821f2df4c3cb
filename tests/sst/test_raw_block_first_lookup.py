"""A block's first point lookup checks only the rows its search reads (issue 42, goal 1).

Past the block cache a block is read for one lookup and evicted; checking every row's extent
when it is read cost about 20 us of the ~50 us such a lookup took. A block whose SST stats count
one row per restart (our writer's layout) is now checked row by row along its first lookup's
binary search (each restart row it reads: its header varints, no shared prefix, a key, and its
end where the next row begins), then around where each later lookup's search of the restart
keys' prefixes lands, and whole at its CHECK_AT-th lookup. Properties over random SSTs of that
layout with one restart row's key or value length cut or grown by one under a recomputed CRC
(a buggy writer; bit rot fails the CRC): a first lookup raises ``CorruptionError`` or answers
what the undamaged SST holds, never anything else, and the damaged row's own key always
raises; so do later lookups of the cached block; and its CHECK_AT-th lookup raises whatever
key it asks for, unless a key or value of 128 bytes or more gives the block a header varint of
two bytes: such a block is never checked whole (the row walk costs ~200 us per 64 KiB) and
every lookup checks the rows of its binary search."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.format import ROW_SCHEMA
from slatedb_core.sst.raw_block import CHECK_AT, RawBlock
from slatedb_core.store.checksum import crc32

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_KEY = st.one_of(st.binary(min_size=1, max_size=24), st.binary(min_size=120, max_size=200))


def _blob(keys: list[bytes], values: list[bytes], block_size: int) -> bytes:
    n = len(keys)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array([10_000 - i for i in range(n)], pa.uint64()),
            pa.array([0] * n, pa.uint8()),
            pa.array(values, pa.binary()),
            pa.array([None] * n, pa.int64()),
            pa.array([None] * n, pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )
    blob, _ = encode_sst(batch, SstOptions(block_size=block_size, restart_interval=1))
    return blob


def _damaged(blob: bytes, b: int, row: int, field: int, delta: int) -> tuple[bytes, bytes]:
    """``blob`` with the first (field 1) or second (field 2) header byte of restart row ``row``
    of block ``b`` ``delta`` off (a key length, or a value length or the key length's second
    varint byte), the block's CRC recomputed; and the row's key."""
    offs = SstReader.from_bytes(blob, "g").block_offsets
    body_end = offs[b + 1] - 4
    count = int.from_bytes(blob[body_end - 2 : body_end], "big")
    at = body_end - 2 - 2 * count + 2 * row
    p = offs[b] + int.from_bytes(blob[at : at + 2], "big")
    bad = bytearray(blob)
    assert bad[p] == 0  # a restart row: no shared prefix
    key: bytes = list(SstReader.from_bytes(blob, "g").scan())[b].column(0)[row].as_py()
    bad[p + field] = (bad[p + field] + delta) & 0xFF
    bad[body_end : offs[b + 1]] = crc32(bytes(bad[offs[b] : body_end])).to_bytes(4, "big")
    return bytes(bad), key


@SETTINGS
@given(
    keys=st.lists(_KEY, min_size=2, max_size=150, unique=True),
    value_len=st.sampled_from([0, 3, 40, 100]),
    block_size=st.sampled_from([256, 4096, 65536]),
    field=st.sampled_from([1, 2]),
    delta=st.sampled_from([1, -1]),
    data=st.data(),
)
def test_a_first_lookup_raises_or_answers_what_the_sst_holds(
    keys: list[bytes],
    value_len: int,
    block_size: int,
    field: int,
    delta: int,
    data: st.DataObject,
) -> None:
    keys.sort()
    values = [b"%d" % i * value_len for i in range(len(keys))]
    blob = _blob(keys, values, block_size)
    good = SstReader.from_bytes(blob, "g")
    b = data.draw(st.integers(0, good.block_count - 1))
    rows = int.from_bytes(
        blob[good.block_offsets[b + 1] - 6 : good.block_offsets[b + 1] - 4], "big"
    )
    row = data.draw(st.integers(0, rows - 1))
    bad, damaged_key = _damaged(blob, b, row, field, delta)
    want = {k: good.get(k) for k in keys}
    for k in keys:  # no cache: every lookup is the first of its block
        reader = SstReader.from_bytes(bad, "d")
        try:
            got = reader.get(k)
        except CorruptionError:
            continue
        assert k != damaged_key
        assert got == want[k]
    with pytest.raises(CorruptionError):
        SstReader.from_bytes(bad, "d").get(damaged_key)
    # later lookups of the cached block check the rows around where a prefix search lands,
    # and the CHECK_AT-th checks every row, whichever key it asks for (unless a longer varint:
    # then each lookup checks its binary search's rows)
    block = list(good.scan())[b]
    wide = max(map(len, block.column(0).to_pylist() + block.column(3).to_pylist())) >= 0x80
    reader = SstReader.from_bytes(bad, "c", cache=BlockCache(1 << 24))
    mine = block.column(0).to_pylist()
    for j in range(CHECK_AT - 1):
        k = mine[j % len(mine)]
        try:
            got = reader.get(k)  # raises, or answers from the rows it read
        except CorruptionError:
            continue
        assert k != damaged_key
        assert got == want[k]
    if not wide:
        with pytest.raises(CorruptionError):
            reader.get(mine[0])


def _a_key_of_block(reader: SstReader, b: int) -> bytes:
    """A key whose lookup reads block ``b`` first: its first row's key (one row per key)."""
    key: bytes = list(reader.scan())[b].column(0)[0].as_py()
    return key


@SETTINGS
@given(
    keys=st.lists(_KEY, min_size=1, max_size=150, unique=True),
    block_size=st.sampled_from([1, 256, 4096, 65536]),
    data=st.data(),
)
def test_first_and_later_lookups_answer_what_the_scan_reads(
    keys: list[bytes], block_size: int, data: st.DataObject
) -> None:
    """Every key looked up first in a freshly read block (no cache), then again in the cached
    block after its whole check, answers the scan's row; absent keys answer None both ways."""
    keys.sort()
    blob = _blob(keys, [k[::-1] for k in keys], block_size)
    model = {}
    for batch in SstReader.from_bytes(blob, "m").scan():
        for k, s, kind, v in zip(*(batch.column(i).to_pylist() for i in range(4)), strict=True):
            model[k] = (s, kind, v)
    absent = sorted(set(data.draw(st.lists(_KEY, max_size=20))) - set(model))
    asked = keys + absent
    fresh = SstReader.from_bytes(blob, "n")
    assert [fresh.get(k) for k in asked] == [model.get(k) for k in asked]
    cache = BlockCache(1 << 24)
    cached = SstReader.from_bytes(blob, "c", cache=cache)
    # first lookups (a checked binary search), prefix searches checked where they land, the
    # whole check, then prefix searches of a checked block
    for _ in range(CHECK_AT + 1):
        assert [cached.get(k) for k in asked] == [model.get(k) for k in asked]
        assert cached.get_sorted(sorted(asked)) == [model.get(k) for k in sorted(asked)]
    for blk in range(cached.block_count):
        raw = cache.get("c", blk)
        if isinstance(raw, RawBlock) and raw.finds > 1:
            if raw.wide:  # never walked row by row (~200 us per 64 KiB): still lazy
                assert raw.lazy
            elif raw.finds >= CHECK_AT:
                assert not raw.lazy  # checked whole
