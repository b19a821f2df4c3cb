"""Typed options. Every knob of the engine lives in one of these dataclasses, validated on
construction so a bad value fails where it is written, not deep inside a background thread."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.errors import InvalidArgument

KiB = 1024
MiB = 1024 * KiB

MAX_KEY_BYTES = 64 * KiB
"""Keys are non-empty and at most this long (they are repeated in block indexes)."""

MAX_VALUE_BYTES = 64 * MiB
"""Values may be empty and at most this long (one value must fit in one WAL SST write)."""

COMPRESSIONS = ("none", "lz4", "zstd")


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise InvalidArgument(f"{name} must be > 0, got {value!r}")


@dataclass(frozen=True)
class DbOptions:
    flush_interval: timedelta = timedelta(milliseconds=100)
    """How often buffered writes are flushed to a WAL SST (the durability latency)."""
    wal_sst_size_bytes: int = 4 * MiB
    """A WAL flush happens early once this many bytes are buffered."""
    l0_sst_size_bytes: int = 64 * MiB
    """The memtable is frozen and flushed to an L0 SST at this size."""
    max_unflushed_bytes: int = 512 * MiB
    """Writers block (backpressure) while memtables not yet in L0 exceed this."""
    l0_max_ssts: int = 16
    """Memtable flushes (and so writers, through backpressure) stall at this many L0 SSTs until
    compaction catches up."""
    block_size: int = 64 * KiB
    bloom_bits_per_key: int = 10
    compression: str = "none"
    block_cache_bytes: int = 256 * MiB
    manifest_poll_interval: timedelta = timedelta(seconds=1)
    manifest_format_version: int = 2
    max_key_bytes: int = MAX_KEY_BYTES
    max_value_bytes: int = MAX_VALUE_BYTES

    def __post_init__(self) -> None:
        _positive("flush_interval", self.flush_interval.total_seconds())
        _positive("manifest_poll_interval", self.manifest_poll_interval.total_seconds())
        for name in (
            "wal_sst_size_bytes",
            "l0_sst_size_bytes",
            "max_unflushed_bytes",
            "l0_max_ssts",
            "block_size",
            "max_key_bytes",
            "max_value_bytes",
        ):
            _positive(name, getattr(self, name))
        if self.bloom_bits_per_key < 0:
            raise InvalidArgument("bloom_bits_per_key must be >= 0")
        if self.block_cache_bytes < 0:
            raise InvalidArgument("block_cache_bytes must be >= 0")
        if self.compression not in COMPRESSIONS:
            raise InvalidArgument(
                f"compression must be one of {COMPRESSIONS}, got {self.compression!r}"
            )
        if self.manifest_format_version not in (1, 2):
            raise InvalidArgument("manifest_format_version must be 1 or 2")
        if self.max_key_bytes > MAX_KEY_BYTES or self.max_value_bytes > MAX_VALUE_BYTES:
            raise InvalidArgument(
                f"limits may not exceed {MAX_KEY_BYTES} (key) and {MAX_VALUE_BYTES} (value) bytes"
            )
