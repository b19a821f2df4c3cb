"""Plain, immutable Python objects describing a manifest (SlateDB RFC 0004's ManifestV2, as
SlateDB 0.17 stores it: docs/format.md, "Manifest").

The rest of the code only ever sees these dataclasses; the FlatBuffers types stay inside
``slatedb_core.manifest.codec``. Everything is frozen and uses tuples, so a ``Manifest`` can be shared
between threads as an immutable snapshot and changed only with ``dataclasses.replace``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar

from ulid import ULID

from slatedb_core.errors import InvalidArgument
from slatedb_core.keys import BytesRange

MAX_PARALLEL_WRITES = 64
"""Upper bound of ``Manifest.max_parallel_writes`` (and ``DbOptions.max_parallel_writes``): a new
writer writes that many fencing SSTs at open, so the value must stay small."""


MAX_APP_ID_CHARS = 256
"""The longest ``AppVersion.app_id``, in characters."""
MAX_APP_VERSION = (1 << 63) - 1
"""The highest ``AppVersion.version`` (stored as a u64; kept below 2**63 for JVM callers)."""


@dataclass(frozen=True, slots=True)
class AppVersion:
    """An exactly-once record (the idea of Delta Lake's transaction identifiers, its ``txn``
    action): the last batch ``version`` of the application ``app_id`` applied to this database.
    A batch of an app at or below its recorded version is a no-op (docs/format.md, "What is
    ours, and where it goes"; :meth:`Db.ingest_ssts
    <slatedb_core.writer.ingest.WriterIngest.ingest_ssts>`)."""

    app_id: str
    version: int

    def __post_init__(self) -> None:
        if not isinstance(self.app_id, str) or not 0 < len(self.app_id) <= MAX_APP_ID_CHARS:
            raise InvalidArgument(
                f"app_id must be a non-empty str of at most {MAX_APP_ID_CHARS} characters, "
                f"got {self.app_id!r:.300}"
            )
        v = self.version
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_APP_VERSION:
            raise InvalidArgument(f"version must be an int in [0, 2**63), got {v!r}")


def merge_transactions(
    current: Iterable[AppVersion], records: Iterable[AppVersion]
) -> tuple[AppVersion, ...]:
    """``current`` and ``records`` merged: one record per app, the highest version, sorted by
    app id (the order ``Manifest.transactions`` keeps).

    For records that all hold for the SAME keys (one database's own records and a batch it
    commits, or records already combined for its key range): each says "batches up to v of the
    app are applied to these keys", so the highest wins. Records of different key ranges are
    combined with :func:`combined_range_transactions` instead."""
    best: dict[str, int] = {}
    for r in (*current, *records):
        if r.version >= best.get(r.app_id, -1):
            best[r.app_id] = r.version
    return tuple(AppVersion(app, best[app]) for app in sorted(best))


def combined_range_transactions(
    ranges: Iterable[Iterable[AppVersion]],
) -> tuple[AppVersion, ...]:
    """What a database covering the key ranges of several databases may record, given the
    exactly-once records of each (one iterable per database): per app, the LOWEST version
    recorded, and no record for an app that any of them lacks; sorted by app id. None given:
    no records.

    A record (app, v) means "batches up to v of the app are applied to every key of this
    database" (docs/format.md, "What is ours, and where it goes"). A batch that reached one of
    the ranges and not another (its job failed between the shards' commits) is therefore not
    applied to the combined range, and its re-run writes it there; the highest version would
    make that re-run a no-op everywhere and lose the rows of the ranges it missed. The rule of
    a union (a merge of shards, :mod:`slatedb_core.lifecycle.union`) and of the records an
    overwrite carries into each new shard (:mod:`slatedb_core.table.rescale`); a projection
    covers part of one range and keeps its source's records as they are."""
    lowest: dict[str, int] = {}
    everywhere: set[str] | None = None  # the apps every range records; None before the first
    for records in ranges:
        mine = tuple(records)
        apps = {r.app_id for r in mine}
        everywhere = apps if everywhere is None else everywhere & apps
        for r in mine:
            if r.version < lowest.get(r.app_id, MAX_APP_VERSION + 1):
                lowest[r.app_id] = r.version
    return tuple(AppVersion(app, lowest[app]) for app in sorted(everywhere or ()))


@dataclass(frozen=True, slots=True)
class SstInfo:
    """SlateDB's ``SsTableInfo`` (``schemas/sst.fbs`` of SlateDB 0.17; docs/format.md): where an
    SST's index, filter and stats live, and what it covers. Filled in by the SST writer, stored
    both in the SST's own footer and in the manifest.

    ``entry_count`` and ``size_bytes`` are ours: appended fields SlateDB ignores (and drops when it
    rewrites a manifest). 0 means unknown, and readers then learn the size from the object."""

    first_key: bytes | None = None  # SlateDB's first_entry (a WAL SST's: its first seq, u64 BE)
    last_key: bytes | None = None  # SlateDB's last_entry
    index_offset: int = 0
    index_len: int = 0
    filter_offset: int = 0
    filter_len: int = 0
    compression: int = 0  # SlateDB's CompressionFormat: 0 none, 1 snappy, 2 zlib, 3 lz4, 4 zstd
    entry_count: int = 0  # ours; 0 = unknown
    size_bytes: int = 0  # ours; 0 = unknown
    sst_type: int = 0  # SlateDB's SstType: 0 compacted, 1 WAL
    stats_offset: int = 0
    stats_len: int = 0  # 0 = no stats block
    filter_format: int = 0  # SlateDB's FilterFormat: 0 legacy (one raw bloom filter), 1 composite

    @property
    def estimated_size(self) -> int:
        """The object's size in bytes: ``size_bytes`` when we wrote the SST, else the end of its
        last metadata block (index, filter or stats; SlateDB writes them after the data blocks),
        which is the size less the few dozen bytes of footer. For compaction sizing and health."""
        if self.size_bytes:
            return self.size_bytes
        return max(
            self.index_offset + self.index_len,
            self.filter_offset + self.filter_len,
            self.stats_offset + self.stats_len,
        )


@dataclass(frozen=True, slots=True)
class CompactedSst:
    """One physical SST under ``compacted/``; the single source of truth for its metadata."""

    id: ULID
    info: SstInfo = field(default_factory=SstInfo)
    format_version: int = 2
    """The SST's format version (SlateDB's ``CompactedSsTableV2.format_version``: 2 is what SlateDB
    0.17 writes and reads; stored absent reads as 1, SlateDB's original SST format)."""
    original_id: ULID | None = None  # set when union had to re-id an SST; used for path resolution
    """Ours (docs/format.md, "Manifest"): SlateDB does not store it and drops it."""


@dataclass(frozen=True, slots=True)
class SstView:
    """A reference to an SST with an optional visible range (SlateDB RFC 0004's CompactedSsTableView)."""

    view_id: ULID
    sst_id: ULID
    visible_range: BytesRange | None = None


@dataclass(frozen=True, slots=True)
class SortedRun:
    id: int
    views: tuple[SstView, ...] = ()


@dataclass(frozen=True, slots=True)
class ExternalDb:
    """Another database whose SSTs this one references (clones, union)."""

    path: str
    source_checkpoint_id: uuid.UUID
    final_checkpoint_id: uuid.UUID | None = None
    sst_ids: tuple[ULID, ...] = ()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A pinned manifest version. ``expire_time_s`` None means it never expires. SlateDB stores
    both times as u32 seconds (``expire_time_s`` 0 = never)."""

    id: uuid.UUID
    manifest_id: int
    create_time_s: int
    expire_time_s: int | None = None
    writer_epoch: int | None = None  # WriterCheckpoint metadata; None = no metadata
    name: str | None = None

    def is_expired(self, now_s: float) -> bool:
        """Whether the checkpoint's expiry time is before ``now_s`` (seconds since the epoch)."""
        return self.expire_time_s is not None and self.expire_time_s < now_s


WAL_STORE_ID_SIZE = 16
"""Bytes in ``Manifest.wal_store_id``."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """The state of one database at one manifest version."""

    writer_epoch: int = 0
    compactor_epoch: int = 0
    initialized: bool = True
    destroyed_at_s: int | None = None
    """Ours; stored as a checkpoint SlateDB keeps (docs/format.md, "Manifest")."""
    external_dbs: tuple[ExternalDb, ...] = ()
    replay_after_wal_id: int = 0
    wal_id_last_seen: int = 0
    next_wal_sst_id: int = 1
    """Ours; absent (SlateDB wrote the manifest) it is ``wal_id_last_seen + 1``, as SlateDB
    derives it."""
    ssts: tuple[CompactedSst, ...] = ()
    l0: tuple[SstView, ...] = ()  # newest first
    compacted: tuple[SortedRun, ...] = ()  # newest first
    checkpoints: tuple[Checkpoint, ...] = ()
    last_l0_seq: int = 0
    last_compacted_l0_view_id: ULID | None = None
    last_l0_clock_tick: int = 0
    """SlateDB's: the clock tick of the last row flushed to L0 (kept as read)."""
    recent_snapshot_min_seq: int = 0
    """SlateDB's: the lowest seq its in-memory snapshots still read (kept as read)."""
    sequence_tracker: bytes | None = None
    """SlateDB's seq-to-time tracker (its RFC 0012), opaque here (kept as read)."""
    max_parallel_writes: int = 1
    """WAL writes the current writer may have in flight (SlateDB RFC 0001, "Parallel Writes"); the next
    writer fences with this many consecutive SSTs. Ours: absent (SlateDB wrote the manifest, one
    write in flight) decodes as 1."""
    our_writer_epoch: int = 0
    """Ours: the last writer epoch this engine's writer took. When it is not ``writer_epoch``, a
    SlateDB writer holds the database (or held it last; SlateDB drops this field when it rewrites
    the manifest, so it then reads 0), and our GC keeps SSTs as SlateDB's own GC does
    (docs/format.md, "What each engine ignores of the other's")."""
    our_compactor_epoch: int = 0
    """Ours: the same for the compactor epoch."""
    key_range: BytesRange | None = None
    """The keys this database may hold (set by projection and union); None = all keys. Kept at
    the manifest level because SSTs written after a projection carry no visible range. Ours:
    SlateDB drops it when it rewrites the manifest (docs/format.md, "Manifest")."""
    transactions: tuple[AppVersion, ...] = ()
    """Ours: the exactly-once records, one per app, sorted by app id (:class:`AppVersion`).
    SlateDB drops them when it rewrites the manifest (docs/format.md, "What a SlateDB rewrite
    loses")."""
    separate_wal_store: bool = False
    """Ours: this engine's writer last opened the database with a separate WAL store
    (``DbOptions.wal_url``, SlateDB RFC 0009), so an opener without one must not read ``wal/`` of
    the main store as the WAL (:func:`slatedb_core.wal.location.check_wal_present`). SlateDB
    drops it when it rewrites the manifest; its own writer is recognised another way there."""
    wal_store_id: bytes | None = None
    """Ours: the id of the separate WAL store our writer last opened the database with (16
    random bytes, also in the object ``<db>/_wal_store_id`` of that store): an opener with
    another WAL store finds another id there, or none, and is refused even when nothing past
    the replay point is recorded (:func:`slatedb_core.wal.location.check_wal_present`). None:
    no separate store, or the manifest was written by SlateDB or an earlier build of ours."""
    wal_object_store_uri: str | None = None
    """SlateDB's ManifestV1 ``wal_object_store_uri`` as read (SlateDB writes "" when its writer
    has a WAL store, docs/format.md "ManifestV1"): an opener without a WAL store is refused, as
    SlateDB's own builders refuse it. ManifestV2 has no field for it (SlateDB drops it when it
    rewrites the manifest as V2, and so stops checking); our V2 commits keep it in our table."""

    def app_version(self, app_id: str) -> int | None:
        """The version recorded for ``app_id``; None when none is."""
        for t in self.transactions:
            if t.app_id == app_id:
                return t.version
        return None

    def checkpoint(self, checkpoint_id: uuid.UUID) -> Checkpoint | None:
        """The checkpoint with this id, or None."""
        for cp in self.checkpoints:
            if cp.id == checkpoint_id:
                return cp
        return None

    _sst_by_id: dict[bytes, CompactedSst] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )
    """:meth:`sst`'s map, built on its first call (issue 42: a lookup per compaction output and
    per source view was a scan of every SST); never compared, never copied by ``replace``."""

    def sst(self, sst_id: ULID) -> CompactedSst | None:
        """The compacted SST with this id (in L0 or a sorted run), or None."""
        by_id = self._sst_by_id
        if by_id is None:
            # keyed by the ids' bytes: a ULID hashes in Python, bytes once and in C
            by_id = dict(zip(map(_ID_BYTES, self.ssts), self.ssts, strict=True))
            object.__setattr__(self, "_sst_by_id", by_id)  # a cache of immutable fields
        return by_id.get(sst_id.bytes)

    def ssts_of(self, views: Iterable[SstView]) -> list[CompactedSst]:
        """The SST of each of ``views``, in order (one map lookup each, no call per view);
        KeyError naming the first view's SST id that no SST of the manifest has."""
        if self._sst_by_id is None:
            self.sst(ULID(bytes(16)))  # builds the map
        by_id = self._sst_by_id
        assert by_id is not None
        try:
            return list(map(by_id.__getitem__, map(_SST_ID_BYTES, views)))
        except KeyError:
            missing = next(v.sst_id for v in views if v.sst_id.bytes not in by_id)
            raise KeyError(missing) from None


_T = TypeVar("_T")
_ID_BYTES = attrgetter("id.bytes")
_SST_ID_BYTES = attrgetter("sst_id.bytes")


def builder(cls: type[_T]) -> Callable[..., _T]:
    """A constructor of ``cls`` (a frozen slots dataclass without ``__post_init__``) taking
    every field positionally, for decoders that make thousands (issue 42: the frozen
    ``__init__`` sets each field through ``object.__setattr__``, 2.7 us for an ``SstInfo``,
    a third of a manifest decode at 10k SSTs). It fills a mutable twin with the same slots,
    then makes it a ``cls``: the same object ``cls(...)`` makes (tests/manifest check equality
    field by field), at about 40% of the cost. No validation: for values a decoder produced."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    slots = getattr(cls, "__slots__", None)
    if tuple(names) != slots or "__post_init__" in vars(cls):
        raise TypeError(f"{cls.__name__} is not a slots dataclass without __post_init__")
    args = ", ".join(names)
    body = "".join(f"    o.{n} = {n}\n" for n in names)
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": slots})
    ns: dict[str, Any] = {"twin": twin, "cls": cls}
    exec(  # generated from the field names above, as dataclasses does
        f"def make({args}):\n    o = twin.__new__(twin)\n{body}    o.__class__ = cls\n    return o\n",
        ns,
    )
    make: Callable[..., _T] = ns["make"]
    return make
