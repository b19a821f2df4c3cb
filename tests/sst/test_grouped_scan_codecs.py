"""Grouped scans (``SstReader.scan(groups=True)``: one Block per decode, spanning its blocks)
against the per-block scan, over compressed blocks, a decoded-bytes budget that cuts a GET into
several decodes, TTL rows read at a clock (expired ones decode as tombstones), and a cache that
holds some blocks decoded (a ``fill_cache`` scan of part of the range) between groups (review 53
of 9d58aea): the same rows, no wrong "distinct" flag, the newest versions served."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.lsm.row_model import ROW_SCHEMA
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst import block as block_mod
from slatedb_core.sst.cache import BlockCache
from slatedb_core.store.url import open_store
from tests.sst import Entry, entries_of, newest_in_range

NOW = 10**12


@st.composite
def ttl_entries(draw: st.DrawFn) -> list[tuple[bytes, int, int, bytes, int | None]]:
    """Sorted keys sharing a prefix, 1..4 versions each newest first, some with an expire_ts
    before or after NOW."""
    prefix = draw(st.binary(max_size=8))
    keys = sorted(
        draw(
            st.sets(
                st.binary(min_size=1, max_size=3).map(lambda s: prefix + s),
                min_size=1,
                max_size=70,
            )
        )
    )
    out = []
    seq = 100_000
    for key in keys:
        for _ in range(draw(st.integers(1, 4))):
            tomb = draw(st.integers(0, 6)) == 0
            value = b"" if tomb else draw(st.binary(max_size=80))
            expire = None
            if not tomb and draw(st.integers(0, 4)) == 0:
                expire = NOW + draw(st.sampled_from([-5, 0, 5]))
            out.append((key, seq, 1 if tomb else 0, value, expire))
            seq -= 1
    return out


def as_read(e: tuple[bytes, int, int, bytes, int | None]) -> Entry:
    """The row a read at NOW returns: expired values decode as tombstones."""
    key, seq, kind, value, expire = e
    if expire is not None and expire <= NOW:
        return (key, seq, 1, b"")
    return (key, seq, kind, value)


def bounds_near(keys: list[bytes]) -> st.SearchStrategy[tuple[bytes | None, bytes | None]]:
    """Range bounds mostly at or just past a stored key (so they fall inside blocks and
    groups), sometimes anywhere, sometimes open."""
    near = st.sampled_from(keys or [b"k"]).flatmap(
        lambda k: st.sampled_from([k, k + b"\x00", k[:-1], k + b"\xff"])
    )
    bound = st.none() | st.binary(max_size=10) | near | near
    return st.tuples(bound, bound)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=ttl_entries(),
    block_size=st.sampled_from([1, 64, 300, 4096]),
    interval=st.sampled_from([1, 16]),
    codec=st.sampled_from(["none", "lz4", "zstd", "snappy", "zlib"]),
    readahead=st.sampled_from([1, 700, 5000, None]),
    group_bytes=st.sampled_from([1, 300, 3000, block_mod.GROUP_DECODE_BYTES]),
    pick=st.data(),
    warm=st.sampled_from(["none", "gets", "fill", "fill-part"]),
)
def test_grouped_scans_over_codecs_budgets_ttl_and_cache_serve_the_per_block_rows(
    rows: list[tuple[bytes, int, int, bytes, int | None]],
    block_size: int,
    interval: int,
    codec: str,
    readahead: int | None,
    group_bytes: int,
    pick: st.DataObject,
    warm: str,
) -> None:
    table = pa.Table.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.binary()),
            pa.array([r[1] for r in rows], pa.uint64()),
            pa.array([r[2] for r in rows], pa.uint8()),
            pa.array([r[3] for r in rows], pa.binary()),
            pa.array([r[4] for r in rows], pa.int64()),
            pa.nulls(len(rows), pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )
    data, _ = encode_sst(
        table, SstOptions(block_size=block_size, restart_interval=interval, compression=codec)
    )
    store = open_store("memory://")
    store.put("t.sst", data)
    entries = [as_read(r) for r in rows]
    lo, hi = pick.draw(bounds_near([r[0] for r in rows]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(block_mod, "GROUP_DECODE_BYTES", group_bytes)
        cache = BlockCache(1 << 24) if warm != "none" else None
        reader = SstReader.open(store, "t.sst", cache=cache, now_ms=NOW)
        if warm == "gets":  # raw blocks cached: read again with their neighbours
            for e in entries[::3]:
                reader.get(e[0])
        elif warm == "fill":
            list(reader.scan(fill_cache=True))
        elif warm == "fill-part":  # some blocks decoded in the cache, between uncached ones
            keys = sorted({e[0] for e in entries})
            for a in keys[::7]:
                list(reader.scan(a, a + b"\x00", fill_cache=True))
        want = [e for e in entries if (lo is None or e[0] >= lo) and (hi is None or e[0] < hi)]
        plain = [r for b in reader.scan(lo, hi) for r in entries_of(b)]
        got: list[Entry] = []
        for batch, distinct, first, last in reader.scan(
            lo, hi, readahead=readahead, groups=True
        ).flagged():
            part = entries_of(batch)
            keys = [r[0] for r in part]
            assert part and (first, last) == (keys[0], keys[-1])
            assert not distinct or all(a < b for a, b in itertools.pairwise(keys))
            got += part
        assert got == plain == want
        newest = newest_versions(reader.scan(lo, hi, readahead=readahead, groups=True))
        assert [r for b in newest for r in entries_of(b)] == newest_in_range(entries, lo, hi)
