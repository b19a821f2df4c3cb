"""Table snapshots: one checkpoint of every shard of one shard-map version, taken, refreshed and
released together (:class:`TableSnapshot`), and named snapshots, which a table keeps a record of
so they can be found again by name.

Taking one (:func:`take_snapshot`): a checkpoint of each shard of the latest map, then the map is
read again; if a rescale committed meanwhile the checkpoints are dropped and taken again on the
new map, so every checkpoint belongs to one map version. The checkpoints keep what the manifests
pinned (SlateDB RFC 0004, "Creating a Checkpoint"), retired shards included, until they are
released or their lifetime ends.

A named snapshot ``N`` is the record ``<table>/snapshots/N.snapshot`` (:func:`slatedb_core.layout.
snapshot_record_path`) holding the snapshot, its checkpoints named ``table-snapshot:<table>:N``.
(Re-)creating ``N``::

    1  take     checkpoints of every shard (as above), with the lifetime asked
    2  record   replace the record by a conditional write (put_if_match on the version read,
                put_if_absent when there is none): creators of one name are serialised, the
                last one wins
    3  release  the checkpoints of the record that step 2 replaced: every record is released
                by exactly the creator that replaced it, so re-creating a name, even from
                several processes at once, leaks no checkpoint
    4  sweep    checkpoints of the name that no record holds and older than SWEEP_MIN_AGE:
                what a creator that died between 1 and 3 left (a running creator is younger)

Deleting ``N`` replaces its record by a tombstone the same way, then releases and sweeps. The
tombstone stays (a few bytes): deleting the object could erase a record a concurrent creator
has just written, since the store has no conditional delete.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from slatedb_core.checkpoints import refresh_checkpoint as refresh_shard_checkpoint
from slatedb_core.errors import (
    CheckpointNotFound,
    CommitRetriesExhausted,
    CorruptionError,
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    ShardMapConflict,
    SlateDBError,
    StoreError,
)
from slatedb_core.keys import KeyRange
from slatedb_core.layout import SNAPSHOT_SUFFIX, snapshot_dir, snapshot_record_path
from slatedb_core.options import CheckpointOptions, check_instance, check_optional_duration
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion, validate_relative_path
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore

log = logging.getLogger(__name__)

__all__ = [
    "SWEEP_MIN_AGE",
    "TableSnapshot",
    "check_snapshot_name",
    "delete_named",
    "read_named",
    "refresh_snapshot",
    "release_snapshot",
    "snapshot_checkpoint_name",
    "snapshot_names",
    "take_named",
    "take_snapshot",
]

SWEEP_MIN_AGE = timedelta(hours=1)
"""A checkpoint of a named snapshot that no record holds is deleted by the next (re-)creation or
deletion of that name only once it is this old: younger, it may belong to a creator still
running (taking checkpoints of every shard takes seconds, not an hour)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_RECORD_FORMAT = 1


@dataclass(frozen=True)
class TableSnapshot:
    """A checkpoint of every shard of one shard-map version: a consistent, repeatable view of
    each shard that survives rescaling (the checkpoints keep the retired databases' SSTs) until
    :meth:`Table.release_snapshot <slatedb_core.table.table.Table.release_snapshot>` or their
    lifetime. Self-contained and JSON-serialisable, so a driver can hand it to tasks
    (``to_json``/``from_json``). ``name``: the name it was taken under, if any.

    Each checkpoint holds what its shard's manifest held when it was taken: data ingested with
    ``bulk_ingest`` or flushed to L0; writes still only in a live writer's WAL are not in it."""

    table_path: str
    shard_map_id: int
    shards: tuple[Shard, ...]
    checkpoints: tuple[uuid.UUID, ...]
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_path": self.table_path,
            "shard_map_id": self.shard_map_id,
            "name": self.name,
            "shards": [
                {
                    "index": s.index,
                    "id": s.shard_id,
                    "start": None if s.key_range.start is None else s.key_range.start.hex(),
                    "end": None if s.key_range.end is None else s.key_range.end.hex(),
                    "db": s.db_path,
                    "checkpoint": str(c),
                }
                for s, c in zip(self.shards, self.checkpoints, strict=True)
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @staticmethod
    def from_dict(d: Any) -> TableSnapshot:
        """The snapshot ``d`` (as :meth:`to_dict` made it) describes; InvalidArgument if it is
        not one."""
        try:
            shards = tuple(
                Shard(
                    int(s["index"]),
                    KeyRange(
                        None if s["start"] is None else bytes.fromhex(s["start"]),
                        None if s["end"] is None else bytes.fromhex(s["end"]),
                    ),
                    validate_relative_path(str(s["db"]), what="shard database path"),
                    int(s["id"]),
                )
                for s in d["shards"]
            )
            cps = tuple(uuid.UUID(s["checkpoint"]) for s in d["shards"])
            name = d.get("name")
            if name is not None:
                check_snapshot_name(name)
            return TableSnapshot(str(d["table_path"]), int(d["shard_map_id"]), shards, cps, name)
        # RecursionError: deeply nested JSON; OverflowError: int() of Infinity or 1e400;
        # AttributeError: a JSON value that is not an object.
        except (
            ValueError, KeyError, TypeError, RecursionError, OverflowError, AttributeError
        ) as e:
            raise InvalidArgument(f"not a table snapshot: {type(e).__name__}: {e}") from None

    @staticmethod
    def from_json(text: str) -> TableSnapshot:
        try:
            d = json.loads(text)
        except (ValueError, TypeError, RecursionError) as e:
            raise InvalidArgument(f"not a table snapshot: {type(e).__name__}: {e}") from None
        return TableSnapshot.from_dict(d)


def check_snapshot_name(name: object) -> str:
    """A snapshot name: 1-128 ASCII letters, digits, ``.``, ``_`` or ``-``, starting with a letter
    or digit (it names an object, so nothing that could be a path)."""
    check_instance("snapshot name", name, str)
    assert isinstance(name, str)
    if not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"snapshot name must be 1-128 of [A-Za-z0-9._-], starting with a letter or digit: "
            f"{name!r}"
        )
    return name


def snapshot_checkpoint_name(table_path: str, name: str | None) -> str:
    """The name of the shard checkpoints of a snapshot of ``table_path`` (named ``name``)."""
    return f"table-snapshot:{table_path}" if name is None else f"table-snapshot:{table_path}:{name}"


# ---- taking, refreshing, releasing -----------------------------------------------------------
def take_snapshot(
    maps: ShardMapStore, lifetime: timedelta | None, name: str | None, attempts: int
) -> tuple[TableSnapshot, ShardMap]:
    """A checkpoint of every shard of the latest map, and that map. ShardMapConflict if a rescale
    committed during each of ``attempts`` tries."""
    check_optional_duration("checkpoint lifetime", lifetime)
    store, path = maps.store, maps.table_path
    opts = CheckpointOptions(lifetime=lifetime, name=snapshot_checkpoint_name(path, name))
    for _ in range(attempts):
        m = maps.read_latest()
        taken: list[tuple[str, uuid.UUID]] = []
        try:
            for s in m.shards:
                taken.append((s.db_path, create_checkpoint(s.db_path, store, opts).id))
            if maps.seq.latest_id() == m.id:
                cps = tuple(c for _, c in taken)
                return TableSnapshot(path, m.id, m.shards, cps, name), m
        except (DatabaseDestroyed, DatabaseNotFound):
            pass  # a rescale retired a shard under us: the map has moved on
        except BaseException:
            _release(store, taken)
            raise
        _release(store, taken)
    raise ShardMapConflict(f"table {path!r}: the shard map kept changing during snapshot")


def refresh_snapshot(
    store: ObjectStore, snapshot: TableSnapshot, lifetime: timedelta | None
) -> None:
    """Move the expiry of every checkpoint of ``snapshot`` to now + ``lifetime`` (None: never).
    CheckpointNotFound if one is gone or already expired (the snapshot is then incomplete:
    release it and take a new one)."""
    check_optional_duration("checkpoint lifetime", lifetime)
    for s, cid in zip(snapshot.shards, snapshot.checkpoints, strict=True):
        try:
            refresh_shard_checkpoint(s.db_path, store, cid, lifetime)
        except DatabaseNotFound:
            msg = f"checkpoint {cid}: database {s.db_path!r} is gone"
            raise CheckpointNotFound(cid, msg) from None


def release_snapshot(store: ObjectStore, snapshot: TableSnapshot) -> None:
    """Delete the snapshot's checkpoints (those already gone are skipped)."""
    _release(store, _pairs(snapshot))


def _pairs(snapshot: TableSnapshot) -> list[tuple[str, uuid.UUID]]:
    return [(s.db_path, c) for s, c in zip(snapshot.shards, snapshot.checkpoints, strict=True)]


def _release(store: ObjectStore, pairs: Iterable[tuple[str, uuid.UUID]]) -> None:
    for db_path, cid in pairs:
        try:
            delete_checkpoint(db_path, store, cid)
        except (CheckpointNotFound, DatabaseNotFound):
            pass
        except SlateDBError as e:
            log.warning("could not delete checkpoint %s of %r (it expires): %s", cid, db_path, e)


def _present(store: ObjectStore, snapshot: TableSnapshot) -> bool:
    """Whether every checkpoint of ``snapshot`` is still there."""
    for db_path, cid in _pairs(snapshot):
        try:
            names = list_checkpoints(db_path, store, None)
        except DatabaseNotFound:
            return False
        if all(c.id != cid for c in names):
            return False
    return True


# ---- named snapshots -------------------------------------------------------------------------
@dataclass(frozen=True)
class _Record:
    snapshot: TableSnapshot | None
    """None: a tombstone (the name was deleted)."""
    nonce: str
    """Unique per write: tells a writer whether a write of unknown outcome landed."""
    version: ObjectVersion | None


_NO_RECORD = _Record(None, "", None)


def _encode_record(snapshot: TableSnapshot | None, nonce: str) -> bytes:
    body = {
        "format": _RECORD_FORMAT,
        "nonce": nonce,
        "written_at": time.time(),
        "snapshot": None if snapshot is None else snapshot.to_dict(),
    }
    return json.dumps(body).encode()


def _read_record(store: ObjectStore, path: str) -> _Record:
    try:
        got = store.get(path)
    except ObjectNotFound:
        return _NO_RECORD
    try:
        body = json.loads(got.data)
        if body.get("format") != _RECORD_FORMAT:
            raise ValueError(f"unknown record format {body.get('format')!r}")
        raw = body["snapshot"]
        snapshot = None if raw is None else TableSnapshot.from_dict(raw)
        return _Record(snapshot, str(body["nonce"]), got.version)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, InvalidArgument) as e:
        raise CorruptionError(path, f"not a snapshot record: {e}") from None


def read_named(store: ObjectStore, table_path: str, name: str) -> TableSnapshot | None:
    """The snapshot last taken under ``name`` (None: none, or deleted)."""
    path = snapshot_record_path(table_path, check_snapshot_name(name))
    return _read_record(store, path).snapshot


def snapshot_names(store: ObjectStore, table_path: str) -> list[str]:
    """The names of the table's snapshots, sorted (deleted names left out)."""
    out = []
    for meta in store.list(snapshot_dir(table_path) + "/"):
        file = meta.path.rsplit("/", 1)[-1]
        name = file.removesuffix(SNAPSHOT_SUFFIX)
        if name == file or not _NAME.fullmatch(name):
            continue
        if read_named(store, table_path, name) is not None:
            out.append(name)
    return out


def _replace_record(
    store: ObjectStore, path: str, new: TableSnapshot | None, attempts: int
) -> tuple[list[TableSnapshot], bool]:
    """Step 2: write ``new`` (None: a tombstone) over the record. Returns the snapshots to
    release, and whether an earlier attempt may have landed and been replaced since by another
    creator (who then released ``new``'s checkpoints: the caller checks).

    A conflict or a store error leaves the attempt's outcome unknown (a store retries a request
    whose first try landed and reports the conflict with itself); the next read settles it by
    the write's nonce: found there, it landed on the version read before it. Whether or not
    such an attempt landed, the version it read is not the record once a later attempt has
    landed: the write replaced it, or another creator did and released it; so every version
    read is released (releasing twice is harmless)."""
    nonce = uuid.uuid4().hex
    data = _encode_record(new, nonce)
    read: list[TableSnapshot] = []
    unsettled = False
    for _ in range(attempts):
        current = _read_record(store, path)
        if unsettled and current.nonce == nonce:
            return read, False  # an earlier attempt landed; nobody replaced it since
        if current.snapshot is not None and current.snapshot not in read:
            read.append(current.snapshot)
        try:
            if current.version is None:
                store.put_if_absent(path, data)
            else:
                store.put_if_match(path, data, current.version)
            return read, unsettled
        except (ObjectAlreadyExists, PreconditionFailed, StoreError) as e:
            if isinstance(e, StoreError) and not e.retryable:
                raise
            unsettled = True
    raise CommitRetriesExhausted(f"named snapshot {path}", attempts)


def take_named(
    maps: ShardMapStore, lifetime: timedelta | None, name: str, attempts: int
) -> tuple[TableSnapshot, ShardMap]:
    """Steps 1-4: take a snapshot and make it the one ``name`` finds."""
    check_snapshot_name(name)
    store, path = maps.store, snapshot_record_path(maps.table_path, name)
    for _ in range(attempts):
        snapshot, m = take_snapshot(maps, lifetime, name, attempts)
        try:
            replaced, uncertain = _replace_record(store, path, snapshot, attempts)
        except BaseException:
            try:
                holds = _read_record(store, path).snapshot == snapshot
            except SlateDBError:
                raise  # cannot tell whether the record holds them: they expire or are swept
            if not holds:
                release_snapshot(store, snapshot)
            raise
        for old in replaced:
            release_snapshot(store, old)
        if uncertain and not _present(store, snapshot):
            continue  # superseded and released meanwhile: the record holds a dead snapshot
        _sweep(maps, name, (snapshot, *replaced), time.time())
        return snapshot, m
    raise CommitRetriesExhausted(f"named snapshot {path}", attempts)


def delete_named(maps: ShardMapStore, name: str, attempts: int) -> TableSnapshot | None:
    """Delete the snapshot named ``name``: tombstone its record, release its checkpoints, sweep.
    Returns what was deleted (None: nothing was named so)."""
    store, path = maps.store, snapshot_record_path(maps.table_path, check_snapshot_name(name))
    if _read_record(store, path).snapshot is None:
        return None
    replaced, _ = _replace_record(store, path, None, attempts)
    for old in replaced:
        release_snapshot(store, old)
    _sweep(maps, name, replaced, time.time())
    return replaced[-1] if replaced else None


def _sweep(
    maps: ShardMapStore, name: str, known: Iterable[TableSnapshot | None], now: float
) -> None:
    """Step 4, best effort (what it misses, the next one finds)."""
    try:
        _sweep_shards(maps, name, known, now)
    except SlateDBError as e:
        log.warning("table %r: sweeping leftovers of snapshot %r: %s", maps.table_path, name, e)


def _sweep_shards(
    maps: ShardMapStore, name: str, known: Iterable[TableSnapshot | None], now: float
) -> None:
    """Step 4 on every shard the latest map names (live or retired) or ``known`` covers."""
    store, table_path = maps.store, maps.table_path
    current = _read_record(store, snapshot_record_path(table_path, name)).snapshot
    keep = set() if current is None else set(current.checkpoints)
    latest = maps.read_latest()
    paths = dict.fromkeys([*(s.db_path for s in latest.shards), *latest.retired])
    for snap in known:
        if snap is not None:
            paths.update(dict.fromkeys(s.db_path for s in snap.shards))
    cp_name = snapshot_checkpoint_name(table_path, name)
    cutoff = now - SWEEP_MIN_AGE.total_seconds()
    for db_path in paths:
        try:
            found = list_checkpoints(db_path, store, cp_name)
        except (DatabaseNotFound, DatabaseDestroyed):
            continue
        old = [(db_path, c.id) for c in found if c.id not in keep and c.create_time_s <= cutoff]
        if old:
            log.info("table %r: deleting %d leftover checkpoint(s) of snapshot %r in %r",
                     table_path, len(old), name, db_path)
            _release(store, old)
