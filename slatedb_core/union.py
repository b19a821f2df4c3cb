"""Union: one new database over several non-overlapping source databases (seed 003 "Manifest
Projection and Union"), e.g. to merge shards made by projected clones back into one.

The manifest arithmetic is :func:`slatedb_core.manifest.projection.union_manifests`; this module
runs it the way a clone runs, so that it survives a crash at any step::

    1  read the destination's manifest (maybe left by a crashed attempt): present and
       initialized -> check it is this union and its final checkpoints exist, done;
       present and not initialized -> go to 4
    2  per source: its checkpoint (given, or an ephemeral one of the latest, 5 min) and the
       manifest it pins, which must be format V2 (V1 has no visible ranges, so views over the
       same SST from different shards could not be told apart)
    3  union_manifests (refuses overlap and uncompacted WAL), written with initialized=False
       by create-if-absent; losing the race -> back to 1 on the winner's manifest
    4  the final checkpoint of every external db: every source, and the databases the sources
       themselves reference
    5  set initialized=True

No WAL is copied: union refuses sources whose WAL is not compacted. The ephemeral checkpoint
names the WAL SSTs durable when it was taken (see :mod:`slatedb_core.clone`), so a source with
writes that are only in its WAL is refused instead of silently losing them.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from slatedb_core.checkpoints import Clock
from slatedb_core.clone import (
    CloneConflict,
    Fallbacks,
    Latest,
    Snapshot,
    check_paths,
    drop_ephemeral,
    ensure_final_checkpoints,
    find_entry,
    mark_initialized,
    same_format_store,
    take_snapshot,
    verify_final_checkpoints,
)
from slatedb_core.errors import InvalidArgument, ManifestVersionExists, ObjectNotFound
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.projection import UnionError, UnionInput, union_manifests
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.sequenced import FIRST_ID
from slatedb_core.options import check_sequence
from slatedb_core.store.objectstore import ObjectStore, check_store

__all__ = ["UnionError", "UnionSource", "create_union", "create_union_stored"]


@dataclass(frozen=True)
class UnionSource:
    """One input of a union: a database, optionally pinned at a checkpoint (default: an
    ephemeral checkpoint of its latest state) and restricted to a range (default: the keys its
    SSTs cover; give ranges to have union check that the sources are adjacent)."""

    path: str
    checkpoint: uuid.UUID | None = None
    range: KeyRange | None = None


def _check_sources(sources: Sequence[UnionSource]) -> list[UnionSource]:
    out = check_sequence("sources", sources, of="UnionSource")  # not None (issue 19)
    if not out:
        raise InvalidArgument("a union needs at least one source")
    for s in out:
        if not isinstance(s, UnionSource):
            raise InvalidArgument(f"union sources must be UnionSource, got {type(s).__name__}")
        if s.checkpoint is not None and not isinstance(s.checkpoint, uuid.UUID):
            raise InvalidArgument(f"checkpoint of source {s.path!r} must be a uuid.UUID")
        if s.range is not None and not isinstance(s.range, KeyRange):
            raise InvalidArgument(f"range of source {s.path!r} must be a KeyRange")
    return out


def _check_existing(ms: ManifestStore, m: Manifest, dest: str, sources: list[UnionSource]) -> None:
    """Is the database at ``dest`` a union that a re-run may finish or return? Weaker than a
    clone's check, because union drops a source's entry when the source owns none of the SSTs:
    it must have been born uninitialized (so clone or union made it; a database a writer created
    starts initialized), and a source given with a checkpoint must not appear with another one."""
    try:
        first = ms.read(FIRST_ID).manifest
    except ObjectNotFound:
        first = None  # collected by GC; nothing more to learn from it
    if first is not None and first.initialized:
        raise CloneConflict(f"a database that is not a union already exists at {dest!r}")
    for s in sources:
        named = [e for e in m.external_dbs if e.path == s.path]
        if s.checkpoint is not None and named and find_entry(m, s.path, s.checkpoint) is None:
            raise CloneConflict(
                f"the union at {dest!r} was made from {s.path!r} at another checkpoint than "
                f"{s.checkpoint}"
            )


def _snapshots(
    store: ObjectStore, dest: str, sources: list[UnionSource], now: float
) -> list[Snapshot]:
    """Step 2; on failure the ephemeral checkpoints already taken are dropped."""
    snaps: list[Snapshot] = []
    try:
        for s in sources:
            snap = take_snapshot(same_format_store(store, s.path), s.checkpoint, dest, now)
            snaps.append(snap)
            if snap.format_version < 2:
                raise UnionError(
                    f"source {s.path!r}: manifest {snap.manifest_id} is format V{snap.format_version}"
                    "; union needs V2 manifests (SST views with visible ranges). Let its writer "
                    "commit once with manifest_format_version=2 and retry"
                )
    except BaseException:
        for snap in snaps:
            drop_ephemeral(store, snap)
        raise
    return snaps


def _union_manifest(snaps: list[Snapshot], sources: list[UnionSource]) -> Manifest:
    inputs = [
        UnionInput(snap.manifest, snap.path, snap.checkpoint_id, src.range)
        for snap, src in zip(snaps, sources, strict=True)
    ]
    merged = union_manifests(inputs)
    # Defensive: whatever union_manifests returns, the new database starts unfinished and
    # without checkpoints of its own.
    return dataclasses.replace(merged, initialized=False, destroyed_at_s=None, checkpoints=())


def create_union_stored(
    dest_path: str,
    sources: Sequence[UnionSource],
    store: ObjectStore,
    *,
    now: Clock = time.time,
) -> StoredManifest:
    """:func:`create_union`, returning the committed manifest with its id."""
    srcs = _check_sources(sources)
    check_paths(dest_path, [s.path for s in srcs])
    check_store(store)
    dms = ManifestStore(store, dest_path)
    for _ in range(5):
        stored = dms.try_read_latest()
        known: dict[str, Latest] = {}
        if stored is not None:
            _check_existing(dms, stored.manifest, dest_path, srcs)
        else:
            snaps = _snapshots(store, dest_path, srcs, now())
            try:
                initial = _union_manifest(snaps, srcs)
            except BaseException:
                for snap in snaps:
                    drop_ephemeral(store, snap)
                raise
            try:
                stored = dms.create_initial(initial)
            except ManifestVersionExists:
                for snap in snaps:
                    drop_ephemeral(store, snap)
                continue
            known = {snap.path: snap.latest for snap in snaps}
        m = stored.manifest
        if m.initialized:
            verify_final_checkpoints(store, dest_path, m)
            return stored
        paths = list(dict.fromkeys(s.path for s in srcs))
        ensure_final_checkpoints(store, dest_path, m, Fallbacks(store, paths, known), now())
        return mark_initialized(dms)
    raise CloneConflict(f"kept losing the race to create the union at {dest_path!r}")


def create_union(
    dest_path: str,
    sources: Sequence[UnionSource],
    store: ObjectStore,
    *,
    now: Clock = time.time,
) -> Manifest:
    """Create (or finish creating) the database at ``dest_path`` holding the union of
    ``sources``. Safe to re-run after a crash at any point; a finished union is returned as is.

    Raises UnionError (an InvalidArgument) for overlapping or non-adjacent sources, a source with
    uncompacted WAL, or a V1 manifest; SourceCheckpointLost, CloneConflict and CloneIncomplete
    as :func:`slatedb_core.clone.create_clone` does.
    """
    return create_union_stored(dest_path, sources, store, now=now).manifest
