"""Read-only health figures of a database, for operators and the Dagster orchestration.

Nothing here writes: every function reads the manifest, the ``gc/*.boundary`` files or listings,
so a monitoring loop can call them as often as it likes without fencing anybody. The figures are
the ones the maintenance jobs act on:

* the LSM shape (L0 SSTs, sorted runs, bytes) that decides whether compaction is due;
* the WAL backlog (``wal_id_last_seen - replay_after_wal_id``): WAL SSTs a recovering writer
  would replay;
* the manifest lag: how many manifest versions behind the latest the oldest active non-writer
  checkpoint is (everything those versions reference stays pinned against GC);
* the GC boundaries, and whether each is still at or behind the newest id of its namespace;
* SSTs the latest manifest references that are not in the store (data loss, or a bad clone).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from slatedb_core.compactor.compactions import compactions_seq
from slatedb_core.errors import CorruptionError, ObjectNotFound
from slatedb_core.keys import KeyRange
from slatedb_core.layout import (
    COMPACTED_BOUNDARY,
    COMPACTIONS_BOUNDARY,
    MANIFEST_BOUNDARY,
    MANIFEST_DIR,
    MANIFEST_SUFFIX,
    WAL_BOUNDARY,
    boundary_path,
)
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.boundary import parse_boundary
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import WalLog

__all__ = [
    "BOUNDARY_NAMESPACES",
    "BoundaryViolation",
    "DatabaseHealth",
    "check_boundaries",
    "damaged_ssts",
    "database_health",
    "inspect_database",
    "latest_ids",
    "list_databases",
    "missing_ssts",
    "range_bytes",
    "read_boundaries",
    "split_key",
]

Clock = Callable[[], float]

BOUNDARY_NAMESPACES = (MANIFEST_BOUNDARY, WAL_BOUNDARY, COMPACTIONS_BOUNDARY, COMPACTED_BOUNDARY)
"""The ``gc/<namespace>.boundary`` files. ``compacted`` holds ULID milliseconds, the others ids."""

_MANIFEST_NAME = re.compile(r"^\d{20}\." + re.escape(MANIFEST_SUFFIX) + "$")
_HEAD_CONCURRENCY = 16
_CLOCK_SKEW_MS = 5 * 60 * 1000
"""How far ahead of our clock ``gc/compacted.boundary`` may be before we call it wrong: it is set
from SST ULID times, which come from other machines' clocks."""


@dataclass(frozen=True, slots=True)
class DatabaseHealth:
    """One database's figures at its latest manifest."""

    path: str
    manifest_id: int
    initialized: bool
    destroyed_at_s: int | None
    writer_epoch: int
    compactor_epoch: int
    l0_ssts: int
    sorted_runs: int
    ssts: int
    """Physical SSTs the manifest lists (its own and those of external databases)."""
    sst_bytes: int
    """Bytes of every SST the manifest lists (whole objects, also those of other databases)."""
    data_bytes: int
    """Estimated bytes within the key range (see :func:`range_bytes`): the size that matters
    for splitting a projected clone that references its parent's whole SSTs."""
    l0_bytes: int
    wal_id_last_seen: int
    replay_after_wal_id: int
    active_checkpoints: int
    """Unexpired checkpoints of any kind (writer, reader, operator, clone)."""
    expired_checkpoints: tuple[Checkpoint, ...]
    """Expired checkpoints still listed: the GC removes them on its next pass."""
    oldest_pinned_manifest_id: int | None
    """The smallest manifest id an unexpired non-writer checkpoint pins (None: no such one)."""
    external_dbs: int
    key_range: KeyRange

    @property
    def wal_backlog(self) -> int:
        """WAL SSTs a recovering writer would replay."""
        return max(0, self.wal_id_last_seen - self.replay_after_wal_id)

    @property
    def manifest_lag(self) -> int:
        """Manifest versions between the latest and the oldest pinned one (0: nothing pinned)."""
        if self.oldest_pinned_manifest_id is None:
            return 0
        return max(0, self.manifest_id - self.oldest_pinned_manifest_id)

    @property
    def destroyed(self) -> bool:
        return self.destroyed_at_s is not None


def database_health(stored: StoredManifest, path: str, now_s: float) -> DatabaseHealth:
    """The figures of an already read manifest (no request)."""
    m = stored.manifest
    sizes = {s.id: s.info.estimated_size for s in m.ssts}
    pinned = [
        c.manifest_id for c in m.checkpoints if c.writer_epoch is None and not c.is_expired(now_s)
    ]
    return DatabaseHealth(
        path=path,
        manifest_id=stored.id,
        initialized=m.initialized,
        destroyed_at_s=m.destroyed_at_s,
        writer_epoch=m.writer_epoch,
        compactor_epoch=m.compactor_epoch,
        l0_ssts=len(m.l0),
        sorted_runs=len(m.compacted),
        ssts=len(m.ssts),
        sst_bytes=sum(sizes.values()),
        data_bytes=range_bytes(m),
        l0_bytes=sum(sizes.get(v.sst_id, 0) for v in m.l0),
        wal_id_last_seen=m.wal_id_last_seen,
        replay_after_wal_id=m.replay_after_wal_id,
        active_checkpoints=sum(1 for c in m.checkpoints if not c.is_expired(now_s)),
        expired_checkpoints=tuple(c for c in m.checkpoints if c.is_expired(now_s)),
        oldest_pinned_manifest_id=min(pinned) if pinned else None,
        external_dbs=len(m.external_dbs),
        key_range=KeyRange.of(m.key_range),
    )


def inspect_database(
    store: ObjectStore, path: str, *, now: Clock = time.time
) -> tuple[StoredManifest, DatabaseHealth]:
    """Read the latest manifest of ``path`` (two requests) and compute its figures.

    Raises DatabaseNotFound when there is no manifest, CorruptionError when it does not decode.
    """
    validate_relative_path(path, what="database path")
    stored = ManifestStore(store, path).read_latest()
    return stored, database_health(stored, path, now())


def list_databases(store: ObjectStore, prefix: str = "") -> list[str]:
    """Paths of the databases under ``prefix`` (every ``<path>/manifest/<id>.manifest`` found),
    sorted. One LIST of everything under the prefix: meant for discovery, not for a hot loop.
    Soft-destroyed databases are included until the GC has deleted them."""
    if prefix:
        validate_relative_path(prefix.strip("/"), what="database prefix")
    found: set[str] = set()
    for meta in store.list(prefix.strip("/")):
        parts = meta.path.rsplit("/", 2)
        if len(parts) == 3 and parts[1] == MANIFEST_DIR and _MANIFEST_NAME.match(parts[2]):
            found.add(parts[0])
    return sorted(found)


def read_boundaries(store: ObjectStore, db_path: str) -> dict[str, int | None]:
    """The durable value of each GC boundary of ``db_path``; None where the file does not exist
    or holds 0 (no GC pass has advanced it yet). Raises CorruptionError for a file that is not a u64."""
    validate_relative_path(db_path, what="database path")
    out: dict[str, int | None] = {}
    for ns in BOUNDARY_NAMESPACES:
        name = boundary_path(db_path, ns)
        try:
            # 0 covers nothing, like no file (a writer creates gc/wal.boundary at 0 to record
            # its lease, docs/gc-and-boundaries.md "The boundary lease")
            out[ns] = parse_boundary(store.get(name).data, name) or None
        except ObjectNotFound:
            out[ns] = None
    return out


def latest_ids(
    store: ObjectStore,
    db_path: str,
    manifest: StoredManifest | None = None,
    *,
    wal_url: str | None = None,
) -> dict[str, int | None]:
    """The newest id of each sequenced namespace (None: the namespace is empty), and the current
    time in milliseconds under ``compacted`` (its boundary is a ULID time). ``wal_url``: the
    database's separate WAL store (SlateDB RFC 0009), where its WAL ids are listed."""
    stored = manifest or ManifestStore(store, db_path).read_latest()
    m = stored.manifest
    wal_log = WalLog(WalLocation.open(store, wal_url), db_path)
    listed_wal = wal_log.list_ids(after=m.wal_id_last_seen)
    wal = max([m.wal_id_last_seen, m.next_wal_sst_id - 1, *listed_wal])
    return {
        MANIFEST_BOUNDARY: stored.id,
        WAL_BOUNDARY: wal if wal > 0 else None,
        COMPACTIONS_BOUNDARY: compactions_seq(store, db_path).latest_id(),
        COMPACTED_BOUNDARY: int(time.time() * 1000),
    }


@dataclass(frozen=True, slots=True)
class BoundaryViolation:
    namespace: str
    boundary: int
    latest: int | None
    reason: str


def check_boundaries(
    boundaries: dict[str, int | None], latest: dict[str, int | None]
) -> list[BoundaryViolation]:
    """Boundaries that are ahead of what they may cover. GC never moves the manifest or
    compactions boundary onto the latest object (SlateDB RFC 0026), the WAL boundary stays behind the
    replay point, and the compacted boundary is a past SST creation time."""
    out: list[BoundaryViolation] = []
    for ns, value in boundaries.items():
        if value is None or value == 0:
            continue
        newest = latest.get(ns)
        if ns == COMPACTED_BOUNDARY:
            assert newest is not None
            if value > newest + _CLOCK_SKEW_MS:
                out.append(BoundaryViolation(ns, value, newest, "boundary is in the future"))
        elif newest is None:
            out.append(BoundaryViolation(ns, value, None, "boundary set but namespace is empty"))
        elif ns in (MANIFEST_BOUNDARY, COMPACTIONS_BOUNDARY) and value >= newest:
            out.append(BoundaryViolation(ns, value, newest, "boundary covers the latest object"))
        elif value > newest:
            out.append(BoundaryViolation(ns, value, newest, "boundary is past the newest id"))
    return out


def missing_ssts(store: ObjectStore, db_path: str, manifest: Manifest) -> list[str]:
    """SSTs ``manifest`` references that are not in the store (one HEAD per SST, in parallel),
    plus views whose SST id the manifest does not list at all (``<db>#<sst id>``)."""
    listed = {s.id for s in manifest.ssts}
    dangling = [
        f"{db_path}#{v.sst_id}"
        for v in (*manifest.l0, *(v for run in manifest.compacted for v in run.views))
        if v.sst_id not in listed
    ]

    def absent(sst: CompactedSst) -> str | None:
        path = resolve_sst_path(db_path, manifest, sst)
        return None if store.exists(path) else path

    with ThreadPoolExecutor(max_workers=_HEAD_CONCURRENCY) as pool:
        gone = [p for p in pool.map(absent, manifest.ssts) if p is not None]
    return sorted(gone) + dangling


def damaged_ssts(store: ObjectStore, db_path: str, manifest: Manifest) -> list[tuple[str, str]]:
    """SSTs ``manifest`` lists that are missing or do not decode, as (path, error): each one is
    read whole (footer, info, index and every block, with their checksums), so this costs the
    database's size in GETs and is meant for an on-demand check, not a monitoring loop."""

    def damage(sst: CompactedSst) -> tuple[str, str] | None:
        path = resolve_sst_path(db_path, manifest, sst)
        try:
            SstReader.open(store, path, sst.info).verify()  # one read-ahead group held at a time
        except ObjectNotFound:
            return path, "missing"
        except CorruptionError as e:
            return path, f"CorruptionError: {e}"
        return None

    with ThreadPoolExecutor(max_workers=_HEAD_CONCURRENCY) as pool:
        found = [d for d in pool.map(damage, manifest.ssts) if d is not None]
    return sorted(found)


def _in_range(sst: CompactedSst, kr: KeyRange) -> tuple[bytes, bytes, float] | None:
    """The part of ``sst`` inside ``kr``: (low key, high key, estimated bytes), or None if
    none. Bytes are pro-rated by key position, which is exact enough for a projected clone that
    references its parent's whole SSTs but may only read part of each."""
    first, last = sst.info.first_key, sst.info.last_key
    if first is None or last is None:
        return None
    size = float(max(1, sst.info.estimated_size))
    lo = first if kr.start is None else max(first, kr.start)
    hi = last if kr.end is None else min(last, kr.end)
    if hi < lo or (kr.end is not None and lo >= kr.end):
        return None
    if last > first:
        size *= max(0.0, _position(first, last, hi) - _position(first, last, lo))
    return lo, hi, size


def range_bytes(manifest: Manifest) -> int:
    """Estimated bytes of SST data within the database's key range (all of it when the range
    is unbounded). Overwritten and deleted versions still count until compaction drops them."""
    kr = KeyRange.of(manifest.key_range)
    if kr == KeyRange():
        return sum(s.info.estimated_size for s in manifest.ssts)
    parts = (_in_range(s, kr) for s in manifest.ssts)
    return int(sum(p[2] for p in parts if p is not None))


def split_key(manifest: Manifest) -> bytes | None:
    """A key that splits the data of ``manifest`` into two halves of about equal size, or None
    when there is no such key (no data, or all of it in one key's place).

    Works from the manifest alone: the SSTs' parts inside the key range are ordered by first key
    and weighted by (pro-rated) size; inside the one where the halfway mark falls, the key is
    interpolated between its low and high key. Overlapping SSTs (L0, several sorted runs) make
    it approximate, which is all a split needs.
    """
    kr = KeyRange.of(manifest.key_range)
    parts = sorted(
        (p for p in (_in_range(s, kr) for s in manifest.ssts) if p is not None and p[2] > 0),
        key=lambda p: p[0],
    )
    if not parts:
        return None
    total = sum(p[2] for p in parts)
    low = parts[0][0]
    seen = 0.0
    candidate: bytes | None = None
    for lo, hi, size in parts:
        if seen + size >= total / 2:
            candidate = _interpolate(lo, hi, (total / 2 - seen) / size)
            break
        seen += size
    if candidate is None or candidate <= low:
        return None
    if (kr.start is not None and candidate <= kr.start) or (
        kr.end is not None and candidate >= kr.end
    ):
        return None
    return candidate


_WIDTH = 8


def _suffix_ints(a: bytes, b: bytes, k: bytes) -> tuple[int, int, int, int]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1

    def num(x: bytes) -> int:
        return int.from_bytes(x[n : n + _WIDTH].ljust(_WIDTH, b"\x00"), "big")

    return n, num(a), num(b), num(k)


def _position(a: bytes, b: bytes, k: bytes) -> float:
    """Where ``k`` lies between ``a`` (0.0) and ``b`` (1.0), on the bytes after their common
    prefix read as a big-endian number."""
    if b <= a:
        return 0.0
    if k <= a:
        return 0.0
    if k >= b:
        return 1.0
    _, ia, ib, ik = _suffix_ints(a, b, k)
    return 0.0 if ib == ia else min(1.0, max(0.0, (ik - ia) / (ib - ia)))


def _interpolate(a: bytes, b: bytes, fraction: float) -> bytes:
    """A key about ``fraction`` of the way from ``a`` to ``b`` (``a <= result <= b``): the
    inverse of :func:`_position`."""
    if b <= a:
        return a
    n, ia, ib, _ = _suffix_ints(a, b, a)
    mid = ia + int((ib - ia) * min(max(fraction, 0.0), 1.0))
    key = (a[:n] + mid.to_bytes(_WIDTH, "big")).rstrip(b"\x00") or a[: n + 1]
    return min(max(key, a), b)
