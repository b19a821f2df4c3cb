"""A scan that finds a block cached decoded keeps that block, whatever another thread does to
the cache entry before the scan takes it (review 52 of d238de2).

The scan looks at a block with ``BlockCache.peek`` and, when it is decoded, took it again with
``get``: in between, another thread may evict it (a put making room, ``discard_path``,
``clear``) or a point lookup that missed it just before may put its ``RawBlock`` over it. The
scan then yielded ``None`` or a ``RawBlock`` as a decoded block. The hook below runs at the
moment between the two calls, as such a thread would.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slatedb_core.sst import BlockCache, SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import Sized
from slatedb_core.sst.raw_block import RawBlock
from slatedb_core.store.url import open_store
from tests.sst import batch_of, entries_of, numbered

ENTRIES = numbered(2000, value_len=100)
PATH = "db/compacted/x.sst"


class _RacedCache(BlockCache):
    """A cache whose ``peek`` of a decoded block runs ``between`` once, right after it looked."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.between: Callable[[str, int], None] | None = None

    def peek(self, path: str, block_index: int) -> Sized | None:
        got = super().peek(path, block_index)
        hook = self.between
        if hook is not None and got is not None and type(got) is not RawBlock:
            self.between = None
            hook(path, block_index)
        return got


def _filled() -> tuple[SstReader, _RacedCache, SstReader]:
    store = open_store("memory://")
    data, info = encode_sst(batch_of(ENTRIES), SstOptions(block_size=4096))
    store.put(PATH, data)
    cache = _RacedCache(1 << 30)
    reader = SstReader.open(store, PATH, info, cache=cache)
    assert [row for b in reader.scan(fill_cache=True) for row in entries_of(b)] == ENTRIES
    assert len(cache) == reader.block_count
    other = SstReader.open(store, PATH, info, cache=cache)  # another thread's point lookups
    return reader, cache, other


@pytest.mark.parametrize("race", ["discard_path", "clear"])
def test_a_decoded_block_evicted_under_a_scan_is_still_scanned(race: str) -> None:
    reader, cache, _ = _filled()

    def evict(path: str, b: int) -> None:
        if race == "discard_path":
            cache.discard_path(path)
        else:
            cache.clear()

    cache.between = evict
    assert [row for b in reader.scan() for row in entries_of(b)] == ENTRIES


def test_a_lookups_raw_block_put_over_a_decoded_one_under_a_scan_is_not_yielded() -> None:
    reader, cache, other = _filled()
    victim = 3

    def lookup_puts_raw(path: str, b: int) -> None:
        if b == victim:
            other._read_block(b)  # missed before the scan's fill, read and put now
            assert isinstance(cache.peek(path, b), RawBlock)
        else:
            cache.between = lookup_puts_raw

    cache.between = lookup_puts_raw
    assert [row for b in reader.scan() for row in entries_of(b)] == ENTRIES
