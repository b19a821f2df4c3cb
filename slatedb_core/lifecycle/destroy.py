"""Destroying a database (SlateDB RFC 0004, "Deleting a Database").

Soft destroy (the default) marks the database destroyed and leaves the deletion of its objects to
the garbage collector, which waits for ``db_delete_grace`` and for every checkpoint to go:

1. fence any writer: bump ``writer_epoch`` and create a fence (a zero-byte WAL object) at the next free id
   (what a new writer does on open, without replaying anything);
2. in one fenced update, drop the writer's checkpoint(s) and set ``destroyed_at_s``.

A writer opening between 1 and 2 fences us; the procedure then starts again and fences it.

Hard destroy deletes at once. It is the caller's job to make sure no writer is running:

1. refuse with :class:`InvalidDeletion` while a checkpoint other than a writer checkpoint is
   unexpired (someone else relies on it: a reader, a clone's final checkpoint, an operator);
2. set ``destroyed_at_s`` if unset, dropping writer checkpoints in the same update (re-checked on
   every CAS retry);
3. if the database is a clone, delete its final checkpoints in the databases it references;
4. delete the database's objects (:func:`delete_database_objects`).

A destroyed path remembers that it was destroyed. Before any object goes, every boundary of the
database moves to its tombstone value (the sequenced namespaces to 2^64-1, ``compacted`` to
2^48-1) and the ``gc/*.boundary`` files are never deleted (SlateDB RFC 0026: GC never deletes
boundaries). A writer that stalled through the destroy and the deletion then fails the boundary
check of its next WAL SST (``Fenced``) or manifest (``DatabaseDeleted``) instead of writing a
new database into the empty path, and opening the path raises ``DatabaseDeleted``. Reusing the
path for a new database is an operator's decision: delete ``<path>/gc/`` once no process of the old
database can still be running (docs/clones-and-destroy.md).

Only the database's own objects are deleted: the direct children of ``manifest/``, ``wal/``,
``compacted/``, ``compactions/`` and ``gc/``, and ``clone.origin``. A database or table nested
under the path (``<path>/b/...``, even ``<path>/wal/<db>/...``) is another one and is left alone.

Writer checkpoints are not counted in step 1: every database a ``Db`` has written holds one that
never expires, and it pins only this database's own objects, which are about to go.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.checkpoints import without_writer_checkpoints
from slatedb_core.errors import (
    DatabaseDestroyed,
    Fenced,
    InvalidDeletion,
    ObjectNotFound,
    SlateDBError,
)
from slatedb_core.layout import (
    COMPACTIONS_BOUNDARY,
    OWN_DIRS,
    OWN_FILES,
    boundary_path,
    is_boundary,
    join,
    wal_dir,
    wal_store_id_path,
)
from slatedb_core.lifecycle.external import release_external_checkpoints
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.meta.boundary import TOMBSTONE, ULID_MS_TOMBSTONE, BoundaryObject
from slatedb_core.meta.compacted_boundary import compacted_boundary
from slatedb_core.options import check_instance
from slatedb_core.store.objectstore import (
    ObjectMeta,
    ObjectStore,
    check_store,
    validate_relative_path,
)
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import fence_wal, first_open_slot, wal_boundary

log = logging.getLogger(__name__)

Clock = Callable[[], float]

__all__ = [
    "delete_database_objects",
    "destroy",
    "is_own_object",
    "write_tombstone",
]


_SOFT_ATTEMPTS = 10
_DELETE_CONCURRENCY = 16


def destroy(
    path: str,
    store: ObjectStore,
    soft: bool = True,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> None:
    """Destroy the database at ``path`` (see the module docstring).

    Raises DatabaseNotFound if there is none; InvalidDeletion (hard) while a non-writer checkpoint
    is active. Soft-destroying an already destroyed database does nothing; hard-destroying one
    whose objects are already gone deletes any stray object a stalled writer left.

    ``wal_url``: the database's separate WAL store (SlateDB RFC 0009): the soft destroy's fence
    goes there and the hard destroy deletes the WAL objects there too. Without it, a database
    whose manifest shows its WAL elsewhere raises WalStoreMissing and nothing is changed.
    """
    validate_relative_path(path, what="database path")
    check_store(store)
    check_instance(
        "soft", soft, bool
    )  # soft=None or 0 used to mean a hard destroy (RELIABILITY.md)
    ms = ManifestStore(store, path)
    where = WalLocation.open(store, wal_url)
    try:
        if soft:
            _soft(ms, now, where)
        else:
            _hard(ms, now, where)
    except DatabaseDestroyed:
        if not ms.is_tombstone():
            raise
        if not soft:
            delete_database_objects(ms, wal=where)


# ---- soft -----------------------------------------------------------------------------------
def _mark_destroyed(now: Clock) -> Callable[[Manifest], Manifest | None]:
    def change(m: Manifest) -> Manifest | None:
        if m.destroyed_at_s is not None:
            return None
        # the destroy takes both roles for this engine: a SlateDB writer or compactor that opens
        # the database later moves an epoch past these (and drops them), which our GC sees
        return dataclasses.replace(
            without_writer_checkpoints(m),
            destroyed_at_s=int(now()),
            our_writer_epoch=m.writer_epoch,
            our_compactor_epoch=m.compactor_epoch,
        )

    return change


def _soft(ms: ManifestStore, now: Clock, where: WalLocation) -> None:
    wal = WalLog(where, ms.db_path)
    fenced: Fenced | None = None
    for _ in range(_SOFT_ATTEMPTS):
        latest = ms.read_latest()  # DatabaseNotFound
        if latest.manifest.destroyed_at_s is not None:
            return
        wal.list_live(latest.manifest)  # WalStoreMissing: the fence would go to the wrong store
        if not latest.manifest.initialized:
            # No writer can run on an uninitialized database (an unfinished clone): nothing to
            # fence. The change re-checks on conflict; a clone finished meanwhile is retried.
            def uninit(m: Manifest) -> Manifest | None:
                if m.initialized and m.destroyed_at_s is None:
                    raise _Initialized
                return _mark_destroyed(now)(m)

            try:
                ms.update(uninit, base=latest)
                return
            except _Initialized:
                continue
        try:
            fm = FencedManifest.init_writer(ms)
        except DatabaseDestroyed:
            return  # destroyed concurrently: done
        m = fm.stored.manifest
        existing = wal.list_ids(after=m.replay_after_wal_id)
        start = first_open_slot(existing, m.replay_after_wal_id, m.next_wal_sst_id)
        try:
            # as a writer's open does (recovery.fence_older_writers): stop if a newer writer
            # exists, then fence the last writer's whole window of parallel WAL writes
            fm.fence.check(ms.read_latest().manifest)
            fence_wal(wal, fm.epoch, start, m.max_parallel_writes)
            fm.update(_mark_destroyed(now))
            return
        except Fenced as e:
            fenced = e
            log.info("destroy of %r: a writer opened meanwhile; fencing again", ms.db_path)
    if fenced is not None:
        raise fenced
    raise InvalidDeletion(f"database {ms.db_path!r} kept changing state while being destroyed")


class _Initialized(SlateDBError):
    """Internal: the database got initialized while we treated it as unfinished."""


# ---- hard -----------------------------------------------------------------------------------
def _hard(ms: ManifestStore, now: Clock, where: WalLocation) -> None:
    now_s = now()
    # WalStoreMissing before anything changes: its WAL objects would be left behind for ever
    WalLog(where, ms.db_path).list_live(ms.read_latest().manifest)

    def change(m: Manifest) -> Manifest | None:
        active = [c for c in m.checkpoints if c.writer_epoch is None and not c.is_expired(now_s)]
        if active:
            ids = ", ".join(str(c.id) for c in active)
            raise InvalidDeletion(
                f"database {ms.db_path!r} has {len(active)} active checkpoint(s): {ids}"
            )
        return _mark_destroyed(lambda: now_s)(m)

    stored = ms.update(change)  # DatabaseNotFound; CAS conflicts re-run the check
    release_external_checkpoints(ms.store, ms.db_path, stored.manifest)
    delete_database_objects(ms, wal=where)


def is_own_object(db_path: str, path: str) -> bool:
    """True if ``path`` is one of the database's own objects (module docstring): a direct child
    of one of :data:`OWN_DIRS`, and no boundary file (those stay as the tombstone)."""
    prefix = db_path.rstrip("/") + "/"
    if not path.startswith(prefix):
        return False
    parts = path[len(prefix) :].split("/")
    if len(parts) == 1:
        return parts[0] in OWN_FILES
    if len(parts) != 2 or parts[0] not in OWN_DIRS or not parts[1]:
        return False
    return not is_boundary(path[len(prefix) :])


def _boundaries(ms: ManifestStore, wal: BoundaryObject) -> list[tuple[BoundaryObject, int]]:
    store, path = ms.store, ms.db_path
    return [
        (ms.seq.boundary, TOMBSTONE),
        (BoundaryObject(store, boundary_path(path, COMPACTIONS_BOUNDARY)), TOMBSTONE),
        (wal, TOMBSTONE),
        (compacted_boundary(store, path), ULID_MS_TOMBSTONE),
    ]


def write_tombstone(ms: ManifestStore) -> BoundaryObject:
    """Move every boundary of the database to its tombstone value (module docstring). Only for
    a database that is destroyed: afterwards nothing can be committed at this path. Returns the
    WAL boundary, whose lease must run out before a WAL object goes (:func:`_delete_own`)."""
    wal = wal_boundary(WalLog(ms.store, ms.db_path))
    for boundary, value in _boundaries(ms, wal):
        boundary.advance(value)
    return wal


def delete_database_objects(
    ms: ManifestStore, *, concurrency: int = _DELETE_CONCURRENCY, wal: WalLocation | None = None
) -> tuple[int, int]:
    """Write the tombstone, then delete the database's own objects: all but the latest manifest
    first, then that one, so the database reads as destroyed until its last object goes, and
    as destroyed afterwards through the tombstone. Objects of other databases, nested ones
    included, are never touched. Returns (objects, bytes).

    Every database gets the tombstone, an unfinished clone or union too: its creator may be
    stalled between two of its steps and would otherwise finish it in the emptied path.

    If a manifest is committed meanwhile (a clone releasing its checkpoint here), the newest
    manifest is kept for the next round. ``wal``: where the WAL objects are; with a separate WAL
    store (SlateDB RFC 0009) its ``<db>/wal/`` objects go too, with the main store's."""
    wal_boundary_ = write_tombstone(ms)
    separate = None if wal is None else wal.separate
    return _delete_own(ms, concurrency, wal_boundary_, separate)


def _delete_own(
    ms: ManifestStore,
    concurrency: int,
    wal_boundary_: BoundaryObject,
    wal_store: ObjectStore | None = None,
) -> tuple[int, int]:
    store = ms.store
    prefix = ms.db_path.rstrip("/") + "/"
    wal_prefix = wal_dir(ms.db_path).rstrip("/") + "/"
    count = size = 0
    lease_over = False
    for _ in range(100):
        listing = _own_objects(store, ms.db_path)
        # the WAL store's own WAL objects (SlateDB RFC 0009: the same paths in the other store)
        elsewhere = [] if wal_store is None else _own_wal_objects(wal_store, ms.db_path)
        manifests = {i: o for o in listing if (i := ms.seq.parse(o.path)) is not None}
        if not manifests:
            doomed = listing
        else:
            keep = manifests[max(manifests)]
            doomed = [o for o in listing if o.path != keep.path]
            if not doomed and not elsewhere:
                store.delete(keep.path)
                return count + 1, size + keep.size
        if not doomed and not elsewhere:
            return count, size
        paths = [o.path for o in doomed]
        wal = [p for p in paths if p.startswith(wal_prefix)]
        if (wal or elsewhere) and not lease_over:
            # a zombie writer's boundary read from before the tombstone vouches for its WAL
            # creates for the boundary lease: its fence must outlive it (slatedb_core.meta.lease).
            # The rest goes first, so the wait overlaps those deletes.
            _delete_all(store, [p for p in paths if not p.startswith(wal_prefix)], concurrency)
            wal_boundary_.wait_settled(TOMBSTONE)
            lease_over = True
            _delete_all(store, wal, concurrency)
        else:
            _delete_all(store, paths, concurrency)
        if wal_store is not None:
            _delete_all(wal_store, [o.path for o in elsewhere], concurrency)
        count += len(doomed) + len(elsewhere)
        size += sum(o.size for o in doomed) + sum(o.size for o in elsewhere)
        if not manifests:
            return count, size
    raise InvalidDeletion(f"objects kept appearing under {prefix!r} while deleting it")


def _delete_all(store: ObjectStore, paths: list[str], concurrency: int) -> None:
    if len(paths) <= 1 or concurrency <= 1:
        for p in paths:
            store.delete(p)
    else:
        with ThreadPoolExecutor(min(concurrency, len(paths))) as pool:
            list(pool.map(store.delete, paths))


def _own_wal_objects(wal_store: ObjectStore, db_path: str) -> list[ObjectMeta]:
    """The database's own objects in its separate WAL store: its WAL SSTs, and the store's id
    (``_wal_store_id``, :mod:`slatedb_core.wal.location`), which a new database at the same path
    would otherwise adopt. The id goes last (after every WAL SST of the round)."""
    own = [o for o in wal_store.list(wal_dir(db_path)) if is_own_object(db_path, o.path)]
    if own:
        return own
    try:
        return [wal_store.head(wal_store_id_path(db_path))]
    except ObjectNotFound:
        return []


def _own_objects(store: ObjectStore, db_path: str) -> list[ObjectMeta]:
    """The database's own objects (:func:`is_own_object`)."""
    out: list[ObjectMeta] = []
    for sub in sorted(OWN_DIRS):
        out.extend(o for o in store.list(join(db_path, sub)) if is_own_object(db_path, o.path))
    for name in sorted(OWN_FILES):
        try:
            out.append(store.head(join(db_path, name)))
        except ObjectNotFound:
            pass
    return out
