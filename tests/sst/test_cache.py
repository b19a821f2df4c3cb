from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.sst import BlockCache


@dataclass
class Blob:
    nbytes: int


def test_the_cache_never_holds_more_than_its_byte_capacity() -> None:
    cache = BlockCache(1000)
    for i in range(50):
        cache.put("a", i, Blob(90 + i))
        assert cache.size_bytes <= 1000
    assert cache.evictions > 0
    assert cache.stats().size_bytes == cache.size_bytes


def test_least_recently_used_blocks_are_evicted_first() -> None:
    cache = BlockCache(300)
    for i in range(3):
        cache.put("p", i, Blob(100))
    assert cache.get("p", 0) is not None  # 0 is now the most recently used
    cache.put("p", 3, Blob(100))
    assert cache.get("p", 1) is None
    assert all(cache.get("p", i) is not None for i in (0, 2, 3))
    cache.put("p", 4, Blob(150))  # needs two slots: evicts 0 and 2, the oldest
    assert [i for i in range(5) if cache.contains("p", i)] == [3, 4]


def test_hits_and_misses_are_counted_and_contains_does_not_count() -> None:
    cache = BlockCache(1 << 20)
    cache.put("p", 0, Blob(10))
    cache.get("p", 0)
    cache.get("p", 0)
    cache.get("p", 1)
    cache.get("q", 0)
    cache.contains("p", 0)
    assert (cache.hits, cache.misses) == (2, 2)


def test_replacing_a_block_updates_the_size_and_oversized_blocks_are_not_kept() -> None:
    cache = BlockCache(500)
    cache.put("p", 0, Blob(100))
    cache.put("p", 0, Blob(300))
    assert cache.size_bytes == 300 and len(cache) == 1
    cache.put("p", 1, Blob(501))
    assert not cache.contains("p", 1) and cache.size_bytes == 300
    cache.put("p", 0, Blob(600))  # replacing with an oversized block drops the old one too
    assert len(cache) == 0 and cache.size_bytes == 0


def test_discard_path_drops_only_that_objects_blocks() -> None:
    cache = BlockCache(1 << 20)
    for i in range(3):
        cache.put("a", i, Blob(10))
        cache.put("b", i, Blob(10))
    assert cache.discard_path("a") == 3
    assert len(cache) == 3 and cache.size_bytes == 30
    cache.clear()
    assert len(cache) == 0 and cache.size_bytes == 0


def test_concurrent_use_keeps_the_accounting_exact() -> None:
    cache = BlockCache(5000)

    def worker(t: int) -> None:
        for i in range(2000):
            cache.put(f"p{t}", i % 97, Blob(10 + i % 50))
            cache.get(f"p{(t + 1) % 4}", i % 97)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stats = cache.stats()
    assert stats.size_bytes <= 5000
    assert stats.hits + stats.misses == 8000
    assert sum(b.nbytes for b, _ in cache._items.values()) == stats.size_bytes


def test_capacity_must_be_a_non_negative_int() -> None:
    with pytest.raises(InvalidArgument):
        BlockCache(-1)
    zero = BlockCache(0)
    zero.put("p", 0, Blob(1))
    assert zero.get("p", 0) is None


def test_a_full_cache_keeps_a_point_lookups_block_at_its_second_miss() -> None:
    """Issue 42, goal 1 (admission): past the cache, keeping every block read once cost an
    allocation and an eviction per read. While there is room every miss is kept; once full, a
    point lookup's block is kept at its second miss among those remembered."""
    cache = BlockCache(300)
    for i in range(3):  # room: kept at the first miss
        cache.put("p", i, Blob(100), miss=True)
    assert [i for i in range(3) if cache.contains("p", i)] == [0, 1, 2]
    cache.put("p", 3, Blob(100), miss=True)  # full: remembered, not kept
    assert not cache.contains("p", 3)
    assert [i for i in range(3) if cache.contains("p", i)] == [0, 1, 2]
    cache.put("p", 3, Blob(100), miss=True)  # its second miss: kept, the oldest evicted
    assert [i for i in range(4) if cache.contains("p", i)] == [1, 2, 3]
    assert cache.misses == 5
    cache.put("p", 9, Blob(100))  # a scan's block (no miss): kept at once, as before
    assert cache.contains("p", 9)


def test_a_full_cache_remembers_as_many_misses_as_it_holds_blocks() -> None:
    cache = BlockCache(200)
    cache.put("p", 0, Blob(100), miss=True)
    cache.put("p", 1, Blob(100), miss=True)
    for i in (10, 11, 12):  # three misses remembered, two remembered at most
        cache.put("p", i, Blob(100), miss=True)
    cache.put("p", 10, Blob(100), miss=True)  # forgotten: remembered again, not kept
    assert not cache.contains("p", 10)
    cache.put("p", 12, Blob(100), miss=True)  # still remembered: kept
    assert cache.contains("p", 12)
    cache.discard_path("p")
    cache.put("q", 0, Blob(200), miss=True)  # room again: kept at once
    assert cache.contains("q", 0)
