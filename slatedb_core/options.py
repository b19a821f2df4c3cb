"""Typed options. Every knob of the engine lives in one of these dataclasses, validated on
construction so a bad value fails where it is written, not deep inside a background thread."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import MAX_PARALLEL_WRITES

KiB = 1024
MiB = 1024 * KiB

MAX_KEY_BYTES = 2**16 - 1
"""Keys are non-empty and at most this long: SlateDB stores key lengths as u16, so a 64 KiB key
(one byte more) could not be read by it."""

MAX_VALUE_BYTES = 64 * MiB
"""Values may be empty and at most this long (one value must fit in one WAL SST write)."""

COMPRESSIONS = ("none", "lz4", "zstd")


def _check_type(name: str, value: object, kind: type) -> None:
    """Wrong types otherwise fail later as raw TypeError/AttributeError (``flush_interval=5``)."""
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidArgument(f"{name} must be a {kind.__name__}, got {type(value).__name__}")


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
    memtable_memory_bytes: int = 128 * MiB
    """The memtable is also frozen once it holds about this much memory (estimated resident
    bytes: a Python dict entry costs ~320 bytes beyond its key and value), so small entries do
    not make a 64 MiB SST cost 200 MiB of RAM."""
    max_unflushed_bytes: int = 128 * MiB
    """Writers block (backpressure) while frozen memtables not yet in L0 hold more than this much
    memory (estimated resident bytes)."""
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
    max_parallel_writes: int = 1
    """WAL SSTs this writer may have in flight at once (seed 001 "Parallel Writes"), at
    consecutive ids; each durable write is acknowledged as soon as its own SST lands. Stored in
    the manifest when the writer opens; the next writer fences with that many consecutive
    SSTs. 1..64; 1 keeps the strictly sequential WAL."""
    compactor: CompactorOptions | None = None
    """Run a compactor inside the writer's process with these options. None (the default): run
    one elsewhere (``Compactor``, ``admin.run_compaction_once``, the Dagster asset); without any,
    writes stall once L0 holds ``l0_max_ssts`` SSTs."""

    def __post_init__(self) -> None:
        for name in ("flush_interval", "manifest_poll_interval"):
            _check_type(name, getattr(self, name), timedelta)
        for name in ("wal_sst_size_bytes", "l0_sst_size_bytes", "memtable_memory_bytes",
                     "max_unflushed_bytes", "l0_max_ssts", "block_size", "bloom_bits_per_key",
                     "block_cache_bytes", "manifest_format_version", "max_key_bytes",
                     "max_value_bytes", "max_parallel_writes"):
            _check_type(name, getattr(self, name), int)
        _positive("flush_interval", self.flush_interval.total_seconds())
        _positive("manifest_poll_interval", self.manifest_poll_interval.total_seconds())
        for name in (
            "wal_sst_size_bytes",
            "l0_sst_size_bytes",
            "max_unflushed_bytes",
            "memtable_memory_bytes",
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
        if not 1 <= self.max_parallel_writes <= MAX_PARALLEL_WRITES:
            raise InvalidArgument(
                f"max_parallel_writes must be 1..{MAX_PARALLEL_WRITES}, "
                f"got {self.max_parallel_writes}"
            )
        if self.max_key_bytes > MAX_KEY_BYTES or self.max_value_bytes > MAX_VALUE_BYTES:
            raise InvalidArgument(
                f"limits may not exceed {MAX_KEY_BYTES} (key) and {MAX_VALUE_BYTES} (value) bytes"
            )


class CheckpointScope(enum.Enum):
    """What a checkpoint taken through an open Db covers (seed 003)."""

    ALL = "all"
    """Every write issued before the call: flushes the WAL and the memtable first."""
    DURABLE = "durable"
    """Only what is already in the manifest: no flush, faster, may miss recent writes."""


@dataclass(frozen=True)
class CheckpointOptions:
    lifetime: timedelta | None = None
    """Expire this long after creation; None = never (must be deleted explicitly)."""
    source: uuid.UUID | None = None
    """Take the checkpoint of an existing (unexpired) checkpoint's manifest instead of the latest."""
    name: str | None = None

    def __post_init__(self) -> None:
        if self.lifetime is not None:
            _check_type("checkpoint lifetime", self.lifetime, timedelta)
        if self.lifetime is not None and self.lifetime.total_seconds() <= 0:
            raise InvalidArgument("checkpoint lifetime must be positive")
        if self.source is not None and not isinstance(self.source, uuid.UUID):
            raise InvalidArgument("checkpoint source must be a uuid.UUID")
        if self.name is not None:  # stored as a FlatBuffers string: must be encodable UTF-8
            _check_type("checkpoint name", self.name, str)
            try:
                self.name.encode("utf-8")
            except UnicodeEncodeError as e:
                raise InvalidArgument(f"checkpoint name is not valid UTF-8 text: {e}") from None


@dataclass(frozen=True)
class CheckpointCreateResult:
    id: uuid.UUID
    manifest_id: int


@dataclass(frozen=True)
class GarbageCollectorOptions:
    min_age: timedelta = timedelta(hours=1)
    """Objects younger than this are never deleted (applies to every kind unless overridden)."""
    db_delete_grace: timedelta = timedelta(days=1)
    """A soft-destroyed database is deleted only this long after ``destroyed_at_s``."""
    manifest_min_age: timedelta | None = None
    wal_min_age: timedelta | None = None
    compacted_min_age: timedelta | None = None
    compactions_min_age: timedelta | None = None
    interval: timedelta = timedelta(minutes=1)
    """Pause between passes of the long-running ``GarbageCollector``."""

    def __post_init__(self) -> None:
        for name in (
            "min_age",
            "db_delete_grace",
            "manifest_min_age",
            "wal_min_age",
            "compacted_min_age",
            "compactions_min_age",
        ):
            v = getattr(self, name)
            if v is not None and v.total_seconds() < 0:
                raise InvalidArgument(f"{name} must not be negative")
        _positive("interval", self.interval.total_seconds())

    def min_age_for(self, kind: str) -> timedelta:
        """``kind`` is one of manifest, wal, compacted, compactions."""
        override: timedelta | None = getattr(self, f"{kind}_min_age")
        return self.min_age if override is None else override


@dataclass(frozen=True)
class CompactorOptions:
    poll_interval: timedelta = timedelta(seconds=1)
    """How often the long-running compactor looks for work."""
    l0_trigger: int = 4
    """Compact L0 into a new sorted run once it has this many SSTs."""
    max_sst_size_bytes: int = 256 * MiB
    """Compaction output is split into SSTs of about this size."""
    min_merge_width: int = 4
    """Size-tiered: merge this many (or more) sorted runs of similar size at once."""
    size_ratio: float = 2.0
    """Sorted runs within this size ratio of each other count as one tier."""
    max_sorted_runs: int = 12
    """Merge the smallest runs regardless of tiers once there are more than this many."""
    block_size: int = 64 * KiB
    bloom_bits_per_key: int = 10
    compression: str = "none"

    def __post_init__(self) -> None:
        _positive("poll_interval", self.poll_interval.total_seconds())
        for name in (
            "l0_trigger",
            "max_sst_size_bytes",
            "min_merge_width",
            "max_sorted_runs",
            "block_size",
        ):
            _positive(name, getattr(self, name))
        if self.min_merge_width < 2:
            raise InvalidArgument("min_merge_width must be >= 2")
        if self.size_ratio < 1:
            raise InvalidArgument("size_ratio must be >= 1")
        if self.compression not in COMPRESSIONS:
            raise InvalidArgument(f"compression must be one of {COMPRESSIONS}")


class ReaderMode(enum.Enum):
    CHECKPOINT = "checkpoint"
    """Read the given checkpoint; never refreshed, never writes."""
    MANAGED = "managed"
    """Create a checkpoint at open, refresh it before half its lifetime, re-establish it when the
    SST set changes and delete the old one (seed 003)."""
    FOLLOW_LATEST = "follow_latest"
    """Follow the latest manifest and WAL without ever writing (read-only buckets, many readers)."""


@dataclass(frozen=True)
class DbReaderOptions:
    manifest_poll_interval: timedelta = timedelta(seconds=1)
    checkpoint_lifetime: timedelta | None = timedelta(minutes=10)
    """Lifetime of the managed checkpoint; must exceed twice the poll interval."""
    max_memtable_bytes: int = 64 * MiB
    """WAL replay fills in-memory tables of at most this size each."""
    mode: ReaderMode | None = None
    """None: CHECKPOINT when a checkpoint id is given to open(), else MANAGED."""
    block_cache_bytes: int = 64 * MiB

    def __post_init__(self) -> None:
        _positive("manifest_poll_interval", self.manifest_poll_interval.total_seconds())
        _positive("max_memtable_bytes", self.max_memtable_bytes)
        if (
            self.mode in (None, ReaderMode.MANAGED)
            and self.checkpoint_lifetime is not None
            and self.checkpoint_lifetime <= 2 * self.manifest_poll_interval
        ):
            raise InvalidArgument("checkpoint_lifetime must exceed 2 x manifest_poll_interval")
