"""A compaction's output streams: the merge yields batches of bounded size, each output SST is
written before the rows of the next are pulled from the sources (beyond the merge's bounded
look-ahead), and the SSTs are cut where the one-shot splitter cut them, holding the merged rows
in order (compactor.output_ssts)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from slatedb_core.compactor.output_ssts import ROW_OVERHEAD, SstParts, write_ssts
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.lsm.iterators import merge_sorted
from slatedb_core.manifest.model import CompactedSst
from slatedb_core.sst import KIND_TOMBSTONE, KIND_VALUE, SstOptions, SstReader

SOURCES = 3
ROWS = 60_000  # per source
SOURCE_BATCH = 2_000
MERGE_BATCH = 4_096
MIN_BUFFERED = 8_192  # lsm.iterators' per-source look-ahead (_MIN_BUFFERED_ROWS)
TARGET = 64 * 1024


def source(i: int, pulled: list[int]) -> Iterator[pa.RecordBatch]:
    rng = np.random.default_rng(i)
    keys = np.unique(rng.integers(0, 1 << 62, ROWS, dtype=np.uint64)).astype(">u8").view("S8")
    n = len(keys)
    kinds = np.where(rng.random(n) < 0.05, KIND_TOMBSTONE, KIND_VALUE).astype(np.uint8)
    values = [b"" if k == KIND_TOMBSTONE else bytes([i]) * 100 for k in kinds]
    full = pa.RecordBatch.from_arrays(
        [
            pa.array(keys.tolist(), pa.binary()),
            pa.array(np.full(n, 10 - i), pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    for at in range(0, n, SOURCE_BATCH):
        b = full.slice(at, SOURCE_BATCH)
        pulled[0] += b.num_rows
        yield b


def test_bounded_rows_in_flight_and_one_sst_at_a_time() -> None:
    pulled = [0]
    merged_sizes: list[int] = []
    merged_rows: list[pa.RecordBatch] = []

    def merged() -> Iterator[pa.RecordBatch]:
        for b in merge_sorted(
            [source(i, pulled) for i in range(SOURCES)],
            drop_tombstones=True,
            batch_size=MERGE_BATCH,
        ):
            merged_sizes.append(b.num_rows)
            merged_rows.append(b)
            yield b

    written: list[tuple[int, int]] = []  # (rows pulled from the sources, rows in SSTs so far)
    datas: list[bytes] = []

    def write(parts: SstParts) -> CompactedSst:
        data = b"".join(parts)  # the parts are encoded as they are taken
        info = parts.info
        done = (written[-1][1] if written else 0) + info.entry_count
        written.append((pulled[0], done))
        datas.append(data)
        return CompactedSst(id=ULID(), info=info)

    outputs, rows = write_ssts(merged(), TARGET, SstOptions(block_size=4096), write)

    # the merge never yields more than its batch size
    assert max(merged_sizes) <= MERGE_BATCH
    # every SST was written while the sources were at most the merge's look-ahead past it:
    # nothing accumulates the rows of later SSTs (a run held whole would be ~170k rows ahead)
    bound = SOURCES * (MIN_BUFFERED + SOURCE_BATCH) + 2 * MERGE_BATCH
    assert len(outputs) > 20
    for at_pull, done in written:
        assert at_pull - done <= bound, (at_pull, done, bound)
    assert pulled[0] > bound * 3  # the bound is far below the input

    # content: the SSTs hold the merged stream, in order, cut where the row reaching TARGET is
    want = pa.Table.from_batches(merged_rows, schema=ENTRY_SCHEMA)
    got = [SstReader.from_bytes(d, "t").read_all() for d in datas]
    assert pa.concat_tables(got).equals(want)
    assert rows == want.num_rows
    for t in got[:-1]:
        sizes = (
            np.asarray(pc.binary_length(t.column(0)))
            + np.asarray(pc.binary_length(t.column(3)))
            + ROW_OVERHEAD
        )
        assert sizes.sum() >= TARGET > sizes[:-1].sum()
