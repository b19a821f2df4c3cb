"""A scan's per-block "keys distinct" flag, which lets ``newest_versions`` skip comparing
neighbouring keys inside a block: it must be exact (a wrong True would serve an older version),
and the newest-only rows must be those of the plain comparison, cached blocks or not."""

from __future__ import annotations

import itertools

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.reader import SstScan
from tests.sst import Entry, batch_of, entries_of, newest_in_range


@st.composite
def versioned_entries(draw: st.DrawFn) -> list[Entry]:
    """Sorted keys, each with 1..4 versions newest first (descending seqs)."""
    keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=6), min_size=1, max_size=50)))
    out: list[Entry] = []
    seq = 10_000
    for key in keys:
        for _ in range(draw(st.integers(1, 4))):
            tomb = draw(st.integers(0, 4)) == 0
            out.append((key, seq, 1 if tomb else 0, b"" if tomb else b"v%d" % seq))
            seq -= 1
    return out


def _rows(batches: object) -> list[Entry]:
    return [r for b in batches for r in entries_of(b)]  # type: ignore[attr-defined]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=versioned_entries(),
    block_size=st.sampled_from([1, 24, 64, 200, 65536]),
    interval=st.sampled_from([1, 16]),
    bounds=st.tuples(st.none() | st.binary(max_size=3), st.none() | st.binary(max_size=3)),
    cached=st.booleans(),
)
def test_distinct_flags_are_exact_and_newest_rows_match_the_plain_comparison(
    entries: list[Entry],
    block_size: int,
    interval: int,
    bounds: tuple[bytes | None, bytes | None],
    cached: bool,
) -> None:
    data, _ = encode_sst(
        batch_of(entries), SstOptions(block_size=block_size, restart_interval=interval)
    )
    cache = BlockCache(1 << 24) if cached else None
    reader = SstReader.from_bytes(data, "t", cache=cache)
    if cached:  # blocks then come from the cache: point lookups put them there
        for e in entries[::3]:
            reader.get(e[0])
    lo, hi = bounds
    for scan, whole in ((reader.scan(), True), (reader.scan(lo, hi), False)):
        assert isinstance(scan, SstScan)
        for batch, distinct, first, last in scan.flagged():
            keys = batch.column(0).to_pylist()
            assert (first, last) == (keys[0], keys[-1])
            increasing = all(a < b for a, b in itertools.pairwise(keys))
            # a whole block is flagged exactly when its keys strictly increase; a part of one
            # (a bounded scan's first or last block) keeps its block's flag, which may be False
            assert distinct == increasing if whole else (increasing or not distinct)
    expected = newest_in_range(entries, lo, hi)
    assert _rows(newest_versions(reader.scan(lo, hi))) == expected
    # the generic path (no flags: every batch compared) agrees
    assert _rows(newest_versions(list(reader.scan(lo, hi)))) == expected


def test_versions_straddling_blocks_are_dropped_at_the_boundary_of_distinct_blocks() -> None:
    """Each block holds one row: every block is distinct, and the older versions are only
    found by comparing a block's first key with the previous block's last."""
    entries = [(b"k%02d" % (i // 3), 100 - i, 0, b"v%d" % i) for i in range(30)]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=1))
    reader = SstReader.from_bytes(data, "t")
    assert reader.block_count == 30
    assert all(d for _, d, _, _ in reader.scan().flagged())
    got = pa.Table.from_batches(list(newest_versions(reader.scan())))
    assert entries_of(got) == entries[::3]


def test_a_block_with_versions_inside_is_not_flagged() -> None:
    entries = [(b"a", 9, 0, b"new"), (b"a", 8, 0, b"old"), (b"b", 7, 0, b"x")]
    data, _ = encode_sst(batch_of(entries))
    reader = SstReader.from_bytes(data, "t")
    assert [d for _, d, _, _ in reader.scan().flagged()] == [False]
    assert _rows(newest_versions(reader.scan())) == [entries[0], entries[2]]
