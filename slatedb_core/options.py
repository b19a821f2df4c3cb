"""Typed options. Every knob of the engine lives in one of these dataclasses, validated on
construction so a bad value fails where it is written, not deep inside a background thread.

The ``check_*`` helpers below are the one place the public API checks the type and range of an
argument (RELIABILITY.md, review finding 14): the options' ``__post_init__`` and the public
entry points (``Db``, ``DbReader``, ``Table``, ``admin``) call them, so a wrong type is an
:class:`InvalidArgument`
naming the field or argument, never a raw TypeError/AttributeError from deep inside. A ``bool``
is never accepted where a count is expected, nor a number where a ``timedelta`` is. Every
duration is bounded by :data:`slatedb_core.durations.MAX_DURATION` (one year; RELIABILITY.md,
review finding 15).
"""

from __future__ import annotations

import enum
import math
import numbers
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar

from slatedb_core.durations import MAX_DURATION, format_duration
from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import MAX_PARALLEL_WRITES
from slatedb_core.merge_operators import MergeOperator, resolve_merge_operator

KiB = 1024
MiB = 1024 * KiB

MAX_KEY_BYTES = 2**16 - 1
"""Keys are non-empty and at most this long: SlateDB stores key lengths as u16, so a 64 KiB key
(one byte more) could not be read by it."""

MAX_VALUE_BYTES = 64 * MiB
"""Values may be empty and at most this long (one value must fit in one WAL SST write)."""

COMPRESSIONS = ("none", "snappy", "zlib", "lz4", "zstd")  # SlateDB 0.17's codecs (docs/format.md)
MAX_BLOCK_SIZE = 64 * KiB
"""A block's rows are addressed by u16 offsets in SlateDB's block format (docs/format.md)."""

T = TypeVar("T")


# ---- shared argument checks ----------------------------------------------------------------
def check_instance(name: str, value: object, kind: type[T]) -> T:
    """``value`` if it is a ``kind``; else InvalidArgument naming ``name``."""
    if not isinstance(value, kind):
        raise InvalidArgument(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def check_optional(name: str, value: object, kind: type[T]) -> T | None:
    """None, or ``value`` if it is a ``kind``."""
    return None if value is None else check_instance(name, value, kind)


def check_int(name: str, value: object, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer in ``lo..hi`` (inclusive), as an ``int``; numpy integers are accepted, a bool
    never is (``True`` is 1 to Python but never a count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name} must be an int, got {type(value).__name__}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        want = f">= {lo}" if hi is None else f"<= {hi}" if lo is None else f"in {lo}..{hi}"
        raise InvalidArgument(f"{name} must be {want}, got {v}")
    return v


def check_number(name: str, value: object, *, lo: float) -> float:
    """A finite real number >= ``lo`` (an int or a float, never a bool, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < lo:
        raise InvalidArgument(f"{name} must be a finite number >= {lo}, got {value!r}")
    return v


def check_duration(name: str, value: object, *, allow_zero: bool = False) -> timedelta:
    """A ``timedelta`` in ``(0, MAX_DURATION]`` (``[0, MAX_DURATION]`` with ``allow_zero``)."""
    td = check_instance(name, value, timedelta)
    if td < timedelta(0) or (td == timedelta(0) and not allow_zero):
        raise InvalidArgument(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {td}")
    if td > MAX_DURATION:
        raise InvalidArgument(
            f"{name} must be at most {format_duration(MAX_DURATION)} "
            f"({MAX_DURATION.days} days), got {td}"
        )
    return td


def check_optional_duration(
    name: str, value: object, *, allow_zero: bool = False
) -> timedelta | None:
    """None, or a duration as :func:`check_duration` accepts."""
    return None if value is None else check_duration(name, value, allow_zero=allow_zero)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    text = check_instance(name, value, str)
    if text not in choices:
        raise InvalidArgument(f"{name} must be one of {tuple(choices)}, got {text!r}")
    return text


def check_sequence(name: str, items: object, *, of: str = "items") -> list[Any]:
    """The items of a sequence (or other iterable); a non-iterable, or a str or bytes (one key
    or one path, not a sequence of them), is refused. The items are checked by the caller."""
    if isinstance(items, bytes | bytearray | memoryview | str) or not hasattr(items, "__iter__"):
        raise InvalidArgument(f"{name} must be a sequence of {of}, got {type(items).__name__}")
    return list(items)


def check_key_list(name: str, keys: object) -> list[Any]:
    """The items of a sequence (or other iterable) of keys (see :func:`check_sequence`)."""
    return check_sequence(name, keys, of="keys")


def _set(obj: object, name: str, value: object) -> None:
    """Store a normalised field value on a frozen dataclass (``__post_init__`` only)."""
    object.__setattr__(obj, name, value)


def _check_wal_url(value: object) -> None:
    """``wal_url``: None or a non-empty str (opened, and so checked further, at open). The value
    is never shown: a store URL may carry credentials."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidArgument(f"wal_url must be a store URL (str), got {type(value).__name__}")
    if not value.strip():
        raise InvalidArgument("wal_url must be a store URL, got an empty string")


def check_merge_operator_spec(name: str, value: object) -> None:
    """A merge operator as options take it: None, a built-in's name (a str, resolved at open,
    where an unknown name is refused) or a callable."""
    if value is None or isinstance(value, str) or callable(value):
        return
    raise InvalidArgument(
        f"{name} must be a built-in's name or a callable (key, existing, operand), "
        f"got {type(value).__name__}"
    )


def _check_fields(
    obj: object,
    *,
    durations: Sequence[str] = (),
    optional_durations: Sequence[str] = (),
    allow_zero: bool = False,
    ints: dict[str, tuple[int | None, int | None]] | None = None,
) -> None:
    """Check (and normalise) the named fields of ``obj`` with the helpers above."""
    for name in durations:
        check_duration(name, getattr(obj, name), allow_zero=allow_zero)
    for name in optional_durations:
        check_optional_duration(name, getattr(obj, name), allow_zero=allow_zero)
    for name, (lo, hi) in (ints or {}).items():
        _set(obj, name, check_int(name, getattr(obj, name), lo=lo, hi=hi))


@dataclass(frozen=True)
class DbOptions:
    """Options of a writer (:class:`Db`): flushing, memtable and L0 sizes, WAL and caching."""

    flush_interval: timedelta = timedelta(milliseconds=100)
    """How often buffered writes are flushed to a WAL SST (the durability latency)."""
    wal_sst_size_bytes: int = 4 * MiB
    """A WAL flush happens early once this many bytes are buffered."""
    l0_sst_size_bytes: int = 64 * MiB
    """The memtable is frozen and flushed to an L0 SST at this size."""
    memtable_memory_bytes: int = 32 * MiB
    """The memtable is also frozen once it holds about this much memory (estimated: each entry
    counted at a Python dict entry's ~320 bytes beyond its key and value), so small entries do
    not make a 64 MiB SST cost 200 MiB of RAM. A flush's and a compaction's transient memory
    grows with the memtable's rows, so the estimate counts a ``put_arrow`` row like a dict
    entry too (bench/results/db_ingest_memory.txt, issue 42 goal 3: counted at its resident
    ~70 bytes, a 10M-row ``put_arrow`` ingest with 128 MiB memtables peaked at 867-997 MiB
    instead of ~620; with 32 MiB, each 100k-row batch is its own memtable)."""
    max_unflushed_bytes: int = 32 * MiB
    """Writers block (backpressure) while frozen memtables not yet in L0 hold more than this much
    memory (estimated resident bytes, as ``memtable_memory_bytes``): with 32 MiB memtables, one
    frozen memtable at a time (a queue of them, waiting for L0 room behind the compactor, raised
    a single-put ingest's peak by ~150-250 MiB)."""
    l0_max_ssts: int = 16
    """Memtable flushes (and so writers, through backpressure) stall at this many L0 SSTs until
    compaction catches up."""
    block_size: int = 64 * KiB
    bloom_bits_per_key: int = 10
    compression: str = "none"
    block_cache_bytes: int = 256 * MiB
    manifest_poll_interval: timedelta = timedelta(seconds=1)
    """How often the writer re-reads the latest manifest (a LIST and two GETs) while it writes."""
    manifest_poll_idle_interval: timedelta | None = None
    """The longest the writer's manifest poll waits while polls find nothing new (no newer
    manifest since the last poll): the wait doubles from ``manifest_poll_interval`` up to this.
    None: 16 x ``manifest_poll_interval``. An idle writer then costs a LIST and two GETs every
    16 s by default (about $0.03 a day at S3 Standard prices) instead of every second; fencing
    and destroy are still detected by the next write or commit (docs/gc-and-boundaries.md, "What
    a durable put costs")."""
    manifest_format_version: int | None = None
    """The manifest format this writer commits in. Only 2 exists: SlateDB 0.17's (docs/format.md,
    "Manifest"). None (the default) means the same."""
    max_key_bytes: int = MAX_KEY_BYTES
    max_value_bytes: int = MAX_VALUE_BYTES
    max_parallel_writes: int = 1
    """WAL SSTs this writer may have in flight at once (SlateDB RFC 0001, "Parallel Writes"), at
    consecutive ids; each durable write is acknowledged as soon as its own SST lands. Stored in
    the manifest when the writer opens; the next writer fences with that many consecutive
    SSTs. 1..64; 1 keeps the strictly sequential WAL."""
    wal_url: str | None = field(default=None, repr=False)
    """The store of this database's WAL objects when it has a separate one (SlateDB RFC 0009,
    SlateDB's ``with_wal_object_store``): a store URL (see :func:`slatedb_core.store.url.open_store`),
    the WAL at ``<path>/wal/`` in it. None: the main store holds the WAL. A database written with a
    WAL store must be opened with it (else ``WalStoreMissing``). Never shown: it may carry
    credentials."""
    default_ttl: int | None = None
    """The TTL in ms of every put and merge that gives none (SlateDB's ``default_ttl``, RFC 0003):
    such a row expires ``default_ttl`` ms after its write. None (the default): rows never expire
    unless a write says so (``ttl=``, :mod:`slatedb_core.writer.ttl`)."""
    merge_operator: Any = None
    """The merge operator of ``Db.merge`` and of reads (SlateDB RFC 0006): a callable
    ``(key, existing: bytes | None, operand) -> bytes`` or a built-in's name (``"add_int64"``,
    ``"string_append"``; resolved at open by
    :func:`slatedb_core.lsm.merge_operator.resolve_merge_operator`). None: no operator, and
    ``Db.merge`` is refused (``MergeOperatorMissing``), as SlateDB refuses it."""
    compactor: CompactorOptions | None = None
    """Run a compactor inside the writer's process with these options (its ``l0_trigger`` at
    most ``l0_max_ssts``, else ``InvalidArgument``: it would never compact L0 before flushes
    stall). None (the default): run one elsewhere (``Compactor``, ``admin.run_compaction_once``,
    the Dagster asset); without any, writes stall once L0 holds ``l0_max_ssts`` SSTs."""
    glibc_malloc_threshold_bytes: int | None = None
    """Opt-in, process-wide: when set, ``Db.open`` sets glibc's mmap and trim thresholds of the
    whole process to this many bytes (``mallopt``; 128 KiB .. 32 MiB; ignored where the C
    library is not glibc), so freed blocks of that size or more and free heap tops are
    returned to the system instead of staying resident. Lowers a writer's peak memory for CPU
    (10M-row ingest, 1 MiB: median peak 623 -> 517 MiB, CPU +18%; bench/results/
    db_ingest_memory.txt). None (the default): the allocator is left as the host set it
    (:mod:`slatedb_core.writer.malloc_tuning`, docs/operations.md)."""

    def __post_init__(self) -> None:
        _check_fields(
            self,
            durations=("flush_interval", "manifest_poll_interval"),
            optional_durations=("manifest_poll_idle_interval",),
            ints={
                "wal_sst_size_bytes": (1, None),
                "l0_sst_size_bytes": (1, None),
                "memtable_memory_bytes": (1, None),
                "max_unflushed_bytes": (1, None),
                "l0_max_ssts": (1, None),
                "block_size": (1, MAX_BLOCK_SIZE),
                "bloom_bits_per_key": (0, None),
                "block_cache_bytes": (0, None),
                "max_key_bytes": (1, MAX_KEY_BYTES),
                "max_value_bytes": (1, MAX_VALUE_BYTES),
                "max_parallel_writes": (1, MAX_PARALLEL_WRITES),
            },
        )
        if self.manifest_format_version is not None:
            check_int("manifest_format_version", self.manifest_format_version, lo=2, hi=2)
        idle = self.manifest_poll_idle_interval
        if idle is not None and idle < self.manifest_poll_interval:
            raise InvalidArgument("manifest_poll_idle_interval must be >= manifest_poll_interval")
        check_choice("compression", self.compression, COMPRESSIONS)
        _check_wal_url(self.wal_url)
        if self.default_ttl is not None:
            _set(
                self, "default_ttl", check_int("default_ttl", self.default_ttl, lo=0, hi=2**63 - 1)
            )
        check_merge_operator_spec("merge_operator", self.merge_operator)
        # checked here, not when Db.open starts the compactor (RELIABILITY.md, review finding 14)
        check_optional("compactor", self.compactor, CompactorOptions)
        if self.compactor is not None and self.compactor.l0_trigger > self.l0_max_ssts:
            # its L0 compactions wait for more SSTs than flushes ever make: a stall forever
            raise InvalidArgument(
                f"compactor.l0_trigger ({self.compactor.l0_trigger}) must be <= l0_max_ssts "
                f"({self.l0_max_ssts}): flushes stall at l0_max_ssts L0 SSTs, and the "
                "in-process compactor would wait for l0_trigger of them forever"
            )
        if self.glibc_malloc_threshold_bytes is not None:
            v = self.glibc_malloc_threshold_bytes
            _set(
                self,
                "glibc_malloc_threshold_bytes",
                check_int("glibc_malloc_threshold_bytes", v, lo=128 * KiB, hi=32 * MiB),
            )


class CheckpointScope(enum.Enum):
    """What a checkpoint taken through an open Db covers (SlateDB RFC 0004)."""

    ALL = "all"
    """Every write issued before the call: flushes the WAL and the memtable first."""
    DURABLE = "durable"
    """Only what is already in the manifest: no flush, faster, may miss recent writes."""


@dataclass(frozen=True)
class CheckpointOptions:
    """How a checkpoint is created: its lifetime, the checkpoint it copies, and its name."""

    lifetime: timedelta | None = None
    """Expire this long after creation; None = never (must be deleted explicitly)."""
    source: uuid.UUID | None = None
    """Take the checkpoint of an existing (unexpired) checkpoint's manifest instead of the latest."""
    name: str | None = None

    def __post_init__(self) -> None:
        check_optional_duration("checkpoint lifetime", self.lifetime)
        check_optional("checkpoint source", self.source, uuid.UUID)
        if self.name is not None:  # stored as a FlatBuffers string: must be encodable UTF-8
            check_instance("checkpoint name", self.name, str)
            try:
                self.name.encode("utf-8")
            except UnicodeEncodeError as e:
                raise InvalidArgument(f"checkpoint name is not valid UTF-8 text: {e}") from None


@dataclass(frozen=True)
class GarbageCollectorOptions:
    """How old an object must be before the garbage collector deletes it, per kind of object."""

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
        _check_fields(
            self,
            durations=("min_age", "db_delete_grace"),
            optional_durations=(
                "manifest_min_age",
                "wal_min_age",
                "compacted_min_age",
                "compactions_min_age",
            ),
            allow_zero=True,
        )
        check_duration("interval", self.interval)

    def min_age_for(self, kind: str) -> timedelta:
        """``kind`` is one of manifest, wal, compacted, compactions."""
        override: timedelta | None = getattr(self, f"{kind}_min_age")
        return self.min_age if override is None else override


@dataclass(frozen=True)
class CompactorOptions:
    """When the compactor runs, what it merges and how large its output SSTs are."""

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
    block_size: int | None = None
    """The data block size of the SSTs compactions write. None: the writer's
    ``DbOptions.block_size`` for the compactor a writer runs (``DbOptions.compactor``: its L0
    and compacted SSTs then have the same blocks), else ``DbOptions``' default (64 KiB)."""
    bloom_bits_per_key: int | None = None
    """As ``block_size``, for the bloom filters' bits per key."""
    compression: str | None = None
    """As ``block_size``, for the blocks' compression."""
    read_budget_bytes: int = 4 * MiB
    """The bytes one compaction reads ahead over all its sources at once: each source's GETs are
    this divided by the number of sources, kept between 1 MiB (fewer bytes per GET costs many
    more requests on S3) and 8 MiB. A merge holds about one GET's rows per source, and decoded
    they take ~4x the GET's bytes, so the default bounds the read side of a compaction to
    ~16 MiB for up to 4 sources (1 MiB GETs), ~4 MiB of decoded rows per source beyond,
    whatever the size of its inputs (issue 42, goal 3; bench/results/db_ingest_memory.txt:
    a 10M-row ingest peaked 30-90 MiB lower than with 16 MiB, single runs)."""
    merge_operator: str | MergeOperator | None = None
    """How compactions fold merge operands (SlateDB RFC 0006), as ``DbOptions.merge_operator``.
    None: a compaction that meets an operand fails with ``MergeOperatorMissing`` and commits
    nothing (SlateDB's ``MergeOperatorRequiredIterator``)."""

    def __post_init__(self) -> None:
        resolve_merge_operator(self.merge_operator)  # InvalidArgument for an unknown name
        _check_fields(
            self,
            durations=("poll_interval",),
            ints={
                "l0_trigger": (1, None),
                "max_sst_size_bytes": (1, None),
                "min_merge_width": (2, None),
                "max_sorted_runs": (1, None),
                "read_budget_bytes": (1, None),
            },
        )
        for name, bounds in (
            ("block_size", (1, MAX_BLOCK_SIZE)),
            ("bloom_bits_per_key", (0, None)),
        ):
            if getattr(self, name) is not None:
                _check_fields(self, ints={name: bounds})
        _set(self, "size_ratio", check_number("size_ratio", self.size_ratio, lo=1))
        if self.compression is not None:
            check_choice("compression", self.compression, COMPRESSIONS)

    def sst_fields(self) -> tuple[int, int, str]:
        """``(block_size, bloom_bits_per_key, compression)`` of the SSTs compactions write: the
        ones set, ``DbOptions``' defaults for the others."""
        return (
            DbOptions.block_size if self.block_size is None else self.block_size,
            DbOptions.bloom_bits_per_key
            if self.bloom_bits_per_key is None
            else self.bloom_bits_per_key,
            DbOptions.compression if self.compression is None else self.compression,
        )

    def for_writer(self, db: DbOptions) -> CompactorOptions:
        """These options for the compactor the writer with options ``db`` runs: what they leave
        unset (None) is the writer's, so its compactions write SSTs as its flushes do and fold
        merge operands with its operator (issue 38)."""
        return replace(
            self,
            merge_operator=db.merge_operator
            if self.merge_operator is None
            else self.merge_operator,
            block_size=db.block_size if self.block_size is None else self.block_size,
            bloom_bits_per_key=db.bloom_bits_per_key
            if self.bloom_bits_per_key is None
            else self.bloom_bits_per_key,
            compression=db.compression if self.compression is None else self.compression,
        )


class ReaderMode(enum.Enum):
    """Which state a :class:`DbReader` reads: a fixed checkpoint, a managed one, or the latest."""

    CHECKPOINT = "checkpoint"
    """Read the given checkpoint; never refreshed, never writes."""
    MANAGED = "managed"
    """Create a checkpoint at open, refresh it before half its lifetime, re-establish it when the
    SST set changes and delete the old one (SlateDB RFC 0004)."""
    FOLLOW_LATEST = "follow_latest"
    """Follow the latest manifest and WAL without ever writing (read-only buckets, many readers)."""


@dataclass(frozen=True)
class DbReaderOptions:
    """Options of a :class:`DbReader`: its mode, polling, checkpoint lifetime and memory."""

    manifest_poll_interval: timedelta = timedelta(seconds=1)
    checkpoint_lifetime: timedelta | None = timedelta(minutes=10)
    """Lifetime of the managed checkpoint; must exceed twice the poll interval. None: the managed
    checkpoint never expires. Only a clean close deletes it then, so a reader process that dies
    with it open pins its manifest's SSTs against the GC until an operator deletes the
    checkpoint (``slatedb delete-checkpoint``)."""
    max_memtable_bytes: int = 64 * MiB
    """WAL replay fills in-memory tables of at most this size each."""
    mode: ReaderMode | None = None
    """None: CHECKPOINT when a checkpoint id is given to open(), else MANAGED."""
    block_cache_bytes: int = 64 * MiB
    wal_url: str | None = field(default=None, repr=False)
    """The database's separate WAL store, as ``DbOptions.wal_url`` (SlateDB RFC 0009)."""
    merge_operator: str | MergeOperator | None = None
    """How reads fold merge operands (SlateDB RFC 0006): a built-in's name (``"add_int64"``,
    ``"string_append"``) or a callable ``(key, existing, operand) -> bytes``, the operator the
    database's writers use. None: a read of a key whose newest row is an operand raises
    ``MergeOperatorMissing`` (other keys read as usual)."""

    def __post_init__(self) -> None:
        resolve_merge_operator(self.merge_operator)  # InvalidArgument for an unknown name
        _check_wal_url(self.wal_url)
        _check_fields(
            self,
            durations=("manifest_poll_interval",),
            optional_durations=("checkpoint_lifetime",),
            ints={"max_memtable_bytes": (1, None), "block_cache_bytes": (0, None)},
        )
        check_optional("mode", self.mode, ReaderMode)
        if (
            self.mode in (None, ReaderMode.MANAGED)
            and self.checkpoint_lifetime is not None
            and self.checkpoint_lifetime <= 2 * self.manifest_poll_interval
        ):
            raise InvalidArgument("checkpoint_lifetime must exceed 2 x manifest_poll_interval")
