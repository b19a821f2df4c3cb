"""Steps of the data-model compaction tests (tests/interop/test_compaction_data_model.py,
tests/spark/test_compact_slatedb_data_model.py): a SlateDB 0.17 history of TTL rows, merge
operands, overwrites and deletes around a live snapshot, the keys it touches, the compactor
options that compact it, and a wait until SlateDB's writer reads through our output."""

from __future__ import annotations

import time

from slatedb_core.options import CompactorOptions
from tests.interop.oracle import SlateWriter
from tests.interop.oracle_compaction import merge

COMPACT = CompactorOptions(l0_trigger=2, min_merge_width=2, merge_operator="string_append")
KEYS = [b"a", b"b", b"c", b"d", b"k", b"m"]
HOUR_MS = 3_600_000
SHORT_MS = 400


def write_history(w: SlateWriter) -> tuple[dict[bytes, bytes | None], object]:
    """Two L0 SSTs with a snapshot taken between them; returns what the snapshot reads (b
    aside: SlateDB's reads see its TTL) and the snapshot."""
    w.put(b"a", b"a0")
    w.put_ttl(b"b", b"b-short", SHORT_MS)  # flushed live, expired by the second flush
    w.put_ttl(b"c", b"c-long", HOUR_MS)
    w.put(b"k", b"v0")
    merge(w, b"m", b"x")
    merge(w, b"m", b"y")
    w.flush_memtable()
    snap = w.snapshot()
    w.put(b"k", b"v1")
    w.delete(b"a")
    merge(w, b"m", b"z")
    time.sleep(SHORT_MS / 1000 + 0.1)
    w.put(b"d", b"d0")  # moves SlateDB's clock (last_l0_clock_tick) past b's expiry
    w.flush_memtable()
    return {
        b"a": b"a0",
        b"b": b"b-short",
        b"c": b"c-long",
        b"d": None,
        b"k": b"v0",
        b"m": b"xy",
    }, snap


def wait_for_tree(w: SlateWriter, timeout_s: float = 15.0) -> None:
    """Until SlateDB's writer reads through our compaction's output (the expired row is then
    gone: only a rewrite expires it)."""
    deadline = time.monotonic() + timeout_s
    while w.get(b"b") is not None:
        assert time.monotonic() < deadline, "SlateDB's writer never loaded our manifest"
        time.sleep(0.05)
