"""Statistics the writer (``Db``) reports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BulkIngestStats:
    rows: int
    ssts: int
    bytes_written: int
    manifest_id: int
