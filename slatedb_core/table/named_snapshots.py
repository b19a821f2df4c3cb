"""Named table snapshots: a :class:`~slatedb_core.table.snapshot.TableSnapshot` that a table
records under a name, so any process can find it again.

A named snapshot ``N`` is a sequenced object, ``<table>/snapshots/N/record/{id:020}.snapshot``
(:func:`slatedb_core.layout.snapshot_record_path`), committed like the manifest by create-if-absent
through THE update loop (:mod:`slatedb_core.meta.versioned`; SlateDB RFC 0001 "Manifest
Updates"), so it works on every store, two-phase CAS included (docs/two-phase-cas.md). Each
version holds a snapshot (with the value encoding of its shard-map version, which the map's GC
may collect; a record written before snapshots carried it has none, and
:func:`~slatedb_core.table.snapshot.snapshot_value_encoding` looks it up), or nothing (a
tombstone: the name was deleted); the snapshot's
checkpoints are named ``table-snapshot:<table>:N``. Whether a version holds a given snapshot is
decided by checkpoint ids (:func:`~slatedb_core.table.snapshot.same_snapshot`), never by the
shards' seal flags. (Re-)creating ``N``::

    1  take     checkpoints of every shard (:func:`~slatedb_core.table.snapshot.take_snapshot`)
    2  record   commit a version holding them on top of the latest: creators of one name are
                serialised, the last one wins. The change that builds the version refuses to
                if TAKE_MAX_AGE or more has passed since step 1 began (the creator takes
                again): a creator stalled before its commit writes no record
    3  release  the checkpoints of the version that step 2 built on: every version is released
                by exactly the creator that built on it, so re-creating a name, even from
                several processes at once, leaks no checkpoint
    4  check    a creator whose version landed TAKE_MAX_AGE or more after it began step 1, or
                whose version is still the latest but lost a checkpoint, takes again (its
                checkpoints may have been swept as a dead creator's, below)
    5  sweep    checkpoints of the name that the latest version does not hold and older than
                SWEEP_MIN_AGE: what a creator that died between 1 and 3 left

Step 5 reads the clock before it reads the latest version. So a checkpoint it deletes was
SWEEP_MIN_AGE old before that read; a version that holds it and that the sweep did not see
is built after the read, when the checkpoint was older than TAKE_MAX_AGE: step 2's change
refuses to build it, or, if the create request itself outlasted the margin, its creator takes
again at step 4 (with clocks up to SWEEP_MIN_AGE - TAKE_MAX_AGE apart). What remains is a
creator that dies right after such a create (the one request of step 2 stalled past the
margin): its name then finds swept checkpoints until the name is taken again.

Deleting ``N`` commits a tombstone the same way, then releases and sweeps; releasing a snapshot
taken under ``N`` commits a tombstone only if the latest version still holds that snapshot (a
conditional delete): a newer snapshot under ``N`` is left alone. Both sweep whether or not they
committed, so deleting a name that is already deleted still sweeps what dead creators left
under it. Table GC sweeps every name (:func:`sweep_snapshot_leftovers`), those found only on
shard checkpoints included (a creator that died before the name's first record). Old versions
are collected boundary-first by :func:`collect_snapshot_records` (SlateDB RFC 0026); the latest,
tombstone or not, stays.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.errors import (
    CommitRetriesExhausted,
    CorruptionError,
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
    SlateDBError,
)
from slatedb_core.layout import (
    SNAPSHOT_RECORD_DIR,
    SNAPSHOT_SUFFIX,
    snapshot_dir,
    snapshot_name_dir,
)
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.meta.json_doc import load_stored_json
from slatedb_core.meta.sequenced import SequencedEntry, SequencedStore
from slatedb_core.meta.versioned import RetryPolicy, VersionedStore, collect_old_versions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import ShardMap, ShardMapStore
from slatedb_core.table.snapshot import (
    TableSnapshot,
    check_snapshot_name,
    is_snapshot_name,
    release_checkpoints,
    release_snapshot,
    same_snapshot,
    snapshot_checkpoint_name,
    snapshot_present,
    take_snapshot,
)

log = logging.getLogger(__name__)

__all__ = [
    "SWEEP_MIN_AGE",
    "TAKE_MAX_AGE",
    "NameRecord",
    "NamedSnapshotRecords",
    "collect_snapshot_records",
    "delete_named",
    "read_named",
    "release_named",
    "snapshot_names",
    "sweep_snapshot_leftovers",
    "take_named",
]

SWEEP_MIN_AGE = timedelta(hours=1)
"""A checkpoint of a named snapshot that the latest version of its record does not hold is
deleted by the next (re-)creation, deletion or release of that name, or the next table GC,
only once it is this old:
younger, it may belong to a creator still running (taking checkpoints of every shard takes
seconds, not an hour)."""

TAKE_MAX_AGE = SWEEP_MIN_AGE / 2
"""A creator that would build its record version this long or longer after it began taking its
checkpoints, or whose version landed so late, takes again: a sweep may have deleted them as a
dead creator's. The margin to
SWEEP_MIN_AGE absorbs clock differences between processes."""

_RECORD_MAGIC = b"SDBN"
_RECORD_FORMAT = 1


@dataclass(frozen=True)
class NameRecord:
    """A version of a name's record (id 0: the name has no record yet)."""

    id: int
    snapshot: TableSnapshot | None
    """None: a tombstone (the name was deleted), or no record."""
    replaced: TableSnapshot | None = None
    """What the version it was built on held: known only to its committer, who releases it."""


class NamedSnapshotRecords:
    """The record of the table's snapshot named ``name``: one sequenced object per version
    (module docstring), committed through :class:`~slatedb_core.meta.versioned.VersionedStore`."""

    def __init__(self, store: ObjectStore, table_path: str, name: str, attempts: int) -> None:
        self.store = store
        self.table_path = table_path
        self.name = check_snapshot_name(name)
        self.seq = SequencedStore(
            store, snapshot_name_dir(table_path, name), SNAPSHOT_RECORD_DIR, SNAPSHOT_SUFFIX
        )
        self.versions: VersionedStore[NameRecord, NameRecord] = VersionedStore(
            self.seq,
            what=f"snapshot record {name!r} of table {table_path!r}",
            read_latest=self.read_latest,
            decode=self._decode,
            encode=self._encode,
            retry=RetryPolicy(max_attempts=attempts),
        )

    def read_latest(self) -> NameRecord:
        found = self.seq.read_latest()
        return NameRecord(0, None) if found is None else self._decode(*found)

    def update(
        self,
        holds: TableSnapshot | None,
        *,
        only_over: TableSnapshot | None = None,
        only_if_named: bool = False,
        taken_at: float | None = None,
    ) -> NameRecord:
        """Commit a version holding ``holds`` (None: a tombstone) on top of the latest; with
        ``only_over``, only if the latest holds that snapshot; with ``only_if_named``, only if it
        holds one; with ``taken_at`` (when taking ``holds`` began, by ``time.time()``), only
        while that is less than TAKE_MAX_AGE ago, checked on each attempt just before its
        create (step 2). The version committed, or the latest if nothing was."""

        def change(base: NameRecord) -> NameRecord | None:
            if only_over is not None and not same_snapshot(base.snapshot, only_over):
                return None
            if only_if_named and base.snapshot is None:
                return None
            if taken_at is not None and _too_old(taken_at):
                return None  # a sweep may have deleted its checkpoints: the creator takes again
            return NameRecord(0, holds)

        return self.versions.update(change)

    def _decode(self, record_id: int, data: bytes) -> NameRecord:
        path = self.seq.path(record_id)
        opened = open_sealed(
            data, magic=_RECORD_MAGIC, name=path, versions=frozenset({_RECORD_FORMAT})
        )
        try:
            raw = load_stored_json(opened.payload, path)["snapshot"]  # bounded (meta.json_doc)
            snapshot = None if raw is None else TableSnapshot.from_dict(raw)
        except (ValueError, KeyError, TypeError, RecursionError, InvalidArgument) as e:
            raise CorruptionError(path, f"not a snapshot record: {e}") from None
        return NameRecord(record_id, snapshot)

    def _encode(
        self, record_id: int, new: NameRecord, base: NameRecord | None
    ) -> tuple[bytes, NameRecord]:
        snap = new.snapshot
        body = {"snapshot": None if snap is None else snap.to_dict(), "written_at": time.time()}
        data = seal(_RECORD_MAGIC, _RECORD_FORMAT, json.dumps(body).encode())
        return data, NameRecord(record_id, snap, None if base is None else base.snapshot)


def read_named(store: ObjectStore, table_path: str, name: str) -> TableSnapshot | None:
    """The snapshot last taken under ``name`` (None: none, or deleted)."""
    return NamedSnapshotRecords(store, table_path, name, 1).read_latest().snapshot


def _listed_names(store: ObjectStore, table_path: str) -> list[str]:
    """Every name that has a record (deleted ones included), sorted."""
    prefix = snapshot_dir(table_path) + "/"
    found = {meta.path[len(prefix) :].split("/", 1)[0] for meta in store.list(prefix)}
    return sorted(n for n in found if is_snapshot_name(n))


def snapshot_names(store: ObjectStore, table_path: str) -> list[str]:
    """The names of the table's snapshots, sorted (deleted names left out)."""
    return [n for n in _listed_names(store, table_path) if read_named(store, table_path, n)]


def take_named(
    maps: ShardMapStore,
    lifetime: timedelta | None,
    name: str,
    attempts: int,
    *,
    wal_url: str | None = None,
) -> tuple[TableSnapshot, ShardMap]:
    """Steps 1-5: take a snapshot and make it the one ``name`` finds (``wal_url``: the shards'
    separate WAL store, as :func:`~slatedb_core.table.snapshot.take_snapshot`)."""
    records = NamedSnapshotRecords(maps.store, maps.table_path, name, attempts)
    for _ in range(attempts):
        started = time.time()
        snapshot, m = take_snapshot(maps, lifetime, name, attempts, wal_url=wal_url)
        try:
            ours = records.update(snapshot, taken_at=started)
        except BaseException:
            _release_unless_recorded(records, snapshot)
            raise
        if not same_snapshot(ours.snapshot, snapshot):
            release_snapshot(maps.store, snapshot)  # step 2 refused: too old to record
            log.warning(
                "table %r: snapshot %r took too long to record; taking it again",
                maps.table_path,
                name,
            )
            continue
        if ours.replaced is not None:
            release_snapshot(maps.store, ours.replaced)
        if _alive(records, ours, started):
            _sweep(maps, records, (snapshot, ours.replaced))
            return snapshot, m
        log.warning(
            "table %r: snapshot %r may have been swept while being recorded; taking it again",
            maps.table_path,
            name,
        )
    raise CommitRetriesExhausted(f"named snapshot {name!r} of table {maps.table_path!r}", attempts)


def _too_old(started: float) -> bool:
    """Whether checkpoints taken from ``started`` on may have been swept as a dead creator's."""
    return time.time() - started >= TAKE_MAX_AGE.total_seconds()


def _alive(records: NamedSnapshotRecords, ours: NameRecord, started: float) -> bool:
    """Step 4: whether ``ours``, just committed, needs no new take."""
    if _too_old(started):
        return False  # a sweep that did not see our version may have deleted its checkpoints
    if records.seq.latest_id() != ours.id:
        return True  # a later creator built on it and released it: the last one wins
    assert ours.snapshot is not None
    return snapshot_present(records.store, ours.snapshot)


def _release_unless_recorded(records: NamedSnapshotRecords, snapshot: TableSnapshot) -> None:
    """After a failed step 2: release ``snapshot`` unless its version landed and is the latest
    (then it is the named snapshot; a later version's creator releases it)."""
    try:
        holds = same_snapshot(records.read_latest().snapshot, snapshot)
    except SlateDBError as e:
        log.warning(
            "snapshot %r: cannot tell whether it was recorded; its checkpoints expire "
            "or are swept: %s",
            records.name,
            e,
        )
        return
    if not holds:
        release_snapshot(records.store, snapshot)


def delete_named(maps: ShardMapStore, name: str, attempts: int) -> TableSnapshot | None:
    """Delete the snapshot named ``name``: commit a tombstone, release its checkpoints, sweep
    (even if nothing was named so: dead creators may have left checkpoints under the name).
    Returns what was deleted (None: nothing was named so)."""
    records = NamedSnapshotRecords(maps.store, maps.table_path, name, attempts)
    committed = records.update(None, only_if_named=True)
    if committed.replaced is not None:
        release_snapshot(maps.store, committed.replaced)
    _sweep(maps, records, (committed.replaced,))
    return committed.replaced


def release_named(maps: ShardMapStore, snapshot: TableSnapshot, attempts: int) -> bool:
    """Delete the name ``snapshot`` was taken under if, and only if, it still finds that
    snapshot (a newer snapshot under the name is left alone). Whether it was deleted. The
    caller releases ``snapshot``'s checkpoints. Sweeps the name either way."""
    if snapshot.name is None:
        return False
    records = NamedSnapshotRecords(maps.store, maps.table_path, snapshot.name, attempts)
    committed = records.update(None, only_over=snapshot)
    if committed.replaced is not None:
        release_snapshot(maps.store, committed.replaced)
    _sweep(maps, records, (snapshot,))
    return committed.replaced is not None


def _sweep(
    maps: ShardMapStore, records: NamedSnapshotRecords, known: Iterable[TableSnapshot | None]
) -> None:
    """Step 5, best effort (what it misses, the next one or table GC finds)."""
    try:
        _sweep_shards(maps, frozenset({records.name}), known)
    except SlateDBError as e:
        log.warning(
            "table %r: sweeping leftovers of snapshot %r: %s", maps.table_path, records.name, e
        )


def sweep_snapshot_leftovers(maps: ShardMapStore) -> int:
    """Step 5 for every name: the names that have a record, and those found only on shard
    checkpoints (a creator that died before its name's first record). Returns how many
    checkpoints were deleted."""
    store, table_path = maps.store, maps.table_path
    known = [read_named(store, table_path, n) for n in _listed_names(store, table_path)]
    return _sweep_shards(maps, None, known)  # reads the records it keeps again, after its clock


def _sweep_shards(
    maps: ShardMapStore, names: frozenset[str] | None, known: Iterable[TableSnapshot | None]
) -> int:
    """Step 5 for ``names`` (None: every name) on every shard the latest map names (live or
    retired) or ``known`` covers; how many checkpoints it deleted."""
    now = time.time()  # before any record is read (module docstring)
    latest = maps.read_latest()
    paths = dict.fromkeys([*(s.db_path for s in latest.shards), *latest.retired])
    for snap in known:
        if snap is not None:
            paths.update(dict.fromkeys(s.db_path for s in snap.shards))
    cutoff = now - SWEEP_MIN_AGE.total_seconds()
    old: dict[str, list[tuple[str, uuid.UUID]]] = {}
    for db_path in paths:
        try:
            found = list_checkpoints(db_path, maps.store)
        except (DatabaseNotFound, DatabaseDestroyed):
            continue
        for c in found:
            name = _snapshot_name_of(maps.table_path, c.name)
            if (
                name is not None
                and (names is None or name in names)
                and (c.create_time_s <= cutoff)
            ):
                old.setdefault(name, []).append((db_path, c.id))
    deleted = 0
    for name, pairs in sorted(old.items()):
        current = read_named(maps.store, maps.table_path, name)
        keep = set() if current is None else set(current.checkpoints)
        doomed = [(db_path, cid) for db_path, cid in pairs if cid not in keep]
        if doomed:
            log.info(
                "table %r: deleting %d leftover checkpoint(s) of snapshot %r",
                maps.table_path,
                len(doomed),
                name,
            )
            release_checkpoints(maps.store, doomed)
            deleted += len(doomed)
    return deleted


def _snapshot_name_of(table_path: str, checkpoint_name: str | None) -> str | None:
    """The snapshot name a shard checkpoint named ``checkpoint_name`` was taken under (None: it
    belongs to no named snapshot of ``table_path``)."""
    prefix = snapshot_checkpoint_name(table_path, None) + ":"
    if checkpoint_name is None or not checkpoint_name.startswith(prefix):
        return None
    name = checkpoint_name[len(prefix) :]
    return name if is_snapshot_name(name) else None


def collect_snapshot_records(
    store: ObjectStore, table_path: str, min_age: timedelta, now: float | None = None
) -> int:
    """Delete the versions of every name's record older than ``min_age``, never a latest one:
    first move the name's boundary over them (SlateDB RFC 0026), then delete. Each version was
    released by the creator that replaced it (or is swept). Returns how many were deleted."""
    deleted = 0

    def delete(doomed: Sequence[SequencedEntry]) -> None:
        nonlocal deleted
        for e in doomed:
            try:
                store.delete(e.path)
                deleted += 1
            except ObjectNotFound:
                pass

    for name in _listed_names(store, table_path):
        seq = NamedSnapshotRecords(store, table_path, name, 1).seq
        entries = seq.list()
        if entries:
            collect_old_versions(
                seq.boundary,
                entries,
                entries[-1].id,
                min_age_s=min_age.total_seconds(),
                now_s=time.time() if now is None else now,
                delete=delete,
            )
    return deleted
