"""A compaction's source rows (:func:`slatedb_core.compactor.sources.sst_rows`) when one decode's
blocks come as one Block spanning them (review 53 of 9d58aea): every row of ``[start, end)``
with its timestamps, whatever the block size, codec, read-ahead and decoded-bytes budget of a
group (which cuts a GET's blocks into several decodes), with the range's ends inside the first
or last group, or both in one."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.compactor.sources import sst_rows
from slatedb_core.lsm.row_model import ROW_SCHEMA
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst import block as block_mod
from slatedb_core.store.url import open_store

Row = tuple[bytes, int, int, bytes, int | None, int | None]


@st.composite
def stamped_rows(draw: st.DrawFn) -> list[Row]:
    """Sorted keys sharing a prefix, 1..3 versions each newest first, some with an expire_ts
    and/or create_ts, some tombstones."""
    prefix = draw(st.binary(max_size=8))
    keys = sorted(
        draw(st.sets(st.binary(min_size=1, max_size=4).map(lambda s: prefix + s), max_size=80))
    )
    stamps = draw(st.sampled_from(["none", "few", "all"]))
    out: list[Row] = []
    seq = 100_000
    for key in keys:
        for _ in range(draw(st.integers(1, 3))):
            tomb = draw(st.integers(0, 6)) == 0
            value = b"" if tomb else draw(st.binary(max_size=60))
            expire = create = None
            if stamps == "all" or (stamps == "few" and draw(st.integers(0, 9)) == 0):
                create = 1_000 + seq
                if not tomb and draw(st.booleans()):
                    expire = 10**12 + seq
            out.append((key, seq, 1 if tomb else 0, value, expire, create))
            seq -= 1
    return out


def table_of(rows: list[Row]) -> pa.Table:
    cols: list[tuple[object, ...]] = list(zip(*rows, strict=True)) if rows else [()] * 6
    return pa.Table.from_arrays(
        [pa.array(list(c), f.type) for c, f in zip(cols, ROW_SCHEMA, strict=True)],
        schema=ROW_SCHEMA,
    )


def as_rows(batch: pa.RecordBatch) -> list[Row]:
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    if batch.num_columns == 4:
        cols += [[None] * batch.num_rows] * 2
    return list(zip(*cols, strict=True))


def bounds_near(keys: list[bytes]) -> st.SearchStrategy[tuple[bytes | None, bytes | None]]:
    """Range bounds mostly at or just past a stored key (so they fall inside blocks and
    groups), sometimes anywhere, sometimes open."""
    near = st.sampled_from(keys or [b"k"]).flatmap(
        lambda k: st.sampled_from([k, k + b"\x00", k[:-1], k + b"\xff"])
    )
    bound = st.none() | st.binary(max_size=10) | near | near
    return st.tuples(bound, bound)


@settings(max_examples=90, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=stamped_rows(),
    block_size=st.sampled_from([1, 64, 300, 4096]),
    interval=st.sampled_from([1, 16]),
    codec=st.sampled_from(["none", "lz4", "zstd", "snappy", "zlib"]),
    readahead=st.sampled_from([1, 700, 5000, None]),
    group_bytes=st.sampled_from([1, 200, 2000, block_mod.GROUP_DECODE_BYTES]),
    pick=st.data(),
)
def test_source_rows_of_a_range_are_every_row_in_it_with_its_timestamps(
    rows: list[Row],
    block_size: int,
    interval: int,
    codec: str,
    readahead: int | None,
    group_bytes: int,
    pick: st.DataObject,
) -> None:
    if not rows:
        return
    data, _ = encode_sst(
        table_of(rows),
        SstOptions(block_size=block_size, restart_interval=interval, compression=codec),
    )
    store = open_store("memory://")
    store.put("t.sst", data)
    lo, hi = pick.draw(bounds_near([r[0] for r in rows]))
    want = [r for r in rows if (lo is None or r[0] >= lo) and (hi is None or r[0] < hi)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(block_mod, "GROUP_DECODE_BYTES", group_bytes)
        reader = SstReader.open(store, "t.sst")
        got = [r for b in sst_rows(reader, lo, hi, readahead) for r in as_rows(b)]
    assert got == want
