"""Read-only status of a whole fleet of databases, fast enough for a sensor tick over thousands.

:func:`slatedb_core.health.inspect_database` plus :func:`~slatedb_core.health.read_boundaries`
cost about seven requests per database, one after another. A :class:`FleetScanner` reads many
databases at once (a bounded thread pool; obstore releases the GIL while it waits) and remembers
what it saw, so that a database nothing happened to costs two LISTs on the next scan:

* **Boundaries** (``gc/*.boundary``, SlateDB RFC 0026): one LIST of ``<db>/gc/``; a boundary file
  is read (GET) only when its listed identity (e-tag, size, last-modified) differs from the one
  the previous scan listed. S3's e-tag of a single-part object is its content's MD5 and the local
  filesystem's includes the modification time, so a boundary rewritten with another value of the
  same size is read again.
* **Latest manifest** (SlateDB RFC 0001; docs/manifest-and-fencing.md): one LIST of
  ``<db>/manifest/`` starting at the previously latest id. Listed unchanged with nothing after it:
  the decoded manifest is reused. A newer id listed: it is read. The previous latest gone or
  rewritten with nothing newer (the database was deleted, or deleted and recreated): the latest is
  looked up afresh, as on a first scan: one LIST of the manifests, unless they fill its first page
  (1,000 names); then, like :class:`~slatedb_core.meta.sequenced.SequencedStore`, the
  ``_latest_version`` pointer and a LIST from it. A manifest written between a LIST and the GET
  only makes this scan report the one before it; the next scan lists it.
* The boundaries are read before the manifest, so a boundary is never compared with a manifest
  older than itself; a manifest boundary at the tombstone means the database was destroyed and
  collected (docs/clones-and-destroy.md), whatever manifest a stalled writer may have left there.

A first scan costs about what the old path did: LIST and GET of the manifest, LIST of ``gc/``
and a GET per boundary file there. ``verify`` adds, for the paths named, a check that every SST the
latest manifest references exists: one LIST per SST directory (a HEAD per SST when a directory
holds only one or two of them), never cached, since finding an SST deleted since is the point.

Errors stay with their database, so one bad database cannot hide the others:
``DatabaseNotFound``-like absence is ``"missing"``; a manifest or boundary that does not decode
(``CorruptionError``), a referenced SST that is absent, or a boundary file that this scanner saw
and that is now gone (GC never deletes one) is ``"damaged"``; any other store failure
(network, access denied) is ``"unreachable"``: it is not the database's fault and says nothing of
its state, so the scanner keeps its previous knowledge of that database for the next scan. Only
a bad argument (an invalid path, ``concurrency``) raises.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.errors import (
    BoundaryMissing,
    CorruptionError,
    InvalidArgument,
    ObjectNotFound,
    SlateDBError,
    SstMissing,
    StoreError,
)
from slatedb_core.health import BOUNDARY_NAMESPACES, DatabaseHealth, database_health
from slatedb_core.layout import (
    BOUNDARY_SUFFIX,
    GC_DIR,
    LATEST_POINTER,
    MANIFEST_BOUNDARY,
    MANIFEST_DIR,
    MANIFEST_SUFFIX,
    join,
    sequenced_name,
)
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.codec import decode_stamped_manifest
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.meta.boundary import TOMBSTONE, U64_MAX, parse_boundary
from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    RequestCounters,
    check_store,
    validate_relative_path,
)

__all__ = ["STATES", "DatabaseStatus", "FleetScanner"]

STATES = ("live", "destroyed", "uninitialized", "missing", "damaged", "unreachable")
"""Every :attr:`DatabaseStatus.state`."""

_LIST_PAGE = 1000
"""Keys per LIST response (S3's maximum, and what our obstore adapter asks for)."""
_HEAD_AT_MOST = 2
"""SSTs of one directory checked with HEADs; more are checked with one LIST of the directory."""
_READ_ATTEMPTS = 10
_MANIFEST_NAME = re.compile(r"^(\d{20})\." + re.escape(MANIFEST_SUFFIX) + r"$")

Identity = tuple[str | None, int, float]
"""What a listing says of one object: e-tag, size, last-modified (seconds)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DatabaseStatus:
    """One database as one scan saw it."""

    path: str
    state: str
    """One of :data:`STATES`."""
    health: DatabaseHealth | None
    """The latest manifest's figures; None when there is no readable manifest (missing, a
    manifest that does not decode, unreachable, or destroyed and already collected). A database
    damaged elsewhere (a boundary file, a missing SST) keeps the figures of its manifest."""
    checkpoints: tuple[Checkpoint, ...]
    """Of the latest manifest (empty without one)."""
    pinned_by: Checkpoint | None
    """The unexpired non-writer checkpoint pinning the oldest manifest (what makes
    ``health.manifest_lag``); None when nothing pins."""
    l0_sst_ids: tuple[str, ...]
    """The L0 SSTs' ids (the ULID's text), in manifest order (newest first)."""
    boundaries: dict[str, int | None]
    """Like :func:`slatedb_core.health.read_boundaries`; None where the file does not exist or
    does not decode (then ``error`` names it)."""
    error_kind: str | None
    """The error's class name (``CorruptionError``, ``SstMissing``, ``BoundaryMissing``,
    ``StoreError``...); None when the database is readable and whole."""
    error: str | None
    missing_ssts: tuple[str, ...] | None
    """Only for paths passed in ``verify``: the SST paths (and ``<db>#<sst id>`` views naming
    an unlisted SST) the latest manifest references that are absent. None: not verified."""
    changed: bool
    """The state, the manifest id, a boundary or the error kind differs from this scanner's
    previous scan of the path (True on its first scan of the path)."""
    manifest_id: int | None = None
    """The latest manifest's id (None without a readable one)."""
    scanned_at_s: float = 0.0
    requests: int = 0
    """Store requests this database's scan made."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Boundary:
    identity: Identity
    value: int | None
    error: CorruptionError | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class _Latest:
    """The latest manifest as listed, and what it decoded to."""

    id: int
    identity: Identity
    stored: StoredManifest | None
    error: SlateDBError | None = None


@dataclasses.dataclass(slots=True)
class _Seen:
    """What one scan learnt of one database, for the next scan."""

    latest: _Latest | None
    boundaries: dict[str, _Boundary] = dataclasses.field(default_factory=dict)
    missing_at: tuple[Identity, tuple[str, ...]] | None = None
    """The last verification's missing SSTs and the manifest identity it checked."""
    status: DatabaseStatus | None = None


class _Reads:
    """The few reads a scan makes, each counted (in total and per thread, i.e. per database)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.counters = RequestCounters()
        self._local = threading.local()

    def _count(self, op: str, n: int = 1) -> None:
        self.counters.incr(op, n)
        self._local.n = getattr(self._local, "n", 0) + n

    def start_database(self) -> None:
        self._local.n = 0

    def database_requests(self) -> int:
        n: int = getattr(self._local, "n", 0)
        return n

    def get(self, path: str) -> GetResult:
        self._count("get")
        return self.store.get(path)

    def head(self, path: str) -> ObjectMeta:
        self._count("head")
        return self.store.head(path)

    def list(
        self, prefix: str, start_after: str | None = None, *, limit: int | None = None
    ) -> list[ObjectMeta]:
        """What is listed (the first ``limit`` objects: no further page is fetched), counted as
        one request per page of :data:`_LIST_PAGE` keys."""
        items = list(itertools.islice(self.store.list(prefix, start_after=start_after), limit))
        self._count("list", max(1, -(-len(items) // _LIST_PAGE)))
        return items


def _identity(meta: ObjectMeta) -> Identity:
    return meta.e_tag, meta.size, meta.last_modified.timestamp()


class FleetScanner:
    """Scans many databases concurrently and remembers each one's last state (module docstring).

    One scanner per store and monitoring loop; :meth:`scan` calls are serialised.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        concurrency: int = 64,
        now: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(f"concurrency must be an int >= 1, got {concurrency!r}")
        self._reads = _Reads(check_store(store))
        self._concurrency = concurrency
        self._now = now
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.Lock()
        self._last_requests = 0

    @property
    def last_scan_requests(self) -> int:
        """Store requests the last :meth:`scan` made (a LIST counts once per page of 1,000)."""
        return self._last_requests

    def forget(self, paths: Iterable[str]) -> None:
        """Drop what the scanner remembers of ``paths`` (their next scan is a first scan)."""
        with self._lock:
            for path in paths:
                self._seen.pop(path, None)

    def scan(
        self, paths: Iterable[str], *, verify: Collection[str] = ()
    ) -> dict[str, DatabaseStatus]:
        """The status of each database in ``paths`` (in that order, duplicates once). Raises
        only InvalidArgument for an invalid path; every other error is in its database's status."""
        ordered = list(dict.fromkeys(paths))
        for path in ordered:
            validate_relative_path(path, what="database path")
        verified = set(verify)
        with self._lock:
            before = self._reads.counters.total()
            workers = max(1, min(self._concurrency, len(ordered)))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet-scan") as pool:
                results = list(
                    pool.map(lambda p: self._scan_one(p, self._seen.get(p), p in verified), ordered)
                )
            out: dict[str, DatabaseStatus] = {}
            for path, seen in zip(ordered, results, strict=True):
                self._seen[path] = seen
                assert seen.status is not None
                out[path] = seen.status
            self._last_requests = self._reads.counters.total() - before
        return out

    # ---- one database --------------------------------------------------------------------
    def _scan_one(self, path: str, prev: _Seen | None, verify: bool) -> _Seen:
        self._reads.start_database()
        now_s = self._now()
        try:
            boundaries = self._boundaries(path, prev)
            tombstone = (
                b := boundaries.get(MANIFEST_BOUNDARY)
            ) is not None and b.value == TOMBSTONE
            latest = None if tombstone else self._latest(path, prev)
            missing: tuple[str, ...] | None = None
            if verify and latest is not None and latest.stored is not None:
                missing = _verify(self._reads, path, latest.stored.manifest)
        except StoreError as e:  # not the database's fault: keep what we knew of it
            kept = prev if prev is not None else _Seen(latest=None)
            seen = _Seen(kept.latest, kept.boundaries, kept.missing_at)
            seen.status = _status(path, _Seen(None), [], now_s, prev, self._reads, e)
            return seen
        seen = _Seen(latest, boundaries)
        if latest is not None and missing is not None:
            seen.missing_at = (latest.identity, missing)
        elif latest is not None and prev is not None and prev.missing_at is not None:
            if prev.missing_at[0] == latest.identity:  # the same manifest: still damaged
                seen.missing_at = prev.missing_at
        old = prev.latest if prev is not None else None
        lineage = (  # the same database as before, not one deleted and recreated
            old is not None
            and latest is not None
            and (latest.id > old.id or (latest.id, latest.identity) == (old.id, old.identity))
        )
        vanished = [
            ns
            for ns, b in (prev.boundaries.items() if prev is not None and lineage else ())
            if b.value is not None and ns not in boundaries
        ]
        seen.status = _status(path, seen, vanished, now_s, prev, self._reads, None, missing)
        return seen

    def _boundaries(self, path: str, prev: _Seen | None) -> dict[str, _Boundary]:
        reads = self._reads
        prefix = join(path, GC_DIR) + "/"
        listed = {m.path[len(prefix) :]: m for m in reads.list(join(path, GC_DIR))}
        old = prev.boundaries if prev is not None else {}
        out: dict[str, _Boundary] = {}
        for ns in BOUNDARY_NAMESPACES:
            meta = listed.get(ns + BOUNDARY_SUFFIX)
            if meta is None:
                continue
            identity = _identity(meta)
            cached = old.get(ns)
            if cached is not None and cached.identity == identity:
                out[ns] = cached
                continue
            try:
                data = reads.get(meta.path).data
            except ObjectNotFound:
                continue  # deleted since the LIST (only a database's deletion does that)
            try:
                out[ns] = _Boundary(identity, parse_boundary(data, meta.path))
            except CorruptionError as e:
                out[ns] = _Boundary(identity, None, e)
        return out

    def _latest(self, path: str, prev: _Seen | None) -> _Latest | None:
        """The latest manifest, decoded (or its decode error); None when there is none."""
        mdir = join(path, MANIFEST_DIR)
        cached = prev.latest if prev is not None else None
        if cached is not None:
            listed = self._list_manifests(mdir, cached.id)[0]
            if listed and listed[-1][0] == cached.id and listed[-1][1] == cached.identity:
                return cached  # nothing newer and the same object: reuse its decode
            if listed and listed[-1][0] >= cached.id:
                found = self._read(mdir, *listed[-1])
                if found is not None:
                    return found
        # First scan, or the previous latest is gone: one LIST finds it unless the history fills
        # a page; then the pointer (as SequencedStore does) skips to near the end.
        for _ in range(_READ_ATTEMPTS):
            listed, page_full = self._list_manifests(mdir, None, first_page=True)
            if page_full:
                start = self._pointer(mdir)
                listed = self._list_manifests(mdir, start)[0] if start is not None else []
                listed = listed or self._list_manifests(mdir, None)[0]
            if not listed:
                return None
            found = self._read(mdir, *listed[-1])
            if found is not None:
                return found
        raise StoreError(f"latest manifest under {mdir} kept disappearing while being read")

    def _pointer(self, mdir: str) -> int | None:
        try:
            text = self._reads.get(join(mdir, LATEST_POINTER)).data.strip()
        except ObjectNotFound:
            return None
        if not text.isdigit() or len(text) > 20 or not 1 <= int(text) <= U64_MAX:
            return None  # garbage: advisory only (SequencedStore ignores it too)
        return int(text)

    def _list_manifests(
        self, mdir: str, start: int | None, *, first_page: bool = False
    ) -> tuple[list[tuple[int, Identity]], bool]:
        """(id, identity) of the manifests with id >= ``start`` (all when None), by id; and
        whether only a first, full page was read (``first_page``: more may follow)."""
        after = join(mdir, sequenced_name(start - 1, MANIFEST_SUFFIX)) if start else None
        metas = self._reads.list(mdir, after, limit=_LIST_PAGE if first_page else None)
        out: list[tuple[int, Identity]] = []
        for meta in metas:
            m = _MANIFEST_NAME.match(meta.path[len(mdir) + 1 :])
            if m is not None and meta.path.startswith(mdir + "/") and int(m.group(1)) <= U64_MAX:
                out.append((int(m.group(1)), _identity(meta)))
        out.sort()
        return out, first_page and len(metas) >= _LIST_PAGE

    def _read(self, mdir: str, manifest_id: int, identity: Identity) -> _Latest | None:
        name = join(mdir, sequenced_name(manifest_id, MANIFEST_SUFFIX))
        try:
            data = self._reads.get(name).data
        except ObjectNotFound:
            return None  # superseded and collected since the LIST
        try:
            manifest, stamp = decode_stamped_manifest(data, name=name)
        except SlateDBError as e:  # CorruptionError, or a feature we do not read
            return _Latest(manifest_id, identity, None, e)
        stored = StoredManifest(manifest_id, manifest, stamp.version, stamp.nonce)
        return _Latest(manifest_id, identity, stored)


def _verify(reads: _Reads, path: str, manifest: Manifest) -> tuple[str, ...]:
    """SSTs ``manifest`` references that are absent, and views naming an SST it does not list
    (like :func:`slatedb_core.health.missing_ssts`, but one LIST per directory)."""
    listed = {s.id for s in manifest.ssts}
    dangling = [
        f"{path}#{v.sst_id}"
        for v in (*manifest.l0, *(v for run in manifest.compacted for v in run.views))
        if v.sst_id not in listed
    ]
    by_dir: dict[str, list[str]] = {}
    for sst in manifest.ssts:
        full = resolve_sst_path(path, manifest, sst)
        by_dir.setdefault(full.rsplit("/", 1)[0], []).append(full)
    gone: list[str] = []
    for directory, wanted in by_dir.items():
        if len(wanted) <= _HEAD_AT_MOST:
            gone.extend(p for p in wanted if not _exists(reads, p))
        else:
            present = {m.path for m in reads.list(directory)}
            gone.extend(p for p in wanted if p not in present)
    return (*sorted(gone), *dangling)


def _exists(reads: _Reads, path: str) -> bool:
    try:
        reads.head(path)
    except ObjectNotFound:
        return False
    return True


def _status(
    path: str,
    seen: _Seen,
    vanished: list[str],
    now_s: float,
    prev: _Seen | None,
    reads: _Reads,
    unreachable: StoreError | None,
    missing: tuple[str, ...] | None = None,
) -> DatabaseStatus:
    latest = seen.latest
    stored = latest.stored if latest is not None else None
    manifest = stored.manifest if stored is not None else None
    values = {ns: b.value if (b := seen.boundaries.get(ns)) else None for ns in BOUNDARY_NAMESPACES}
    err: SlateDBError | None = None
    if unreachable is not None:
        state, err = "unreachable", unreachable
    elif values[MANIFEST_BOUNDARY] == TOMBSTONE:
        state = "destroyed"  # destroyed and collected: only the tombstone is left
    elif latest is None:
        state = "missing"
    elif manifest is None:
        state, err = "damaged", latest.error
    elif manifest.destroyed_at_s is not None:
        state = "destroyed"
    else:
        err = _damage(path, seen, vanished)
        state = "damaged" if err else "live" if manifest.initialized else "uninitialized"
    pins = [
        c
        for c in (manifest.checkpoints if manifest is not None else ())
        if c.writer_epoch is None and not c.is_expired(now_s)
    ]
    status = DatabaseStatus(
        path=path,
        state=state,
        health=database_health(stored, path, now_s) if stored is not None else None,
        checkpoints=manifest.checkpoints if manifest is not None else (),
        pinned_by=min(pins, key=lambda c: (c.manifest_id, c.create_time_s)) if pins else None,
        l0_sst_ids=tuple(str(v.sst_id) for v in manifest.l0) if manifest is not None else (),
        boundaries=values,
        error_kind=type(err).__name__ if err is not None else None,
        error=str(err) if err is not None else None,
        missing_ssts=missing,
        changed=True,
        manifest_id=stored.id if stored is not None else None,
        scanned_at_s=now_s,
        requests=reads.database_requests(),
    )
    before = prev.status if prev is not None else None
    if before is not None:
        key = (status.state, status.manifest_id, status.boundaries, status.error_kind)
        old = (before.state, before.manifest_id, before.boundaries, before.error_kind)
        status = dataclasses.replace(status, changed=key != old)
    return status


def _damage(path: str, seen: _Seen, vanished: list[str]) -> SlateDBError | None:
    """Damage outside the manifest: a boundary that does not decode, or is gone, or SSTs the
    last verification of this manifest found absent."""
    for ns in BOUNDARY_NAMESPACES:
        if (b := seen.boundaries.get(ns)) is not None and b.error is not None:
            return b.error
    if vanished:
        names = ", ".join(join(path, GC_DIR, ns + BOUNDARY_SUFFIX) for ns in sorted(vanished))
        return BoundaryMissing(f"boundary files {names} existed and are now missing")
    if seen.missing_at is not None and seen.missing_at[1]:
        gone = seen.missing_at[1]
        return SstMissing(gone[0], f"{len(gone)} referenced SSTs absent: {', '.join(gone[:5])}")
    return None
