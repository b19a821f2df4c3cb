"""The write-ahead log: ``<db>/wal/{id:020}.sst``, one SST per flush, created if absent (seed 001)."""

from slatedb_core.wal.log import WalLog, WalSst
from slatedb_core.wal.writer import WalWindow, WalWriter, fence_wal, first_open_slot

__all__ = ["WalLog", "WalSst", "WalWindow", "WalWriter", "fence_wal", "first_open_slot"]
