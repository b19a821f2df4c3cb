"""The fleet scanner: concurrent, remembering reads of many databases (see
:mod:`slatedb_core.fleet`)."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.errors import (
    CorruptionError,
    InvalidArgument,
    ObjectNotFound,
    SlateDBError,
    StoreError,
)
from slatedb_core.fleet.status import Boundary, DatabaseStatus, Identity, Latest, Seen, status_of
from slatedb_core.health import BOUNDARY_NAMESPACES
from slatedb_core.layout import (
    BOUNDARY_SUFFIX,
    GC_DIR,
    LATEST_POINTER,
    MANIFEST_BOUNDARY,
    MANIFEST_DIR,
    MANIFEST_SUFFIX,
    WAL_BOUNDARY,
    join,
    sequenced_name,
)
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.codec import decode_stamped_manifest
from slatedb_core.manifest.model import Manifest
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

__all__ = ["FleetScanner"]

Listing = tuple[list[ObjectMeta], list[tuple[int, Identity]]]
"""The ``gc/`` files and the manifests (id, identity) of one LIST."""

_LIST_PAGE = 1000
"""Keys per LIST response (S3's maximum, and what our obstore adapter asks for)."""
_BEFORE_GC = "gb~"
"""The one listing starts after ``<db>/gb~``: past ``compacted/`` and ``compactions/``, before
``gc/``. Not after ``<db>/gc``, which S3 orders before every ``<db>/gc/`` key, but SeaweedFS
compares start-after per path component, and there it skips the ``gc`` directory itself."""
_ONE_LIST_KEYS = 200
"""Below this many expected manifests + WAL SSTs, ``gc/`` and ``manifest/`` are read with one
LIST (see :func:`_short_listing`)."""
_HEAD_AT_MOST = 2
"""SSTs of one directory checked with HEADs; more are checked with one LIST of the directory."""
_READ_ATTEMPTS = 10
_MANIFEST_NAME = re.compile(r"^(\d{20})\." + re.escape(MANIFEST_SUFFIX) + r"$")


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
        self._seen: dict[str, Seen] = {}
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
    def _scan_one(self, path: str, prev: Seen | None, verify: bool) -> Seen:
        self._reads.start_database()
        now_s = self._now()
        try:
            listing = self._one_listing(path, prev)
            boundaries, fetched = self._boundaries(path, prev, listing[0] if listing else None)
            if listing is not None and fetched and listing[1]:
                # A boundary read after the listing may be a GC pass's that came after a newer
                # manifest: list the manifests again, so the latest is found after the boundaries.
                again = self._list_manifests(join(path, MANIFEST_DIR), listing[1][-1][0])[0]
                listing = (listing[0], again) if again else None
            tombstone = (
                b := boundaries.get(MANIFEST_BOUNDARY)
            ) is not None and b.value == TOMBSTONE
            latest = None if tombstone else self._latest(path, prev, listing)
            missing: tuple[str, ...] | None = None
            if verify and latest is not None and latest.stored is not None:
                missing = _verify(self._reads, path, latest.stored.manifest)
        except StoreError as e:  # not the database's fault: keep what we knew of it
            kept = prev if prev is not None else Seen(latest=None)
            seen = Seen(kept.latest, kept.boundaries, kept.missing_at)
            seen.status = status_of(
                path, Seen(None), [], now_s, prev, self._reads.database_requests(), e
            )
            return seen
        seen = Seen(latest, boundaries)
        if latest is not None and missing is not None:
            seen.missing_at = (latest.identity, missing)
        elif latest is not None and prev is not None and prev.missing_at is not None:
            if prev.missing_at[0] == latest.identity:  # the same manifest: still damaged
                seen.missing_at = prev.missing_at
            elif latest.stored is not None:  # a newer one: still damaged where it still refers
                refs = _references(path, latest.stored.manifest)
                still = tuple(p for p in prev.missing_at[1] if p in refs)
                seen.missing_at = (latest.identity, still) if still else None
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
        seen.status = status_of(
            path, seen, vanished, now_s, prev, self._reads.database_requests(), None, missing
        )
        return seen

    def _one_listing(self, path: str, prev: Seen | None) -> Listing | None:
        """The ``gc/`` files and every manifest (id, identity) from one LIST of ``<db>/``
        starting just before ``<db>/gc/`` (:data:`_BEFORE_GC`), when
        :func:`_short_listing` expects its first page to reach past the manifests. None when not
        tried, or when the page ended before the manifests did."""
        if not _short_listing(prev):
            return None
        mdir = join(path, MANIFEST_DIR)
        metas = self._reads.list(path, join(path, _BEFORE_GC), limit=_LIST_PAGE)
        if len(metas) >= _LIST_PAGE and not metas[-1].path > mdir + "/\U0010ffff":
            return None  # more manifests may follow on the next page
        gc_dir = join(path, GC_DIR) + "/"
        return [m for m in metas if m.path.startswith(gc_dir)], _manifest_ids(mdir, metas)

    def _boundaries(
        self, path: str, prev: Seen | None, listed_gc: list[ObjectMeta] | None
    ) -> tuple[dict[str, Boundary], bool]:
        """The boundaries, and whether one was read (GET) rather than taken from the cache."""
        reads = self._reads
        prefix = join(path, GC_DIR) + "/"
        if listed_gc is None:
            listed_gc = reads.list(join(path, GC_DIR))
        listed = {m.path[len(prefix) :]: m for m in listed_gc}
        old = prev.boundaries if prev is not None else {}
        out: dict[str, Boundary] = {}
        fetched = False
        for ns in BOUNDARY_NAMESPACES:
            meta = listed.get(ns + BOUNDARY_SUFFIX)
            if meta is None:
                continue
            identity = _identity(meta)
            cached = old.get(ns)
            if cached is not None and cached.identity == identity:
                out[ns] = cached
                continue
            fetched = True
            try:
                data = reads.get(meta.path).data
            except ObjectNotFound:
                continue  # deleted since the LIST (only a database's deletion does that)
            try:
                out[ns] = Boundary(identity, parse_boundary(data, meta.path))
            except CorruptionError as e:
                out[ns] = Boundary(identity, None, e)
        return out, fetched

    def _latest(self, path: str, prev: Seen | None, listing: Listing | None) -> Latest | None:
        """The latest manifest, decoded (or its decode error); None when there is none."""
        mdir = join(path, MANIFEST_DIR)
        cached = prev.latest if prev is not None else None
        if listing is not None:  # every manifest was listed
            if not listing[1]:
                return None
            if cached is not None and listing[1][-1] == (cached.id, cached.identity):
                return cached  # the same latest object: reuse its decode
            found = self._read(mdir, *listing[1][-1])
            if found is not None:
                return found
        elif cached is not None:
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
        return _manifest_ids(mdir, metas), first_page and len(metas) >= _LIST_PAGE

    def _read(self, mdir: str, manifest_id: int, identity: Identity) -> Latest | None:
        name = join(mdir, sequenced_name(manifest_id, MANIFEST_SUFFIX))
        try:
            data = self._reads.get(name).data
        except ObjectNotFound:
            return None  # superseded and collected since the LIST
        try:
            manifest, stamp = decode_stamped_manifest(data, name=name)
        except SlateDBError as e:  # CorruptionError, or a feature we do not read
            return Latest(manifest_id, identity, None, e)
        stored = StoredManifest(manifest_id, manifest, stamp.version, stamp.nonce)
        return Latest(manifest_id, identity, stored)


def _manifest_ids(mdir: str, metas: list[ObjectMeta]) -> list[tuple[int, Identity]]:
    """(id, identity) of the manifests of ``mdir`` among ``metas``, by id."""
    out: list[tuple[int, Identity]] = []
    for meta in metas:
        m = _MANIFEST_NAME.match(meta.path[len(mdir) + 1 :])
        if m is not None and meta.path.startswith(mdir + "/") and int(m.group(1)) <= U64_MAX:
            out.append((int(m.group(1)), _identity(meta)))
    out.sort()
    return out


def _short_listing(prev: Seen | None) -> bool:
    """Whether one LIST from ``<db>/gc`` likely holds all of ``gc/`` and ``manifest/`` in its
    first page: yes when nothing is known of the database; else when the manifests and WAL SSTs
    not yet behind their GC boundaries at the last scan were few (a busy database that keeps
    thousands of recent manifests is listed per directory instead)."""
    status = prev.status if prev is not None else None
    if status is None or status.health is None:
        return True
    h, b = status.health, status.boundaries
    manifests = h.manifest_id - (b.get(MANIFEST_BOUNDARY) or 0)
    wals = h.wal_id_last_seen - (b.get(WAL_BOUNDARY) or 0)
    return manifests + max(0, wals) < _ONE_LIST_KEYS


def _dangling(path: str, manifest: Manifest) -> list[str]:
    """``<db>#<sst id>`` for each view naming an SST the manifest does not list."""
    listed = {s.id for s in manifest.ssts}
    return [
        f"{path}#{v.sst_id}"
        for v in (*manifest.l0, *(v for run in manifest.compacted for v in run.views))
        if v.sst_id not in listed
    ]


def _references(path: str, manifest: Manifest) -> set[str]:
    """Everything :func:`_verify` could report missing for ``manifest`` (no request)."""
    paths = {resolve_sst_path(path, manifest, sst) for sst in manifest.ssts}
    return paths | set(_dangling(path, manifest))


def _verify(reads: _Reads, path: str, manifest: Manifest) -> tuple[str, ...]:
    """SSTs ``manifest`` references that are absent, and views naming an SST it does not list
    (like :func:`slatedb_core.health.missing_ssts`, but one LIST per directory)."""
    dangling = _dangling(path, manifest)
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
