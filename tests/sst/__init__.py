"""Tests of the SST format. Shared helpers live here so every test module builds batches alike."""

from __future__ import annotations

import pyarrow as pa

from slatedb_core.sst import ENTRY_SCHEMA

Entry = tuple[bytes, int, int, bytes]


def batch_of(entries: list[Entry]) -> pa.RecordBatch:
    """A RecordBatch with ENTRY_SCHEMA from (key, seq, kind, value) tuples, in the order given."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([e[0] for e in entries], pa.binary()),
            pa.array([e[1] for e in entries], pa.uint64()),
            pa.array([e[2] for e in entries], pa.uint8()),
            pa.array([e[3] for e in entries], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )


def entries_of(table: pa.Table | pa.RecordBatch) -> list[Entry]:
    cols = [table.column(i).to_pylist() for i in range(4)]
    return list(zip(*cols, strict=True))


def numbered(n: int, *, value_len: int = 20, step: int = 2) -> list[Entry]:
    """n entries with keys b"key-000000", b"key-000002", ... (odd numbers are absent); every 5th
    entry is a tombstone."""
    out: list[Entry] = []
    for i in range(n):
        key = b"key-%06d" % (i * step)
        if i % 5 == 4:
            out.append((key, i + 1, 1, b""))
        else:
            out.append((key, i + 1, 0, bytes([i % 251]) * value_len))
    return out


def newest_in_range(entries: list[Entry], lo: bytes | None, hi: bytes | None) -> list[Entry]:
    """The first (newest) entry of each key in ``[lo, hi)`` of entries sorted by key, newest
    version first: what a scan of them returns, tombstones included."""
    seen: set[bytes] = set()
    out = []
    for e in entries:
        if e[0] in seen or (lo is not None and e[0] < lo) or (hi is not None and e[0] >= hi):
            continue
        seen.add(e[0])
        out.append(e)
    return out
