"""Review of the grouped SST scan (79c4a64, c760864): versions of one key that straddle two
blocks read by separate GETs (or one block from the cache) must be checked for order as they
are when one GET reads both, or a damaged SST (a block's seq rewritten under a valid CRC)
serves an older version as the newest (RFC-0001 ordering of versions newest first; docs/format.md,
"SSTs and WAL SSTs")."""

from __future__ import annotations

import struct

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import BlockCache
from slatedb_core.store.checksum import crc32
from slatedb_core.store.url import open_store
from tests.sst import Entry, batch_of, entries_of

_ENTRIES: list[Entry] = [
    (b"a", 10, 0, b"x" * 40),
    (b"k", 5, 0, b"new" * 10),
    (b"k", 3, 0, b"old" * 10),
    (b"z", 1, 0, b"z" * 40),
]


def _damaged(old_seq: int, new_seq: int) -> bytes:
    """The SST of _ENTRIES, one row per block, with the block holding ``(k, old_seq)`` rewritten
    to seq ``new_seq`` and its CRC recomputed (so the block itself reads as sound)."""
    data, _ = encode_sst(batch_of(_ENTRIES), SstOptions(block_size=1, restart_interval=1))
    offs = SstReader.from_bytes(data, "t").block_offsets
    assert len(offs) == 5  # four blocks
    out = bytearray(data)
    a, b = offs[2], offs[3]  # block 2 holds (k, 3)
    body = bytes(out[a : b - 4])
    i = body.index(struct.pack(">Q", old_seq))
    body = body[:i] + struct.pack(">Q", new_seq) + body[i + 8 :]
    out[a : b - 4] = body
    out[b - 4 : b] = struct.pack(">I", crc32(body))
    return bytes(out)


def test_sound_versions_across_blocks_read_alike_whatever_the_readahead() -> None:
    """Found by the session-28 review of the grouped SST scan (was test_review_scan28.py)."""
    data, _ = encode_sst(batch_of(_ENTRIES), SstOptions(block_size=1, restart_interval=1))
    store = open_store("memory://")
    store.put("t.sst", data)
    for ra in (None, 1, 100, 1 << 20):
        reader = SstReader.open(store, "t.sst")
        got = [
            r
            for b in newest_versions(reader.scan(readahead=ra, groups=True))
            for r in entries_of(b)
        ]
        assert got == [_ENTRIES[0], _ENTRIES[1], _ENTRIES[3]]


@pytest.mark.parametrize("new_seq", [7, 5])  # newer than the version before it, or the same
@pytest.mark.parametrize("readahead", [None, 1, 1 << 20])
@pytest.mark.parametrize("groups", [True, False])
def test_versions_out_of_order_across_blocks_are_corruption_whatever_the_readahead(
    new_seq: int,
    readahead: int | None,
    groups: bool,
) -> None:
    """With one GET over both blocks this was already a CorruptionError; with a GET per block
    (readahead 1) the scan served seq 5 as the newest version although the SST holds seq 7.

    Found by the session-28 review of the grouped SST scan (was test_review_scan28.py)."""
    store = open_store("memory://")
    store.put("t.sst", _damaged(3, new_seq))
    reader = SstReader.open(store, "t.sst")
    with pytest.raises(CorruptionError):
        list(newest_versions(reader.scan(readahead=readahead, groups=groups)))


def test_versions_out_of_order_between_a_cached_block_and_a_fetched_one() -> None:
    """Block 1 (k, 5) comes from the cache (a point lookup put it there), block 2 (k, 7) from a
    GET: the boundary between them is checked too.

    Found by the session-28 review of the grouped SST scan (was test_review_scan28.py)."""
    store = open_store("memory://")
    store.put("t.sst", _damaged(3, 7))
    reader = SstReader.open(store, "t.sst", cache=BlockCache(1 << 20))
    assert reader.get(b"k") == (5, 0, b"new" * 10)
    with pytest.raises(CorruptionError):
        list(newest_versions(reader.scan(b"b", None, groups=True)))
