"""Stored JSON records (shard maps, clone origin records, ingest done markers) are decoded within
memory and depth bounds: a crafted or deeply nested record is refused as corruption (or read as
unreadable), never a memory blow-up or a RecursionError (docs/format.md, "Limits a reader
enforces")."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.lifecycle.origin import MAGIC as ORIGIN_MAGIC
from slatedb_core.lifecycle.origin import VERSION as ORIGIN_VERSION
from slatedb_core.lifecycle.origin import origin_path, read_origin
from slatedb_core.meta.envelope import seal
from slatedb_core.store.url import open_store
from slatedb_core.table.ingest import _read_marker
from slatedb_core.table.shardmap import SHARDMAP_MAGIC, SUPPORTED_VERSIONS, decode_shard_map

# ---- stored JSON documents: bounded like every other decoder ---------------------------------
JSON_PEAK_FACTOR = 16


JSON_PEAK_SLACK = 16 << 20


def _peak(fn: Callable[[], object]) -> tuple[int, BaseException | None]:
    tracemalloc.start()
    try:
        try:
            fn()
            error: BaseException | None = None
        except Exception as e:
            error = e
        return tracemalloc.get_traced_memory()[1], error
    finally:
        tracemalloc.stop()


def _dicts(n: int) -> bytes:
    """A JSON object whose ``x`` is ``n`` one-key dicts: 7 bytes each, ~184 decoded."""
    return b'{"x":[' + b",".join([b'{"":0}'] * n) + b"]}"


def test_a_crafted_shard_map_is_refused_within_bounds() -> None:
    """Review item: json.loads of a stored shard map built a Python object per value, 29x the
    object (a 6 MiB map of small dicts peaked at 196 MiB) before the decoder saw it was no map;
    every Table.open, the CLI's table commands and the discovery sensor read the latest map.

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    data = seal(SHARDMAP_MAGIC, max(SUPPORTED_VERSIONS), _dicts(1_000_000))
    peak, error = _peak(lambda: decode_shard_map(data, map_id=1, table_path="t", name="m"))
    assert isinstance(error, CorruptionError), error
    bound = JSON_PEAK_FACTOR * len(data) + JSON_PEAK_SLACK
    assert peak <= bound, f"peak {peak >> 20} MiB for {len(data) >> 20} MiB (bound {bound >> 20})"


def test_a_crafted_origin_record_is_refused_within_bounds(tmp_path: Path) -> None:
    """The same through a clone's origin record (read by every clone/union re-run).

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    store = open_store(tmp_path)
    store.put(origin_path("db"), seal(ORIGIN_MAGIC, ORIGIN_VERSION, _dicts(1_000_000)))
    peak, error = _peak(lambda: read_origin(store, "db"))
    assert isinstance(error, CorruptionError), error
    size = store.head(origin_path("db")).size
    bound = JSON_PEAK_FACTOR * size + JSON_PEAK_SLACK
    assert peak <= bound, f"peak {peak >> 20} MiB for {size >> 20} MiB (bound {bound >> 20})"


def test_a_deeply_nested_origin_record_is_corruption(tmp_path: Path) -> None:
    """Review item: origin records caught no RecursionError, so 100,000 nested brackets in one
    escaped as a RecursionError (a traceback in the CLI, not a CorruptionError).

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    store = open_store(tmp_path)
    store.put(origin_path("db"), seal(ORIGIN_MAGIC, ORIGIN_VERSION, b"[" * 100_000))
    with pytest.raises(CorruptionError):
        read_origin(store, "db")


def test_a_deeply_nested_ingest_marker_reads_as_unreadable(tmp_path: Path) -> None:
    """An ingest done marker is read leniently ({} when unreadable): 100,000 nested brackets
    raised RecursionError instead.

    Found by the review of issue 39's fixes (was review/test_issue39_review.py)."""
    store = open_store(tmp_path)
    store.put("t/_ingest/done", b"[" * 100_000)
    assert _read_marker(store, "t/_ingest/done") == {}
