"""Steps on a Spark streaming query's checkpoint log (offsets, commits), shared by the change
stream tests of a database and of a table: listing its entries and losing one, as a crash
between Spark's steps would."""

from __future__ import annotations

from pathlib import Path


def numbered(log: Path) -> list[Path]:
    """The entries of a streaming checkpoint's log (offsets, commits), by batch id."""
    return sorted((p for p in log.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def unlink_log_entry(entry: Path) -> None:
    """Delete a streaming log entry and its checksum file."""
    entry.unlink(missing_ok=True)
    (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)
