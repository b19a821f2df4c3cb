"""A working set that fits the block cache ends up cached, whatever filled the cache before it
(review 52 of bdb7f1b).

Once the cache is full, a point lookup's block is kept only at its second miss among the last
misses remembered, as many as the cache holds entries. When the entries held are larger than
the blocks looked up (a cache filled with 64 KiB blocks, or decoded blocks from a scan that
filled it, then lookups of 4 KiB blocks), fewer misses are remembered than the blocks that fit:
lookups that go round a set of blocks that would fit (one key per block, in turn) never miss
one twice within the memory, so none is ever kept and every lookup reads its block again, for
ever. Before bdb7f1b the first round cached them all. A performance cliff, not a wrong
answer: the cache now remembers as many misses as blocks of the missed one's size it would hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from slatedb_core.sst import BlockCache


@dataclass
class Blob:
    nbytes: int


def test_a_round_of_lookups_over_blocks_that_fit_is_cached_after_a_few_rounds() -> None:
    cache = BlockCache(1000)
    cache.put("old", 0, Blob(500))  # two large blocks fill it (no longer read)
    cache.put("old", 1, Blob(500))
    hits = 0
    for _ in range(10):
        for b in range(8):  # 800 bytes: they fit
            if cache.get("live", b, count_miss=False) is None:
                cache.put("live", b, Blob(100), miss=True)
            else:
                hits += 1
    assert hits >= 8 * 8  # every lookup of the last eight rounds a hit
