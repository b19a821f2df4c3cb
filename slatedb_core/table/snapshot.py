"""Table snapshots: one checkpoint of every shard of one shard-map version, taken, refreshed and
released together (:class:`TableSnapshot`).

Taking one (:func:`take_snapshot`): a checkpoint of each shard of the latest map, then the map is
read again; if a rescale committed meanwhile the checkpoints are dropped and taken again on the
new map, so every checkpoint belongs to one map version. The checkpoints keep what the manifests
pinned (SlateDB RFC 0004, "Creating a Checkpoint") and the WAL SSTs each names
(:func:`~slatedb_core.checkpoints.covered_wal`), retired shards included, until they are
released or their lifetime ends.

A snapshot carries the value encoding of its map version (:attr:`TableSnapshot.value_encoding`):
an overwrite may record other columns later (docs/overwrite.md), and the GC may collect that map
version, but the snapshot's values keep the encoding they were written with. Every read that
decodes a snapshot's values takes it from :func:`snapshot_value_encoding`.

Named snapshots, which a table records so they can be found again by name, are
:mod:`slatedb_core.table.named_snapshots`.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from slatedb_core.checkpoints import refresh_checkpoint as refresh_shard_checkpoint
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
    ShardMapConflict,
    SlateDBError,
)
from slatedb_core.keys import KeyRange
from slatedb_core.options import CheckpointOptions, check_instance, check_optional_duration
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.table.options import TableOptions
from slatedb_core.table.shardmap import Shard, ShardMap, ShardMapStore, ValueEncoding

log = logging.getLogger(__name__)

__all__ = [
    "TableSnapshot",
    "check_snapshot_name",
    "checkpoint_pairs",
    "is_snapshot_name",
    "refresh_snapshot",
    "release_checkpoints",
    "release_snapshot",
    "same_snapshot",
    "snapshot_checkpoint_name",
    "snapshot_present",
    "snapshot_value_encoding",
    "table_wal_url",
    "take_snapshot",
]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class TableSnapshot:
    """A checkpoint of every shard of one shard-map version: a consistent, repeatable view of
    each shard that survives rescaling (the checkpoints keep the retired databases' SSTs) until
    :meth:`Table.release_snapshot <slatedb_core.table.table.Table.release_snapshot>` or their
    lifetime. Self-contained and JSON-serialisable, so a driver can hand it to tasks
    (``to_json``/``from_json``). ``name``: the name it was taken under, if any.

    What it holds (docs/checkpoints-and-readers.md, "What a checkpoint holds"): every write
    acknowledged before :meth:`Table.snapshot <slatedb_core.table.table.Table.snapshot>` was
    called, whether in L0, in sorted runs or still only in its shard's WAL (a live writer's or a
    closed one's), and no write acknowledged after it returned; a write acknowledged while it
    ran may be in it or not, shard by shard. A write made with ``await_durable=False`` counts
    once it is durable; with ``max_parallel_writes`` above 1, one acknowledged ahead of an
    earlier write still in flight counts once that one has landed too. The same rows whatever
    readers opened on the shards before: each shard's checkpoint names, in the update that
    creates it, the WAL SSTs durable then
    (:func:`~slatedb_core.checkpoints.covered_wal`), and a reader at it, ours or SlateDB's,
    replays exactly those."""

    table_path: str
    shard_map_id: int
    shards: tuple[Shard, ...]
    checkpoints: tuple[uuid.UUID, ...]
    name: str | None = None
    value_encoding: ValueEncoding | None = None
    """How the values of map version ``shard_map_id`` hold columns (None: plain values), when
    :attr:`carries_encoding`; read it through :func:`snapshot_value_encoding`."""
    carries_encoding: bool = False
    """Whether :attr:`value_encoding` was recorded when the snapshot was taken (False for a
    snapshot serialised before snapshots carried it: its map version tells)."""

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as a JSON-ready dict (:meth:`from_dict` reads it back)."""
        enc = self.value_encoding
        carried = (
            {
                "value_encoding": None
                if enc is None
                else {"format": enc.format, "schema": enc.schema}
            }
            if self.carries_encoding
            else {}
        )  # absent: not known (as before it was carried)
        return {
            **carried,
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
                    "sealed": s.sealed,
                    "checkpoint": str(c),
                }
                for s, c in zip(self.shards, self.checkpoints, strict=True)
            ],
        }

    def to_json(self) -> str:
        """The snapshot as a JSON string (:meth:`from_json` reads it back)."""
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
                    _flag(s.get("sealed", False)),
                )
                for s in d["shards"]
            )
            cps = tuple(uuid.UUID(s["checkpoint"]) for s in d["shards"])
            name = d.get("name")
            if name is not None:
                check_snapshot_name(name)
            carried = "value_encoding" in d
            enc = d.get("value_encoding")
            encoding = (
                None if enc is None else ValueEncoding(str(enc["format"]), str(enc["schema"]))
            )
            return TableSnapshot(
                str(d["table_path"]), int(d["shard_map_id"]), shards, cps, name, encoding, carried
            )
        # RecursionError: deeply nested JSON; OverflowError: int() of Infinity or 1e400;
        # AttributeError: a JSON value that is not an object.
        except (
            ValueError,
            KeyError,
            TypeError,
            RecursionError,
            OverflowError,
            AttributeError,
        ) as e:
            raise InvalidArgument(f"not a table snapshot: {type(e).__name__}: {e}") from None

    @staticmethod
    def from_json(text: str) -> TableSnapshot:
        """A snapshot from :meth:`to_json`'s text; InvalidArgument if it is not one."""
        try:
            d = json.loads(text)
        except (ValueError, TypeError, RecursionError) as e:
            raise InvalidArgument(f"not a table snapshot: {type(e).__name__}: {e}") from None
        return TableSnapshot.from_dict(d)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"sealed must be true or false, got {value!r}")
    return value


def same_snapshot(a: TableSnapshot | None, b: TableSnapshot | None) -> bool:
    """Whether ``a`` and ``b`` are one snapshot: the same checkpoints of the same table. (Not
    ``==``: the shards' seal flags or a copy's name do not make it another snapshot.)"""
    if a is None or b is None:
        return False
    return a.table_path == b.table_path and a.checkpoints == b.checkpoints


def is_snapshot_name(name: str) -> bool:
    """Whether ``name`` passes :func:`check_snapshot_name`."""
    return _NAME.fullmatch(name) is not None


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
def table_wal_url(options: TableOptions) -> str | None:
    """The separate WAL store of a table's shards (SlateDB RFC 0009), as its options name it: the
    readers' ``wal_url``, else the writers' (None: the WAL is in the main store)."""
    return options.reader.wal_url or options.writer.wal_url


def take_snapshot(
    maps: ShardMapStore,
    lifetime: timedelta | None,
    name: str | None,
    attempts: int,
    *,
    wal_url: str | None = None,
) -> tuple[TableSnapshot, ShardMap]:
    """A checkpoint of every shard of the latest map, and that map. ShardMapConflict if a rescale
    committed during each of ``attempts`` tries. ``wal_url``: the shards' separate WAL store
    (:func:`table_wal_url`), where each checkpoint finds the WAL SSTs it names; without it, a
    shard whose WAL is elsewhere raises WalStoreMissing and no checkpoint is left."""
    check_optional_duration("checkpoint lifetime", lifetime)
    store, path = maps.store, maps.table_path
    opts = CheckpointOptions(lifetime=lifetime, name=snapshot_checkpoint_name(path, name))
    for _ in range(attempts):
        m = maps.read_latest()
        taken: list[tuple[str, uuid.UUID]] = []
        try:
            for s in m.shards:
                cp = create_checkpoint(s.db_path, store, opts, wal_url=wal_url)
                taken.append((s.db_path, cp.id))
            if maps.seq.latest_id() == m.id:
                cps = tuple(c for _, c in taken)
                return TableSnapshot(path, m.id, m.shards, cps, name, m.value_encoding, True), m
        except (DatabaseDestroyed, DatabaseNotFound):
            pass  # a rescale retired a shard under us: the map has moved on
        except BaseException:
            release_checkpoints(store, taken)
            raise
        release_checkpoints(store, taken)
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
    release_checkpoints(store, checkpoint_pairs(snapshot))


def checkpoint_pairs(snapshot: TableSnapshot) -> list[tuple[str, uuid.UUID]]:
    return [(s.db_path, c) for s, c in zip(snapshot.shards, snapshot.checkpoints, strict=True)]


def release_checkpoints(store: ObjectStore, pairs: Iterable[tuple[str, uuid.UUID]]) -> None:
    for db_path, cid in pairs:
        try:
            delete_checkpoint(db_path, store, cid)
        except (CheckpointNotFound, DatabaseNotFound):
            pass
        except SlateDBError as e:
            log.warning("could not delete checkpoint %s of %r (it expires): %s", cid, db_path, e)


def snapshot_present(store: ObjectStore, snapshot: TableSnapshot) -> bool:
    """Whether every checkpoint of ``snapshot`` is still there."""
    for db_path, cid in checkpoint_pairs(snapshot):
        try:
            names = list_checkpoints(db_path, store, None)
        except DatabaseNotFound:
            return False
        if all(c.id != cid for c in names):
            return False
    return True


def snapshot_value_encoding(maps: ShardMapStore, snapshot: TableSnapshot) -> ValueEncoding | None:
    """How the values of ``snapshot`` hold columns (None: plain values): the encoding of its own
    map version, not the latest's (an overwrite since may have recorded other columns).

    A snapshot taken since snapshots carry it has it. One serialised before has it looked up:
    in its map version, or, if the GC collected that version, in the oldest version left when
    that one still names a shard of the snapshot's time (an id at or below the snapshot's
    highest: only an overwrite changes the encoding, and its swap replaces every shard with
    ones of fresh ids, docs/overwrite.md). Otherwise nothing tells it: InvalidArgument saying
    to read the raw values or take the snapshot again."""
    if snapshot.carries_encoding:
        return snapshot.value_encoding
    try:
        return maps.read(snapshot.shard_map_id).value_encoding
    except ObjectNotFound:
        pass  # collected: a later version may still tell
    newest_then = max(s.shard_id for s in snapshot.shards)
    for entry in maps.seq.list(start=snapshot.shard_map_id + 1):
        try:
            later = maps.read(entry.id)
        except ObjectNotFound:
            continue  # collected meanwhile: the next one
        if any(s.shard_id <= newest_then for s in later.shards):
            return later.value_encoding
        break
    raise InvalidArgument(
        f"snapshot {snapshot.name or ''!r} of table {snapshot.table_path!r}: its value encoding "
        f"is unknown (it was recorded before snapshots carried it, its shard map version "
        f"{snapshot.shard_map_id} was collected and the table was overwritten since); read its "
        "raw values (schema 'key binary, value binary') or take the snapshot again"
    )
