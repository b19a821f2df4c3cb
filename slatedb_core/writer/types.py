"""Statistics the writer (``Db``) reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BulkIngestStats:
    """What one bulk ingest wrote: rows, SSTs, bytes and the manifest that committed them."""

    rows: int
    ssts: int
    bytes_written: int
    manifest_id: int
    already_applied: bool = False
    """An ingest with a ``txn`` whose app already had that version or a later one recorded: a
    no-op (nothing was committed; ``manifest_id`` is the manifest that said so)."""
    recorded_version: int | None = None
    """With a ``txn``: the version recorded for its app after the call (the txn's own when it
    was applied, the higher or equal one found when ``already_applied``); else None."""
