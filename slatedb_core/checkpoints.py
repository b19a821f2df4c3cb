"""Every checkpoint edit of a manifest, in one place (SlateDB RFC 0004, "Public API", "Creating a
Checkpoint", "Writers", "Readers"; docs/manifest-and-fencing.md):

* user checkpoints: :func:`checkpoint_change`, :func:`refresh_change`, :func:`delete_change`,
  :func:`drop_named_change` (a table ingest's checkpoint, once its done marker is written), and
  the functions the admin API and the ``create/refresh/delete/list-checkpoints`` CLI commands run
  on a database that is not open here (:func:`create_checkpoint` and the others below); the open
  ``Db`` uses :func:`checkpoint_change` directly, so that the rules live in one place whether or
  not the checkpoint is committed together with other manifest edits;
* the writer's checkpoint, moved by every commit of the writer (:func:`writer_checkpoint`) and
  dropped when the database is destroyed (:func:`without_writer_checkpoints`);
* a MANAGED reader's pins: :func:`pin_change`, :func:`extend_pins_change`,
  :func:`drop_pins_change` (and :func:`check_live`, what a pin requires of the database);
* the garbage collector's removal of expired checkpoints (:func:`expire_change`);
* the WAL a checkpoint of the latest state covers (:func:`covered_wal`, SlateDB RFC 0004's
  ``referenced_wal``) and the unbroken WAL run a reader may replay (:func:`checked_wal_run`).

Every change is a pure function of the manifest it is applied to, because the manifest store
re-applies it to the newer manifest after losing a commit race: a checkpoint of the latest
version then pins the id it is finally committed as, never the one first attempted.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta

from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotInitialized,
    InvalidArgument,
)
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import (
    CheckpointOptions,
    check_instance,
    check_optional,
    check_optional_duration,
)
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path
from slatedb_core.wal.location import WalLocation, check_wal_present
from slatedb_core.wal.log import WalLog
from slatedb_core.wal.writer import damaged_holes, missing_error

Clock = Callable[[], float]
"""Wall-clock seconds since the epoch; injectable so tests can move time."""

__all__ = [
    "CheckpointCreateResult",
    "ExpireChange",
    "add_checkpoint",
    "check_live",
    "check_not_destroyed",
    "checked_wal_run",
    "checkpoint_change",
    "covered_wal",
    "create_checkpoint",
    "delete_change",
    "delete_checkpoint",
    "drop_named_change",
    "drop_named_checkpoints",
    "drop_pins_change",
    "expire_change",
    "expire_time_s",
    "extend_pins_change",
    "list_checkpoints",
    "pin_change",
    "refresh_change",
    "refresh_checkpoint",
    "writer_checkpoint",
    "writer_checkpoint_change",
]


@dataclasses.dataclass(frozen=True)
class CheckpointCreateResult:
    """A created checkpoint: its id and the manifest id it pins."""

    id: uuid.UUID
    manifest_id: int


def expire_time_s(now: float, lifetime: timedelta | None) -> int | None:
    """Expiry for a checkpoint taken at ``now``. Rounded up: a checkpoint must never live shorter
    than asked, or a reader refreshing at half its lifetime could find it already collected."""
    if lifetime is None:
        return None
    return math.ceil(now + lifetime.total_seconds())


def _expired(checkpoint: Checkpoint, now_s: float) -> CheckpointNotFound:
    """An expired checkpoint counts as missing (GC may already have dropped its manifest), but the
    message says why, since "not found" for an id the operator can still see in a listing would
    send them looking in the wrong place."""
    return CheckpointNotFound(
        checkpoint.id,
        f"checkpoint not found: {checkpoint.id} has expired "
        f"(expire_time_s={checkpoint.expire_time_s}, now={int(now_s)})",
    )


def check_not_destroyed(m: Manifest, path: str | None = None) -> None:
    """What every checkpoint that is created, re-established or given a later expiry requires:
    a database not (soft-)destroyed. SlateDB RFC 0004 refuses every checkpoint procedure once
    ``destroyed_at_s`` is set, and its GC deletes a destroyed database only once every checkpoint
    has expired or been deleted, so extending one would keep the database (and all it pins)
    alive for ever. Deleting a checkpoint is the one edit still allowed (:func:`delete_change`).
    The one check for :func:`checkpoint_change`, :func:`refresh_change`, :func:`check_live`
    (a reader's pin) and :func:`extend_pins_change` (a reader's upkeep)."""
    if m.destroyed_at_s is not None:
        where = "database" if path is None else f"database {path!r}"
        raise DatabaseDestroyed(f"{where} was destroyed at {m.destroyed_at_s}")


def checkpoint_change(
    options: CheckpointOptions,
    now_s: float,
    checkpoint_id: uuid.UUID,
    *,
    derived_on_destroyed: bool = False,
    covers_wal: Callable[[Manifest], int] | None = None,
) -> Callable[[Manifest, int], Manifest]:
    """The manifest edit that adds checkpoint ``checkpoint_id`` (SlateDB RFC 0004's two
    procedures), for
    ``ManifestStore.update_at`` / ``FencedManifest.update_at``.

    Without ``options.source`` it pins the id the manifest is being committed as (V+1), so the
    checkpoint may share a commit with other edits; with a source it pins the source's manifest.
    ``covers_wal`` (no source only; :func:`covered_wal`): the ``wal_id_last_seen`` the checkpoint
    records, asked of each manifest the edit is applied to and set in the same update: the last
    WAL SST it holds, the bound of a checkpoint reader's WAL replay in both engines
    (docs/checkpoints-and-readers.md, "What a checkpoint holds"). Without it the checkpoint
    holds the WAL the manifest already names (often none).
    ``now_s`` may carry a fraction: the create time is truncated to whole seconds but the expiry
    is rounded up from the exact time. The id is chosen once by the caller, so if a retried
    commit finds the checkpoint already present (an earlier attempt that did land) the manifest
    is returned unchanged, not duplicated.

    ``derived_on_destroyed`` admits a checkpoint with a source on a destroyed database: a clone's
    final checkpoint in a database its parent references (a clone of a clone whose root was
    destroyed). It pins nothing the active source does not, and once no checkpoint is active
    none can appear, so the GC's "no active checkpoint" check stays valid.
    """
    if not isinstance(checkpoint_id, uuid.UUID):
        raise InvalidArgument("checkpoint id must be a uuid.UUID")
    check_instance("checkpoint options", options, CheckpointOptions)
    expire = expire_time_s(now_s, options.lifetime)

    def change(m: Manifest, next_id: int) -> Manifest:
        if m.checkpoint(checkpoint_id) is not None:
            return m
        if not (derived_on_destroyed and options.source is not None):
            check_not_destroyed(m)
        if options.source is None:
            if not m.initialized:
                raise DatabaseNotInitialized("database is not initialized")
            manifest_id = next_id
            if covers_wal is not None:
                seen = covers_wal(m)
                if seen != m.wal_id_last_seen:
                    m = dataclasses.replace(m, wal_id_last_seen=seen)
        else:
            source = m.checkpoint(options.source)
            if source is None:
                raise CheckpointNotFound(options.source)
            if source.is_expired(now_s):
                raise _expired(source, now_s)
            manifest_id = source.manifest_id
        cp = Checkpoint(
            id=checkpoint_id,
            manifest_id=manifest_id,
            create_time_s=int(now_s),
            expire_time_s=expire,
            name=options.name,
        )
        return dataclasses.replace(m, checkpoints=(*m.checkpoints, cp))

    return change


def _check_id(checkpoint_id: object) -> None:
    """A str id would otherwise match no checkpoint and be reported as not found."""
    if not isinstance(checkpoint_id, uuid.UUID):
        raise InvalidArgument(
            f"checkpoint id must be a uuid.UUID, got {type(checkpoint_id).__name__}"
        )


def refresh_change(
    checkpoint_id: uuid.UUID, now_s: float, lifetime: timedelta | None
) -> Callable[[Manifest], Manifest]:
    """The edit that moves a checkpoint's expiry to ``now_s + lifetime`` (None: never expires).

    An already expired checkpoint is refused like a missing one rather than revived: the GC may
    have treated it as gone and collected what it pinned. A destroyed database's checkpoints are
    refused too (DatabaseDestroyed, :func:`check_not_destroyed`): the GC waits for them to go.
    """
    _check_id(checkpoint_id)
    check_optional_duration("checkpoint lifetime", lifetime)
    expire = expire_time_s(now_s, lifetime)

    def change(m: Manifest) -> Manifest:
        check_not_destroyed(m)
        current = m.checkpoint(checkpoint_id)
        if current is None:
            raise CheckpointNotFound(checkpoint_id)
        if current.is_expired(now_s):
            raise _expired(current, now_s)
        refreshed = dataclasses.replace(current, expire_time_s=expire)
        return dataclasses.replace(
            m, checkpoints=tuple(refreshed if c.id == checkpoint_id else c for c in m.checkpoints)
        )

    return change


def delete_change(checkpoint_id: uuid.UUID) -> Callable[[Manifest], Manifest | None]:
    """The edit that drops a checkpoint. Allowed on destroyed and uninitialized databases: the GC
    waits for their checkpoints to go, so operators must be able to remove them.

    CheckpointNotFound only if the first manifest it is applied to lacks the checkpoint: once it
    has seen it, a later attempt that finds it gone (our earlier attempt landed, see
    ``ManifestStore``'s settling of commits behind the boundary) commits nothing and succeeds."""
    _check_id(checkpoint_id)
    seen = False

    def change(m: Manifest) -> Manifest | None:
        nonlocal seen
        if m.checkpoint(checkpoint_id) is None:
            if seen:
                return None
            raise CheckpointNotFound(checkpoint_id)
        seen = True
        return dataclasses.replace(
            m, checkpoints=tuple(c for c in m.checkpoints if c.id != checkpoint_id)
        )

    return change


def drop_named_change(name: str) -> Callable[[Manifest], Manifest | None]:
    """The edit that drops every checkpoint named ``name``; nothing is committed when there is
    none (so it may be applied again, or after another attempt dropped them). Allowed on any
    manifest, like :func:`delete_change`."""
    check_instance("checkpoint name", name, str)

    def change(m: Manifest) -> Manifest | None:
        kept = tuple(c for c in m.checkpoints if c.name != name)
        if len(kept) == len(m.checkpoints):
            return None
        return dataclasses.replace(m, checkpoints=kept)

    return change


# ---- the writer's checkpoint ----------------------------------------------------------------
def writer_checkpoint(m: Manifest, manifest_id: int, epoch: int) -> Manifest:
    """Replace any writer checkpoint in ``m`` with one of ``epoch`` pinning ``manifest_id`` (SlateDB
    RFC 0004, "Writers": every commit of the writer pins the manifest it commits)."""
    others = tuple(c for c in m.checkpoints if c.writer_epoch is None)
    cp = Checkpoint(
        id=uuid.uuid4(),
        manifest_id=manifest_id,
        create_time_s=int(time.time()),
        expire_time_s=None,
        writer_epoch=epoch,
    )
    return dataclasses.replace(m, checkpoints=(*others, cp))


def writer_checkpoint_change(epoch: int) -> Callable[[Manifest, int], Manifest]:
    """The edit that only moves the writer checkpoint of ``epoch`` to the manifest being
    committed (a writer that picked up a new set of SSTs pins it)."""

    def change(m: Manifest, next_id: int) -> Manifest:
        return writer_checkpoint(m, next_id, epoch)

    return change


def without_writer_checkpoints(m: Manifest) -> Manifest:
    """``m`` without any writer's checkpoint: a destroyed database has no writer to pin for
    (SlateDB RFC 0004, "Deleting a Database"; user checkpoints stay and block a hard destroy)."""
    keep = tuple(c for c in m.checkpoints if c.writer_epoch is None)
    return m if len(keep) == len(m.checkpoints) else dataclasses.replace(m, checkpoints=keep)


# ---- a MANAGED reader's pins (for ManifestStore.update_at) ------------------------------------
def check_live(path: str, m: Manifest) -> None:
    """What a reader requires of the database it pins or follows: not destroyed, initialized."""
    check_not_destroyed(m, path)
    if not m.initialized:
        raise DatabaseNotInitialized(f"database {path!r} is not initialized")


def pin_change(
    path: str,
    new_id: uuid.UUID,
    now_s: int,
    expire_s: int | None,
    drop: set[uuid.UUID],
    last_seen: int,
) -> Callable[[Manifest, int], Manifest | None]:
    """A reader's new checkpoint pinning the manifest being written, ``wal_id_last_seen``
    recorded in the same update, and the reader's older checkpoints in ``drop`` deleted (SlateDB
    RFC 0004, "Establishing the Checkpoint"). Re-applied on a manifest that already holds
    ``new_id`` (an earlier attempt that landed) it changes nothing."""

    def change(m: Manifest, next_id: int) -> Manifest | None:
        if m.checkpoint(new_id) is not None:
            return None
        check_live(path, m)
        cp = Checkpoint(id=new_id, manifest_id=next_id, create_time_s=now_s, expire_time_s=expire_s)
        return dataclasses.replace(
            m,
            checkpoints=(*(c for c in m.checkpoints if c.id not in drop), cp),
            wal_id_last_seen=max(last_seen, m.replay_after_wal_id),
        )

    return change


def extend_pins_change(
    ours: uuid.UUID, done: set[uuid.UUID], stale: set[uuid.UUID], expire_s: int | None
) -> Callable[[Manifest, int], Manifest]:
    """A reader's upkeep of its pins: extend the ``stale`` checkpoints to ``expire_s`` and delete
    the retired ``done`` ones. Raises CheckpointNotFound when ``ours``, the reader's current
    checkpoint, is gone (GC removed it once expired): the reader must establish a new one.
    Raises DatabaseDestroyed when it would extend a checkpoint of a destroyed database
    (:func:`check_not_destroyed`); deleting ``done`` alone is still allowed there."""

    def change(m: Manifest, _next_id: int) -> Manifest:
        if m.checkpoint(ours) is None:
            raise CheckpointNotFound(ours)
        if stale and expire_s is not None and any(m.checkpoint(i) is not None for i in stale):
            check_not_destroyed(m)
        cps = []
        for c in m.checkpoints:
            if c.id in done:
                continue
            if c.id in stale and c.expire_time_s is not None and expire_s is not None:
                c = dataclasses.replace(c, expire_time_s=max(c.expire_time_s, expire_s))
            cps.append(c)
        return dataclasses.replace(m, checkpoints=tuple(cps))

    return change


def drop_pins_change(doomed: set[uuid.UUID]) -> Callable[[Manifest, int], Manifest | None]:
    """Delete a reader's checkpoints in ``doomed``; nothing is committed if none is there."""

    def change(m: Manifest, _next_id: int) -> Manifest | None:
        kept = tuple(c for c in m.checkpoints if c.id not in doomed)
        if len(kept) == len(m.checkpoints):
            return None
        return dataclasses.replace(m, checkpoints=kept)

    return change


# ---- the garbage collector's expiry ------------------------------------------------------------
class ExpireChange:
    """The edit by which a GC pass removes the checkpoints expired at ``now_s`` (SlateDB RFC
    0004: an expired checkpoint no longer pins anything). A destroyed database keeps its
    checkpoints (destroy waits for them); nothing is committed when none has expired.
    ``removed`` is how many the last application removed, for the pass's statistics."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s
        self.removed = 0

    def __call__(self, m: Manifest) -> Manifest | None:
        keep = tuple(c for c in m.checkpoints if not c.is_expired(self.now_s))
        self.removed = len(m.checkpoints) - len(keep)
        if m.destroyed_at_s is not None or not self.removed:
            self.removed = 0
            return None
        return dataclasses.replace(m, checkpoints=keep)


def expire_change(now_s: float) -> ExpireChange:
    """The GC's removal of the checkpoints expired at ``now_s`` (see :class:`ExpireChange`)."""
    return ExpireChange(now_s)


# ---- the WAL a checkpoint covers ----------------------------------------------------------------
def checked_wal_run(
    wal: WalLog,
    listed: Sequence[int],
    after: int,
    m: Manifest,
    latest: Callable[[], Manifest],
) -> list[int]:
    """The unbroken run ``after+1, after+2, ...`` at the start of ``listed`` (ascending WAL ids
    after ``after``): what may be replayed after ``after`` with no gap (SlateDB RFC 0001, "Parallel
    Writes": a hole in a writer's window is a write still in flight, and serving what follows it
    would not be a prefix of the history).

    WalSstMissing when the hole that ends the run is one no writer can have left, judged on
    ``m`` and, when ``m`` finds one, again on ``latest()`` (a newer writer's window may be
    wider): stopping there would drop, for good, the acknowledged writes after it (review
    finding 7 in RELIABILITY.md). The one check of a reader's replay
    (:mod:`slatedb_core.reader.refresh`) and of the WAL a checkpoint names (:func:`covered_wal`).
    """
    run: list[int] = []
    for wal_id in listed:
        if wal_id != after + 1 + len(run):
            break
        run.append(wal_id)
    if len(run) < len(listed) and _damage(listed, after, m):
        bad = _damage(listed, after, latest())
        if bad:
            raise missing_error(wal, bad, "a hole a reader cannot step over")
    return run


def _damage(listed: Sequence[int], after: int, m: Manifest) -> list[tuple[int, int]]:
    # ids at or below the replay point are GC's to delete in any order: never damage
    alive = [i for i in listed if i > m.replay_after_wal_id]
    holes = damaged_holes(
        alive, m.replay_after_wal_id, m.next_wal_sst_id, m.max_parallel_writes, m.wal_id_last_seen
    )
    return [(max(lo, after + 1), hi) for lo, hi in holes if hi > after]


def covered_wal(store: WalLocation | ObjectStore, path: str, m: Manifest) -> int:
    """The last WAL SST a checkpoint of ``m`` committed now holds, the ``wal_id_last_seen`` it
    records: of the WAL SSTs listed now, the unbroken run after ``m.replay_after_wal_id``
    (:func:`checked_wal_run`), up to the last one that holds rows; ``m.replay_after_wal_id`` when
    there is none; never below an id ``m.wal_id_last_seen`` names past that run. Every checkpoint
    of the latest state uses it: ``admin.create_checkpoint``, ``Db.create_checkpoint``, a
    clone's or union's ephemeral source checkpoint (:mod:`slatedb_core.lifecycle.clone`).

    That run holds every write acknowledged before the listing, except, with
    ``max_parallel_writes`` above 1, one acknowledged while an earlier WAL SST was still in
    flight and is still missing (no reader can replay across that hole), and none acknowledged
    after the checkpoint is committed (those go to ids past it). It is listed after ``m`` was read, so
    when the checkpoint commits on ``m`` no GC can have collected any of it (GC deletes WAL
    SSTs only at or below the latest replay point, which is then ``m``'s). Trailing fences
    (zero-byte SSTs a writer leaves when it opens) hold no writes and are not named, not even
    when a managed reader named them in ``m.wal_id_last_seen`` (the end of its run, fences
    included): a flushed database must stay a union source
    (:mod:`slatedb_core.manifest.projection`; 74173c5 for the ephemeral checkpoint). One LIST,
    plus a manifest read when the run ends at a hole.

    ``store``: where the WAL is (:class:`~slatedb_core.wal.location.WalLocation`; a bare store
    holds it itself). A WAL that is not there raises ``WalStoreMissing``
    (:func:`~slatedb_core.wal.location.check_wal_present`, from the same LIST, which starts at
    the replay point itself)."""
    wal = WalLog(store, path)
    after = m.replay_after_wal_id
    sizes: dict[int, int] = {}
    at_replay_point = False
    for meta in wal.store.list(wal.dir, start_after=wal.path(after - 1) if after > 1 else None):
        wal_id = wal.parse(meta.path)
        if wal_id is not None and wal_id > after:
            sizes[wal_id] = meta.size
        elif wal_id == after:
            at_replay_point = True
    if max(m.wal_id_last_seen, m.next_wal_sst_id - 1) <= after:
        # WAL SSTs ``m`` records are named whether listed or not (below): only a WAL nothing
        # records can be missed here, one SlateDB's writer keeps in its WAL store
        check_wal_present(path, wal.where, m, list(sizes), at_replay_point=at_replay_point)
    run = checked_wal_run(
        wal, sorted(sizes), after, m, lambda: _manifests(path, wal.main).read_latest().manifest
    )
    with_rows = [i for i in run if sizes[i] > 0]
    if m.wal_id_last_seen > (run[-1] if run else after):
        return m.wal_id_last_seen  # named past the run: kept (only fences of the run go unnamed)
    return with_rows[-1] if with_rows else after


# ---- a database that is not open here ----------------------------------------------------------
def _manifests(path: str, store: ObjectStore) -> ManifestStore:
    validate_relative_path(path, what="database path")
    return ManifestStore(check_store(store), path)


def _committed(stored: StoredManifest, checkpoint_id: uuid.UUID) -> Checkpoint:
    cp = stored.manifest.checkpoint(checkpoint_id)
    if cp is None:  # pragma: no cover - every change above either adds it or raises
        raise CheckpointNotFound(checkpoint_id)
    return cp


def add_checkpoint(
    path: str,
    store: ObjectStore,
    options: CheckpointOptions | None = None,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> Checkpoint:
    """Like :func:`create_checkpoint`, but returns the whole committed entry, for callers that
    report its times (the CLI) without reading the manifest again. ``wal_url``: the database's
    separate WAL store, if it has one (SlateDB RFC 0009)."""
    options = options or CheckpointOptions()
    checkpoint_id = uuid.uuid4()
    cover = functools.partial(covered_wal, WalLocation.open(check_store(store), wal_url), path)
    change = checkpoint_change(options, now(), checkpoint_id, covers_wal=cover)
    stored = _manifests(path, store).update_at(change)
    return _committed(stored, checkpoint_id)


def create_checkpoint(
    path: str,
    store: ObjectStore,
    options: CheckpointOptions | None = None,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> CheckpointCreateResult:
    """Checkpoint the database at ``path``: of its latest manifest, or of ``options.source``.

    A checkpoint of the latest manifest holds every write acknowledged before the call, the ones
    still only in the WAL included (:func:`covered_wal`), and none acknowledged after it
    returned; a checkpoint of a source holds what the source holds.

    Raises DatabaseNotFound, DatabaseDestroyed, DatabaseNotInitialized (no source),
    CheckpointNotFound (source missing or expired), or WalSstMissing (no source: a hole in the
    WAL no writer can have left, which would drop the acknowledged writes after it), or
    WalStoreMissing (the WAL is not in the main store and no ``wal_url`` was given: SlateDB RFC
    0009's separate WAL store).
    """
    cp = add_checkpoint(path, store, options, now=now, wal_url=wal_url)
    return CheckpointCreateResult(id=cp.id, manifest_id=cp.manifest_id)


def refresh_checkpoint(
    path: str,
    store: ObjectStore,
    checkpoint_id: uuid.UUID,
    lifetime: timedelta | None = None,
    *,
    now: Clock = time.time,
) -> Checkpoint:
    """Set the checkpoint's expiry to now + ``lifetime``, or to never when ``lifetime`` is None.

    Returns the refreshed entry. Raises CheckpointNotFound if it is missing or already expired.
    """
    stored = _manifests(path, store).update(refresh_change(checkpoint_id, now(), lifetime))
    return _committed(stored, checkpoint_id)


def delete_checkpoint(path: str, store: ObjectStore, checkpoint_id: uuid.UUID) -> None:
    """Remove the checkpoint so the GC may collect what only it pinned. CheckpointNotFound if
    there is no such checkpoint (an expired one can still be deleted)."""
    _manifests(path, store).update(delete_change(checkpoint_id))


def drop_named_checkpoints(path: str, store: ObjectStore, name: str) -> None:
    """Remove every checkpoint named ``name``, if any (see :func:`drop_named_change`)."""
    _manifests(path, store).update(drop_named_change(name))


def list_checkpoints(path: str, store: ObjectStore, name: str | None = None) -> list[Checkpoint]:
    """The checkpoints in the latest manifest, in creation order. Expired ones are included
    (check ``Checkpoint.is_expired``): they stay listed until the GC removes them, and an operator
    wondering why data is still retained needs to see them. ``name`` keeps exact matches only;
    names are not unique, so several may match."""
    check_optional("name", name, str)
    checkpoints = _manifests(path, store).read_latest().manifest.checkpoints
    return [c for c in checkpoints if name is None or c.name == name]
