"""The write-ahead log: ``<db>/wal/{id:020}.sst``, one SST per flush, created if absent (SlateDB
RFC 0001).

:mod:`~slatedb_core.wal.log` reads and lists it, :mod:`~slatedb_core.wal.writer` writes and fences
it (one SST at a time or a window in parallel), :mod:`~slatedb_core.wal.pipeline` holds a writer's
buffered generations and which of them are durable, :mod:`~slatedb_core.wal.flusher` is the
writer's WAL flusher (its buffer, flushes, durability waits and flusher thread).
"""

from slatedb_core.wal.log import WalLog, WalSst
from slatedb_core.wal.writer import (
    WalWindow,
    WalWriter,
    damaged_holes,
    fence_wal,
    first_open_slot,
    missing_error,
)

__all__ = [
    "WalLog",
    "WalSst",
    "WalWindow",
    "WalWriter",
    "damaged_holes",
    "fence_wal",
    "first_open_slot",
    "missing_error",
]
