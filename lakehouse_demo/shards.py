"""The table's shards as the steps report them: per shard its key range, SSTs and bytes, read
from the manifests (``slatedb_core.health``), and a real key to split at."""

from __future__ import annotations

from typing import Any

from slatedb_core import ObjectStore, Table
from slatedb_core.health import inspect_database


def show_key(key: bytes | None) -> str:
    return "-inf" if key is None else key.decode("utf-8", "backslashreplace")


def layout(table: Table, store: ObjectStore) -> list[dict[str, Any]]:
    """Per shard of the table's latest map: range, SSTs and bytes (read from the manifests)."""
    table.refresh()
    out = []
    for s in table.shards:
        _, h = inspect_database(store, s.db_path)
        out.append(
            {
                "index": s.index,
                "db": s.db_path,
                "start": show_key(s.key_range.start),
                "end": "+inf" if s.key_range.end is None else show_key(s.key_range.end),
                "ssts": h.ssts,
                "l0_ssts": h.l0_ssts,
                "sorted_runs": h.sorted_runs,
                "bytes": h.data_bytes,
            }
        )
    return out


def totals(shards: list[dict[str, Any]]) -> tuple[int, int]:
    """SSTs and bytes of a layout."""
    return sum(s["ssts"] for s in shards), sum(s["bytes"] for s in shards)


def real_key_at(table: Table, shard_index: int, at: bytes) -> bytes:
    """The first key stored at or after ``at`` (an interpolated median) in the shard: a real
    order id, so the new boundary reads well. ``at`` itself when there is none after it."""
    rng = table.shards[shard_index].key_range
    for key, _ in table.scan(at, rng.end):
        if key != rng.start:
            return key
    return at
