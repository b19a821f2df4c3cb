"""Clones: a new database that starts as a shallow copy of a checkpoint of another (SlateDB RFC 0004
"Clones", "SST Path Resolution"). Its manifest references the parent's SSTs through
``external_dbs``; only the parent's WAL tail is copied. :func:`create_clone` runs SlateDB RFC 0004's steps,
each of which can be interrupted and redone::

    1-5  read the clone's manifest (maybe left by a crashed attempt) and the parent's (which must
         be initialized, not destroyed). An existing M_c must be this clone: of this parent (and
         checkpoint, and within the projection) by its origin record ``<clone>/clone.origin``
         (:mod:`slatedb_core.lifecycle.origin`; written right after M_c, it outlives GC detaching the
         parent); initialized -> check its final checkpoints exist, done; else go to 9
    6-8  source checkpoint (the given one, or an ephemeral one of the latest, 5 min); M_c from
         the manifest it pins (projected if asked), initialized=False, created if absent
         (losing that race -> back to 1, finishing the winner's M_c)
    9    in every external db, the final checkpoint, from the entry's source checkpoint
    10   copy the parent's WAL SSTs (replay_after_wal_id, wal_id_last_seen] into the clone
    11   set initialized=True

``initialized`` is written last, so a crash anywhere leaves either no clone or one that refuses
writers (``DatabaseNotInitialized``) until a re-run completes it.

The clone's WAL is ``(replay_after_wal_id, wal_id_last_seen]`` of the pinned manifest, what a
checkpoint-mode reader serves, less trailing WAL SSTs with nothing for the clone
(:func:`wal_end`). The ephemeral checkpoint is made as every checkpoint of the latest state is
(:func:`~slatedb_core.checkpoints.covered_wal`, shared with ``admin.create_checkpoint`` and
``Db.create_checkpoint``): the update that adds it sets ``wal_id_last_seen`` to the last WAL SST
with rows in the unbroken run listed just before (a hole no writer can have left raises
``WalSstMissing``; trailing fences are not named). The clone then holds every write durable when
it started, and GC keeps those WAL SSTs while the checkpoint lives (SlateDB RFC 0004's
``referenced_wal``). A given checkpoint is taken as it is: it holds the WAL it named when it was
made (all of it, for one made through ``covered_wal``; a checkpoint made otherwise, e.g. by
SlateDB's ``create_detached_checkpoint``, may name less).

The clone's ``next_wal_sst_id`` follows the WAL it copied (ca19948), so its own writer's WAL
continues that run with no gap, and readers and checkpoints of the clone see its writes before
its first L0 flush. (A clone made before ca19948 kept its parent's ``next_wal_sst_id``: a gap
``damaged_holes`` still accepts, but that readers' unbroken runs stop at.)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from ulid import ULID

from slatedb_core.checkpoints import Clock, checkpoint_change, covered_wal, delete_change
from slatedb_core.errors import (
    CheckpointNotFound,
    CloneConflict,
    CloneIncomplete,
    CorruptionError,
    DatabaseDestroyed,
    DatabaseNotInitialized,
    InvalidArgument,
    ManifestVersionExists,
    ObjectNotFound,
    SlateDBError,
    SourceCheckpointLost,
)
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone_wal import copy_wal, last_with_data, start_over
from slatedb_core.lifecycle.external import Latest, release_external_checkpoints, same_format_store
from slatedb_core.lifecycle.origin import clone_mismatch, clone_origin_of, establish
from slatedb_core.manifest.codec import FORMAT_VERSION, decode_stamped_manifest
from slatedb_core.manifest.model import ExternalDb, Manifest
from slatedb_core.manifest.projection import project_manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import CheckpointOptions
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import WalLog

log = logging.getLogger(__name__)

EPHEMERAL_LIFETIME = timedelta(minutes=5)
"""How long an ephemeral source checkpoint lives: the window for re-running an interrupted
clone or union before its source is gone."""

__all__ = ["EPHEMERAL_LIFETIME", "CloneConflict", "CloneIncomplete", "SourceCheckpointLost"]
__all__ += ["create_clone", "create_clone_stored"]


# ---- shared with union.py --------------------------------------------------------------------
def check_paths(dest: str, sources: list[str]) -> None:
    """A destination inside a source (or the reverse) would put one database's objects under the
    other's prefix, where its listing and GC would treat them as its own."""
    validate_relative_path(dest, what="destination path")
    for src in sources:
        validate_relative_path(src, what="source path")
        a, b = dest.rstrip("/") + "/", src.rstrip("/") + "/"
        if a.startswith(b) or b.startswith(a):
            raise InvalidArgument(f"{dest!r} and source {src!r} must not contain one another")


def check_live(path: str, m: Manifest) -> None:
    if m.destroyed_at_s is not None:
        raise DatabaseDestroyed(f"source database {path!r} was destroyed at {m.destroyed_at_s}")
    if not m.initialized:
        raise DatabaseNotInitialized(f"source database {path!r} is not initialized")


"""A database's latest manifest, with a store that commits in that manifest's format."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A source database pinned by a checkpoint: what a clone or union is built from."""

    path: str
    checkpoint_id: uuid.UUID
    ephemeral: bool
    manifest_id: int
    manifest: Manifest
    format_version: int
    latest: Latest


def _decode(ms: ManifestStore, object_id: int, data: bytes) -> tuple[Manifest, int]:
    """The manifest and the format version it was written in."""
    manifest, stamp = decode_stamped_manifest(data, name=ms.seq.path(object_id))
    return manifest, stamp.version


def _ephemeral(
    ms: ManifestStore,
    latest: StoredManifest,
    dest: str,
    now: float,
    wal_at: WalLocation | None = None,
) -> tuple[uuid.UUID, StoredManifest]:
    """An ephemeral checkpoint of the latest manifest that holds the WAL SSTs durable now, named
    in ``wal_id_last_seen`` by the same update (:func:`~slatedb_core.checkpoints.covered_wal`, as
    every checkpoint of the latest state; see the module docstring)."""
    options = CheckpointOptions(lifetime=EPHEMERAL_LIFETIME, name=f"clone-source:{dest}")
    cid = uuid.uuid4()
    cover = functools.partial(covered_wal, wal_at or ms.store, ms.db_path)
    return cid, ms.update_at(checkpoint_change(options, now, cid, covers_wal=cover), base=latest)


def _lost(path: str, cid: uuid.UUID, why: str) -> SourceCheckpointLost:
    return SourceCheckpointLost(
        cid,
        f"source checkpoint {cid} of {path!r} {why}; retry without it (an ephemeral checkpoint of "
        "the latest state is taken) or with a live checkpoint",
    )


def take_snapshot(
    source: Latest,
    checkpoint: uuid.UUID | None,
    dest: str,
    now: float,
    wal_at: WalLocation | None = None,
) -> Snapshot:
    """Steps 6-7 for one source (``source``: its latest manifest): its checkpoint (created if
    None) and the manifest it pins, with that manifest's format version. ``wal_at``: where the
    source's WAL is (a separate WAL store, SlateDB RFC 0009): the checkpoint covers the WAL
    durable there."""
    ms, latest = source
    path = ms.db_path
    check_live(path, latest.manifest)
    cid = checkpoint
    if cid is None:
        cid, latest = _ephemeral(ms, latest, dest, now, wal_at)
    cp = latest.manifest.checkpoint(cid)
    if cp is None:
        raise _lost(path, cid, "does not exist")
    if cp.is_expired(now):
        raise _lost(path, cid, f"expired at {cp.expire_time_s}")
    if cp.manifest_id == latest.id:  # our ephemeral checkpoint pins what we just wrote
        pinned = latest.manifest
        version = latest.version or FORMAT_VERSION
    else:
        try:
            pinned, version = _decode(ms, cp.manifest_id, ms.seq.read(cp.manifest_id))
        except ObjectNotFound:
            raise _lost(path, cid, f"pins manifest {cp.manifest_id}, which is gone") from None
    if not pinned.initialized:
        raise DatabaseNotInitialized(f"checkpoint {cid} of {path!r} pins an uninitialized state")
    return Snapshot(path, cid, checkpoint is None, cp.manifest_id, pinned, version, (ms, latest))


def drop_ephemeral(store: ObjectStore, snap: Snapshot) -> None:
    """Best effort: an unused ephemeral checkpoint would otherwise pin the source for 5 minutes."""
    if not snap.ephemeral:
        return
    try:
        ms, latest = same_format_store(store, snap.path)
        ms.update(delete_change(snap.checkpoint_id), base=latest)
    except SlateDBError as e:
        log.info(
            "left ephemeral checkpoint %s of %r to expire: %s", snap.checkpoint_id, snap.path, e
        )


class Fallbacks:
    """The latest manifests of the sources, read once and shared by step 9, which uses them as
    commit bases and for fallback source checkpoints: the final checkpoints the sources
    themselves hold for an entry. A nested clone inherits entries whose source checkpoint may
    have been an ephemeral one long expired; the parent's own final checkpoint pins the same
    manifest and lives as long as the parent references it."""

    def __init__(self, store: ObjectStore, paths: list[str], known: dict[str, Latest]) -> None:
        self.store = store
        self.paths = paths
        self.known = dict(known)

    def candidates(self, entry: ExternalDb) -> list[uuid.UUID]:
        out = []
        for path in self.paths:
            if path not in self.known:
                self.known[path] = same_format_store(self.store, path)
            for e in self.known[path][1].manifest.external_dbs:
                same = (e.path, e.source_checkpoint_id) == (entry.path, entry.source_checkpoint_id)
                if same and e.final_checkpoint_id is not None:
                    out.append(e.final_checkpoint_id)
        return out


def _commit_final(base: Latest, final: uuid.UUID, source: uuid.UUID, dest: str, now: float) -> bool:
    options = CheckpointOptions(lifetime=None, source=source, name=f"clone:{dest}")
    try:
        change = checkpoint_change(options, now, final, derived_on_destroyed=True)
        base[0].update_at(change, base=base[1])
        return True
    except CheckpointNotFound:
        return False


def ensure_final_checkpoints(
    store: ObjectStore, dest: str, m: Manifest, fallbacks: Fallbacks, now: float
) -> None:
    """Step 9: a never-expiring checkpoint in every external db, pinning what the entry's source
    checkpoint pins; creating one that exists is a no-op (its id is fixed in M_c)."""
    for entry in m.external_dbs:
        final = entry.final_checkpoint_id
        if final is None:
            raise CorruptionError(dest, f"external db {entry.path!r} has no final checkpoint id")
        base = fallbacks.known.get(entry.path) or same_format_store(store, entry.path)
        if base[1].manifest.checkpoint(final) is not None:
            continue
        if _commit_final(base, final, entry.source_checkpoint_id, dest, now):
            continue
        alts = fallbacks.candidates(entry)
        if any(_commit_final(base, final, alt, dest, now) for alt in alts):
            continue
        raise _lost(
            entry.path,
            entry.source_checkpoint_id,
            f"is gone, so {dest!r} cannot take its final checkpoint there; {start_over(dest)}",
        )


def verify_final_checkpoints(store: ObjectStore, dest: str, m: Manifest) -> None:
    """Step 5 for an initialized clone. An entry without SSTs may already have lost its
    checkpoint to GC detaching it (the checkpoint goes first, then the entry)."""
    for entry in m.external_dbs:
        final = entry.final_checkpoint_id
        ok = final is not None and (
            ManifestStore(store, entry.path).read_latest().manifest.checkpoint(final) is not None
        )
        if not ok and (entry.sst_ids or final is None):
            raise CloneIncomplete(
                f"{dest!r} is initialized but its final checkpoint {final} in {entry.path!r} "
                "is missing"
            )


def mark_initialized(ms: ManifestStore) -> StoredManifest:
    """Step 11; a retry that finds it already set commits nothing. DatabaseDestroyed if the
    unfinished database was destroyed meanwhile (a destroyed database never comes back)."""

    def change(m: Manifest) -> Manifest:
        if m.destroyed_at_s is not None:
            raise DatabaseDestroyed(f"{ms.db_path!r} was destroyed before it was finished")
        return m if m.initialized else dataclasses.replace(m, initialized=True)

    return ms.update(change)


def finish(
    store: ObjectStore,
    dest: str,
    ms: ManifestStore,
    m: Manifest,
    fallbacks: Fallbacks,
    now: float,
    copy: Callable[[], None] | None = None,
) -> StoredManifest:
    """Steps 9-11 of an unfinished clone or union ``m`` at ``dest``: final checkpoints, the WAL
    copy (``copy``), initialized. If ``dest`` is destroyed meanwhile (its creator stalled while
    an operator destroyed it), the final checkpoints this run may have committed in the sources
    after the destroy released them are released again, so none pins a source for ever."""
    try:
        latest = ms.try_read_latest()
        if latest is None:
            ms.raise_missing()
        if latest.manifest.destroyed_at_s is not None:
            raise DatabaseDestroyed(f"{dest!r} was destroyed before it was finished")
        ensure_final_checkpoints(store, dest, m, fallbacks, now)
        if copy is not None:
            copy()
        return mark_initialized(ms)
    except DatabaseDestroyed:
        release_external_checkpoints(store, dest, m)
        raise


# ---- clone-only steps ------------------------------------------------------------------------
def _owned(m: Manifest) -> tuple[ULID, ...]:
    """Ids of the SSTs referenced by ``m`` that live under its own path (not resolved through
    any external db, the same test as ``dbstate.resolve_sst_path``)."""
    referenced = {v.sst_id for v in m.l0} | {v.sst_id for r in m.compacted for v in r.views}
    external = {i for e in m.external_dbs for i in e.sst_ids}
    out = []
    for s in m.ssts:
        physical = s.original_id or s.id
        if s.id in referenced and physical not in external and s.id not in external:
            out.append(s.id)
    return tuple(out)


def clone_manifest(
    snap: Snapshot, projection: KeyRange | None, wal_end: int, *, separate_wal_store: bool = False
) -> Manifest:
    """Step 7. All entries share one new final checkpoint id as the seed has it, except that an
    entry whose path already used it gets its own: two checkpoints with one id cannot coexist in
    one database (several entries per path arise after unions of different checkpoints).
    ``separate_wal_store``: the clone's WAL (the copied tail, then its writers') lives in the
    parent's WAL store (SlateDB RFC 0009), as ``Manifest.separate_wal_store`` records."""
    pinned = snap.manifest
    if projection is not None and KeyRange.of(pinned.key_range).intersect(projection).is_empty():
        raise InvalidArgument(f"projection {projection} holds none of {snap.path!r}'s keys")
    base = pinned if projection is None else project_manifest(pinned, projection)
    final = uuid.uuid4()
    used: set[str] = set()
    entries = []
    for e in (*base.external_dbs, ExternalDb(snap.path, snap.checkpoint_id, None, _owned(base))):
        fid = final if e.path not in used else uuid.uuid4()
        used.add(e.path)
        entries.append(dataclasses.replace(e, final_checkpoint_id=fid))
    return dataclasses.replace(
        base,
        writer_epoch=pinned.writer_epoch + 1,
        compactor_epoch=pinned.compactor_epoch,
        # nothing of SlateDB's runs in a new clone (our GC's conservative rule is not needed)
        our_writer_epoch=pinned.writer_epoch + 1,
        our_compactor_epoch=pinned.compactor_epoch,
        initialized=False,
        destroyed_at_s=None,
        external_dbs=tuple(entries),
        replay_after_wal_id=pinned.replay_after_wal_id,
        wal_id_last_seen=wal_end,
        # the clone's WAL is what is copied, (replay_after, wal_end]: its writers continue right
        # after it, so no gap is left that readers' contiguous replay would stop at for good
        next_wal_sst_id=max(wal_end, pinned.replay_after_wal_id) + 1,
        checkpoints=(),
        # the exactly-once records go with the data: a record holds for every key of its
        # database, so for any part of them too; a projection (a split) keeps its source's as
        # they are, and a re-run of a batch the source had stays a no-op. (A database covering
        # several sources' ranges records less: manifest.model.combined_range_transactions.)
        transactions=pinned.transactions,
        separate_wal_store=separate_wal_store,
        wal_store_id=None,  # the parent's WAL store id names the parent's path, not ours
    )


def wal_end(
    store: ObjectStore,
    snap: Snapshot,
    projection: KeyRange | None,
    wal_at: WalLocation | None = None,
) -> int:
    """The clone's ``wal_id_last_seen``: the pinned one, less trailing WAL SSTs with nothing for
    the clone (fences, or only keys outside its projection), so that a clone with no WAL data of
    its own counts as fully flushed and can be a union source without ever being opened."""
    m = snap.manifest
    rng = KeyRange.of(m.key_range).intersect(projection or KeyRange())
    wal = WalLog(wal_at or store, snap.path)  # the source's WAL store, if it has one
    try:
        ids = range(m.replay_after_wal_id + 1, m.wal_id_last_seen + 1)
        return last_with_data(wal, ids, rng) or m.replay_after_wal_id
    except ObjectNotFound as e:
        raise _lost(snap.path, snap.checkpoint_id, f"needs {e.path}, which is gone") from None


def _check_existing(
    cms: ManifestStore,
    m: Manifest,
    parent: str,
    checkpoint: uuid.UUID | None,
    projection: KeyRange | None,
) -> None:
    """Steps 3-4 for an existing M_c, by its origin record (slatedb_core.lifecycle.origin), which
    outlives GC detaching the parent and collecting manifest 1 (RELIABILITY.md, review findings 9, 13)."""
    why = establish(
        cms,
        m,
        lambda first: clone_origin_of(first, first=True),
        lambda latest: clone_origin_of(latest, first=False),
        lambda o: clone_mismatch(o, parent, checkpoint, projection),
    )
    if why is not None:
        what = parent if checkpoint is None else f"{parent} at checkpoint {checkpoint}"
        raise CloneConflict(
            f"a database exists at {cms.db_path!r} and is not a clone of {what}: {why}"
        )


def create_clone_stored(
    clone_path: str,
    parent_path: str,
    store: ObjectStore,
    parent_checkpoint: uuid.UUID | None = None,
    projection: KeyRange | None = None,
    *,
    now: Clock = time.time,
    parent_wal_url: str | None = None,
) -> StoredManifest:
    """:func:`create_clone`, returning the committed manifest with its id."""
    check_paths(clone_path, [parent_path])
    check_store(store)
    if parent_checkpoint is not None and not isinstance(parent_checkpoint, uuid.UUID):
        raise InvalidArgument("parent_checkpoint must be a uuid.UUID")
    if projection is not None and not isinstance(projection, KeyRange):
        raise InvalidArgument("projection must be a KeyRange")
    cms = ManifestStore(store, clone_path)
    parent_wal = WalLocation.open(store, parent_wal_url)
    for _ in range(5):
        stored = cms.try_read_latest()
        parent = same_format_store(store, parent_path)
        check_live(parent_path, parent[1].manifest)
        if stored is None:
            # WalStoreMissing, before anything is written: the parent's WAL is not where we look
            # (SlateDB RFC 0009), and the clone would miss the part of it it copies
            WalLog(parent_wal, parent_path).list_live(parent[1].manifest)
            snap = take_snapshot(parent, parent_checkpoint, clone_path, now(), parent_wal)
            try:
                end = wal_end(store, snap, projection, parent_wal)
                initial = clone_manifest(
                    snap, projection, end, separate_wal_store=parent_wal.separate is not None
                )
            except BaseException:
                drop_ephemeral(store, snap)
                raise
            try:
                stored = cms.create_initial(initial)
            except ManifestVersionExists:
                drop_ephemeral(store, snap)  # another run won; finish its clone instead
                continue
            parent = snap.latest
        m = stored.manifest
        _check_existing(cms, m, parent_path, parent_checkpoint, projection)
        if m.initialized:
            verify_final_checkpoints(store, clone_path, m)
            return stored
        fallbacks = Fallbacks(store, [parent_path], {parent_path: parent})
        return finish(
            store,
            clone_path,
            cms,
            m,
            fallbacks,
            now(),
            functools.partial(copy_wal, store, parent_path, clone_path, m, parent_wal),
        )
    raise CloneConflict(f"kept losing the race to create the clone at {clone_path!r}")


def create_clone(
    clone_path: str,
    parent_path: str,
    store: ObjectStore,
    parent_checkpoint: uuid.UUID | None = None,
    projection: KeyRange | None = None,
    *,
    now: Clock = time.time,
    parent_wal_url: str | None = None,
) -> Manifest:
    """Create (or finish creating) the clone at ``clone_path`` of ``parent_path`` as of
    ``parent_checkpoint`` (default: an ephemeral checkpoint of the latest state), restricted to
    ``projection`` when given. Safe to re-run after a crash at any point; a finished clone is
    returned as is.

    ``parent_wal_url``: the parent's separate WAL store (SlateDB RFC 0009), where the WAL tail
    the clone copies is read; the clone keeps its copy in the main store. Without it, a parent
    whose WAL is evidently elsewhere raises WalStoreMissing before anything is written.

    Raises DatabaseNotFound / DatabaseNotInitialized / DatabaseDestroyed for an unusable parent,
    SourceCheckpointLost when the source checkpoint is missing or expired, CloneConflict when
    ``clone_path`` holds something else, CloneIncomplete when a finished clone lost a final
    checkpoint.
    """
    return create_clone_stored(
        clone_path,
        parent_path,
        store,
        parent_checkpoint,
        projection,
        now=now,
        parent_wal_url=parent_wal_url,
    ).manifest
