"""Union: one new database over several non-overlapping source databases (SlateDB RFC 0004, "Manifest
Projection and Union"), e.g. to merge shards made by projected clones back into one.

The manifest arithmetic is :func:`slatedb_core.manifest.projection.union_manifests`; this module
runs it the way a clone runs, so that it survives a crash at any step::

    1  read the destination's manifest (maybe left by a crashed attempt): present -> it must be
       this union (its origin record, or the final checkpoint ids of its manifest 1, see
       :mod:`slatedb_core.lifecycle.origin`); initialized -> check its final checkpoints exist,
       done; not initialized -> go to 4
    2  per source: its checkpoint (given, or an ephemeral one of the latest, 5 min) and the
       manifest it pins (a ManifestV1 source is read as SlateDB reads it: docs/format.md)
    3  union_manifests (refuses overlap and uncompacted WAL), each entry's final checkpoint id
       derived from the request, written with initialized=False by create-if-absent (losing
       the race -> back to 1 on the winner's manifest); then its origin record
    4  the final checkpoint of every external db: every source, and the databases the sources
       themselves reference
    5  set initialized=True

No WAL is copied: union refuses sources whose WAL is not compacted. The ephemeral checkpoint
names the WAL SSTs durable when it was taken (see :mod:`slatedb_core.lifecycle.clone`), so a source with
writes that are only in its WAL is refused instead of silently losing them.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from slatedb_core.checkpoints import Clock
from slatedb_core.errors import InvalidArgument, ManifestVersionExists, UnionError
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import (
    CloneConflict,
    Fallbacks,
    Snapshot,
    check_paths,
    drop_ephemeral,
    finish,
    take_snapshot,
    verify_final_checkpoints,
)
from slatedb_core.lifecycle.external import Latest, same_format_store
from slatedb_core.lifecycle.origin import (
    Signature,
    establish,
    signature,
    union_final_id,
    union_mismatch,
    union_origin_of,
)
from slatedb_core.manifest.model import Manifest, combined_range_transactions
from slatedb_core.manifest.projection import UnionInput, union_manifests
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import check_sequence
from slatedb_core.store.objectstore import ObjectStore, check_store
from slatedb_core.wal.location import WalLocation

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
    out = check_sequence("sources", sources, of="UnionSource")  # not None (RELIABILITY.md)
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


def _check_existing(
    ms: ManifestStore, m: Manifest, sources: list[UnionSource], sig: Signature
) -> None:
    """Is the database at the destination exactly this union (its earlier attempt, finished or
    not)? Only if its origin record says so, or, before the record is written, its manifest 1
    carries this request's final checkpoint ids (slatedb_core.lifecycle.origin). Anything else (an
    ordinary database, with or without manifest 1; a clone; a union of other sources or ranges;
    a union from before origin records) is refused: RELIABILITY.md, review finding 9."""
    dest = ms.db_path
    why = establish(
        ms,
        m,
        lambda first: union_origin_of(first, dest, sig),
        None,
        lambda o: union_mismatch(o, sig, [(s.path, s.checkpoint) for s in sources]),
    )
    if why is not None:
        raise CloneConflict(
            f"a database exists at {dest!r} and is not this union: {why}; choose another "
            "destination"
        )


def _snapshots(
    store: ObjectStore,
    dest: str,
    sources: list[UnionSource],
    now: float,
    wal_at: WalLocation | None = None,
) -> list[Snapshot]:
    """Step 2; on failure the ephemeral checkpoints already taken are dropped. ``wal_at``: the
    sources' WAL store (SlateDB RFC 0009), where their checkpoints look for their WAL."""
    snaps: list[Snapshot] = []
    try:
        for s in sources:
            snap = take_snapshot(same_format_store(store, s.path), s.checkpoint, dest, now, wal_at)
            snaps.append(snap)
    except BaseException:
        for snap in snaps:
            drop_ephemeral(store, snap)
        raise
    return snaps


def _union_manifest(
    dest: str,
    snaps: list[Snapshot],
    sources: list[UnionSource],
    sig: Signature,
    separate_wal_store: bool = False,
) -> Manifest:
    inputs = [
        UnionInput(snap.manifest, snap.path, snap.checkpoint_id, src.range)
        for snap, src in zip(snaps, sources, strict=True)
    ]
    merged = union_manifests(inputs)
    # Final checkpoint ids a re-run can recompute: until the origin record is written, they
    # are what tells this union's manifest 1 from any other (slatedb_core.lifecycle.origin).
    entries = tuple(
        dataclasses.replace(
            e, final_checkpoint_id=union_final_id(dest, sig, e.path, e.source_checkpoint_id)
        )
        for e in merged.external_dbs
    )
    # Defensive: whatever union_manifests returns, the new database starts unfinished and
    # without checkpoints of its own.
    # The exactly-once records that hold for every source's keys (the lowest version per app,
    # none for an app some source lacks): a batch that reached one source and not another (a
    # failed job not yet re-run) is not applied to the union, so its re-run writes it there
    # instead of being skipped with the other source's rows lost (docs/format.md).
    transactions = combined_range_transactions(snap.manifest.transactions for snap in snaps)
    return dataclasses.replace(
        merged,
        external_dbs=entries,
        initialized=False,
        destroyed_at_s=None,
        checkpoints=(),
        transactions=transactions,
        # a union starts with no WAL of its own; its writers use the sources' WAL store
        separate_wal_store=separate_wal_store,
    )


def create_union_stored(
    dest_path: str,
    sources: Sequence[UnionSource],
    store: ObjectStore,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> StoredManifest:
    """:func:`create_union`, returning the committed manifest with its id."""
    srcs = _check_sources(sources)
    check_paths(dest_path, [s.path for s in srcs])
    check_store(store)
    dms = ManifestStore(store, dest_path)
    sig = signature([(s.path, s.range) for s in srcs])
    for _ in range(5):
        stored = dms.try_read_latest()
        known: dict[str, Latest] = {}
        if stored is None:
            wal_at = None if wal_url is None else WalLocation.open(store, wal_url)
            snaps = _snapshots(store, dest_path, srcs, now(), wal_at)
            try:
                initial = _union_manifest(dest_path, snaps, srcs, sig, wal_url is not None)
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
        _check_existing(dms, stored.manifest, srcs, sig)  # and write the origin record
        m = stored.manifest
        if m.initialized:
            verify_final_checkpoints(store, dest_path, m)
            return stored
        paths = list(dict.fromkeys(s.path for s in srcs))
        return finish(store, dest_path, dms, m, Fallbacks(store, paths, known), now())
    raise CloneConflict(f"kept losing the race to create the union at {dest_path!r}")


def create_union(
    dest_path: str,
    sources: Sequence[UnionSource],
    store: ObjectStore,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> Manifest:
    """Create (or finish creating) the database at ``dest_path`` holding the union of
    ``sources``. Safe to re-run after a crash at any point; a finished union is returned as is.
    ``wal_url``: the sources' separate WAL store (SlateDB RFC 0009), which the union's writers
    use too (its manifest records it, ``Manifest.separate_wal_store``).

    Raises UnionError (an InvalidArgument) for overlapping or non-adjacent sources, a source with
    uncompacted WAL; SourceCheckpointLost, CloneConflict and CloneIncomplete
    as :func:`slatedb_core.lifecycle.clone.create_clone` does.
    """
    return create_union_stored(dest_path, sources, store, now=now, wal_url=wal_url).manifest
