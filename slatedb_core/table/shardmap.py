"""The shard map of a sharded table: which database serves which key range.

A table lives under one root prefix::

    <table>/shardmap/{id:020}.shardmap     the map, one sequenced object per version
    <table>/shardmap/_latest_version       advisory pointer (Lance issue #1362)
    <table>/gc/shardmap.boundary           GC boundary of the map namespace (SlateDB RFC 0026)
    <table>/shards/{shard_id:010}/         one database per shard, ever (ids are never reused)

(names from :mod:`slatedb_core.layout`). Versions are committed exactly like manifests, through
the update loop of :mod:`slatedb_core.meta.versioned`: the filename is the commit point
(create-if-absent), every create is checked against the boundary, and old versions are deleted
only behind it and never the latest. So of two jobs that change the map from the same version,
exactly one wins; the other backs off and re-applies its change to the winner's map.

Encoding: the sealed envelope of :mod:`slatedb_core.meta.envelope` (magic ``SDBT``, format
version 1, nonce, CRC-32) around UTF-8 JSON. Keys are hex in the JSON; databases are named by
their path relative to the table root, so a table can be read under another prefix. A decoded map
is validated: its shards must tile the whole key space in order (first start and last end
unbounded, each end the next start, none empty) and pending operations must name existing
shards; anything else is a :class:`CorruptionError`.

A map may carry *pending operations*: a split, merge or replace (an overwrite of the whole
table, :mod:`slatedb_core.table.overwrite`) that has sealed its source shards (their writers must
refuse to write, see :mod:`slatedb_core.table.rescale`) and names the databases it will put in
their place. It also lists the *retired* databases: former shards that were (or are
about to be) soft-destroyed and are kept listed until they are gone, so that nothing needs to
list the store to find them. And it keeps the *outcomes of the last overwrites*
(:class:`OverwriteOutcome`, at most :data:`OVERWRITES_KEPT`): each written by the map commit that
ended the overwrite (its swap, or the cancel or abort that dropped it), carried by every later
version, so that a retry of an overwrite job tells from the latest map alone whether it committed
(docs/overwrite.md, "Retries"). Last, the *reservations* (:class:`Reservation`): the shard ids each
overwrite plan reserved, kept until nothing can remain of their databases (the swap made them
shards, or the overwrite was cancelled and its targets destroyed), so that ``Table.resume()`` and
the table GC find the targets an overwrite left without listing the store (docs/overwrite.md,
"Leftovers").
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pyarrow as pa

from slatedb_core.errors import (
    CorruptionError,
    DatabaseNotFound,
    InvalidArgument,
    ObjectNotFound,
)
from slatedb_core.keys import KeyRange
from slatedb_core.layout import SHARDMAP_DIR, SHARDMAP_SUFFIX, join
from slatedb_core.manifest.model import AppVersion
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.meta.json_doc import load_stored_json
from slatedb_core.meta.sequenced import FIRST_ID, SequencedEntry, SequencedStore
from slatedb_core.meta.versioned import RetryPolicy, VersionedStore, collect_old_versions
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path
from slatedb_core.table.map_json import range_json, range_of, txn_json, txn_of
from slatedb_core.table.routing import route

SHARDMAP_MAGIC = b"SDBT"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({FORMAT_VERSION})


@dataclass(frozen=True, slots=True)
class Shard:
    """One contiguous key range of a table and the database serving it."""

    index: int
    """Position in the map (0 = lowest keys); changes when shards before it split or merge."""
    key_range: KeyRange
    db_path: str
    """The database, usable with ``Db.open(db_path, store)`` and ``DbReader.open``."""
    shard_id: int
    """Stable for the life of the shard; never reused by the table."""
    sealed: bool = False
    """A split or merge of this shard is under way: its writers must not write."""

    def contains(self, key: bytes) -> bool:
        """Whether ``key`` belongs to this shard's key range."""
        return self.key_range.contains(key)


PENDING_KINDS: tuple[str, ...] = ("split", "merge", "replace")


@dataclass(frozen=True, slots=True)
class PendingOp:
    """A split, merge or replace that sealed ``sources`` and will replace them by ``targets``.

    A replace (an overwrite, :mod:`slatedb_core.table.overwrite`) names every shard of the map
    as its sources; its targets are databases already holding the new contents. ``txn`` and
    ``value_encoding`` belong to a replace only: the overwrite's exactly-once batch (decided
    against the sources once they are fenced) and the value encoding the swap records."""

    op_id: uuid.UUID
    kind: str  # "split" | "merge" | "replace"
    sources: tuple[int, ...]
    """shard ids, in key order"""
    targets: tuple[tuple[int, KeyRange], ...]
    """(shard id, key range) of the new shards, in key order"""
    started_at: float
    txn: AppVersion | None = None
    value_encoding: ValueEncoding | None = None
    job_id: str | None = None
    """A replace's overwrite job (None for splits, merges, and replaces sealed before ops
    carried it); the swap records it with the outcome."""

    @property
    def split_at(self) -> bytes | None:
        if self.kind != "split":
            return None
        return self.targets[1][1].start


OVERWRITES_KEPT = 1000
"""How many overwrite outcomes a shard map keeps (:attr:`ShardMap.overwrites`). A retry of an
overwrite that this many later outcomes pushed out, and whose targets the map no longer names,
raises OverwriteTooOld (docs/overwrite.md, "Retries"). 79 bytes each with uuid job ids: when
full, 79 KB of every map version, about 2 ms to decode."""
COMMITTED, CANCELLED = "committed", "cancelled"
OUTCOMES: tuple[str, ...] = (COMMITTED, CANCELLED)


@dataclass(frozen=True, slots=True)
class OverwriteOutcome:
    """How one overwrite ended, recorded by the map commit that ended it: ``committed`` by its
    swap (whoever ran it: the commit, ``Table.resume()``, a stale attempt), ``cancelled`` by the
    commit that dropped its replace or recorded its abort (after which its targets are
    destroyed, and no attempt of it seals or swaps again)."""

    job_id: str
    """The overwrite job ("" if its replace was sealed before ops carried job ids)."""
    first_shard_id: int
    """Its first target's shard id: ids are reserved per plan, so this names the plan."""
    outcome: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """The shard ids an overwrite plan reserved (``plan_overwrite``): its targets are the
    databases ``shard_db_name(id)`` of ``first_shard_id`` up to ``first_shard_id + count``. The
    map keeps it until nothing can remain of them: the swap that makes them shards drops it; the
    commit that records the overwrite cancelled marks it ``cancelled``
    (:func:`with_overwrite_outcome`), and the commit after its targets were destroyed (by
    whoever cancelled it, ``Table.resume()`` or the table GC) drops it. The table GC cancels one
    older than its ``ingest_min_age`` that no pending op names: a plan whose driver died before
    its seal (docs/overwrite.md, "Leftovers")."""

    job_id: str
    first_shard_id: int
    count: int
    reserved_at: float
    """Wall-clock seconds of the plan's map commit (the planner's clock)."""
    cancelled: bool = False
    """The overwrite is cancelled: its targets must be destroyed, then this dropped."""

    @property
    def shard_ids(self) -> range:
        return range(self.first_shard_id, self.first_shard_id + self.count)


VALUE_ENCODINGS: tuple[str, ...] = ("json", "arrow")


@dataclass(frozen=True, slots=True)
class ValueEncoding:
    """How a table's values hold columns, recorded by the first write that encoded columns into
    values (the Spark data source, docs/spark.md): ``format`` is ``json`` (one JSON object per
    value) or ``arrow`` (one one-row Arrow IPC stream per value); ``schema`` describes the value
    columns as Spark's StructType JSON, opaque to the engine (it is only checked to be a JSON
    object). Tables whose values are plain bytes record none."""

    format: str
    schema: str

    def __post_init__(self) -> None:
        if self.format not in VALUE_ENCODINGS:
            raise InvalidArgument(
                f"value encoding must be one of {VALUE_ENCODINGS}, got {self.format!r}"
            )
        if not isinstance(self.schema, str):
            raise InvalidArgument(f"value schema must be JSON text, got {type(self.schema)}")
        try:
            parsed = json.loads(self.schema)
        except (ValueError, RecursionError) as e:
            raise InvalidArgument(f"value schema is not JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("value schema must be a JSON object")


@dataclass(frozen=True, slots=True)
class ShardMap:
    """One committed version of a table's shard map."""

    id: int
    shards: tuple[Shard, ...]
    created_at: float
    """Wall-clock seconds when this version was made."""
    next_shard_id: int
    pending: tuple[PendingOp, ...] = ()
    retired: tuple[str, ...] = ()
    """Databases (paths) of former shards, soft-destroyed or about to be, until they are gone."""
    value_encoding: ValueEncoding | None = None
    """How values hold columns, if a write recorded it (kept by every later version)."""
    plain_values: bool = False
    """A write of plain values recorded that the table holds plain values, not encoded columns
    (``Table.record_value_encoding(None)``): the first write of either kind records its kind, so
    a plain and an encoded write racing on an empty table cannot both pass. Kept by every later
    version that records no encoding (:meth:`ShardMapStore.update`)."""
    overwrites: tuple[OverwriteOutcome, ...] = ()
    """The outcomes of the last overwrites, oldest first, at most :data:`OVERWRITES_KEPT`; every
    later version carries them (:meth:`ShardMapStore.update` keeps them whatever a change
    returns)."""
    overwrites_forgotten_below: int = 0
    """An overwrite whose first target id is below this and that :attr:`overwrites` does not
    list may have an outcome the map no longer records: one past the highest first target id of
    the outcomes pushed out, or the next_shard_id of a map written before outcomes were
    recorded."""
    reservations: tuple[Reservation, ...] = ()
    """The shard ids of overwrite plans whose targets may still exist outside the map, in plan
    order (:class:`Reservation`); maps written before they were recorded have none."""
    _starts: tuple[bytes, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_starts", tuple(s.key_range.start or b"" for s in self.shards[1:])
        )

    @property
    def split_points(self) -> tuple[bytes, ...]:
        """The start keys of every shard but the first."""
        return self._starts

    def shard_for(self, key: bytes) -> Shard:
        """The shard whose range holds ``key``."""
        if not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidArgument(f"keys must be bytes, got {type(key).__name__}")
        return self.shards[bisect.bisect_right(self._starts, bytes(key))]

    def route(self, keys: pa.Array | pa.ChunkedArray | Sequence[bytes]) -> pa.Int32Array:
        """The index in ``shards`` of each key's shard, vectorised."""
        return route(self._starts, keys)

    def overlapping(self, start: bytes | None, end: bytes | None) -> list[Shard]:
        """The shards holding keys of ``[start, end)``, in key order."""
        want = KeyRange(start, end)
        if want.is_empty():
            return []
        lo = 0 if start is None else bisect.bisect_right(self._starts, start)
        hi = len(self.shards) if end is None else bisect.bisect_left(self._starts, end) + 1
        return list(self.shards[lo:hi])

    def by_id(self, shard_id: int) -> Shard | None:
        """The shard with this id, or None."""
        for s in self.shards:
            if s.shard_id == shard_id:
                return s
        return None

    def pending_for(self, shard_id: int) -> PendingOp | None:
        """The unfinished split, merge or replace that has this shard as a source, or None."""
        for op in self.pending:
            if shard_id in op.sources:
                return op
        return None

    def reservation(self, first_shard_id: int) -> Reservation | None:
        """The reservation of the overwrite plan whose first target is ``first_shard_id``."""
        for r in self.reservations:
            if r.first_shard_id == first_shard_id:
                return r
        return None

    def overwrite_outcome(self, first_shard_id: int) -> OverwriteOutcome | None:
        """The recorded outcome of the overwrite whose first target is ``first_shard_id``."""
        for o in self.overwrites:
            if o.first_shard_id == first_shard_id:
                return o
        return None


def with_overwrite_outcome(m: ShardMap, outcome: OverwriteOutcome) -> ShardMap:
    """``m`` recording ``outcome`` (kept as it is if the overwrite has one already); the oldest
    outcomes past :data:`OVERWRITES_KEPT` are pushed out (:func:`_kept_outcomes`). The
    overwrite's reservation goes with a committed outcome (its targets are shards now) and is
    marked cancelled with a cancelled one (its targets are to be destroyed)."""
    recorded = m.overwrite_outcome(outcome.first_shard_id)
    if recorded is None:
        kept, below = _kept_outcomes((*m.overwrites, outcome), m.overwrites_forgotten_below)
    else:
        kept, below, outcome = m.overwrites, m.overwrites_forgotten_below, recorded
    reservations = tuple(
        r if r.first_shard_id != outcome.first_shard_id else dataclasses.replace(r, cancelled=True)
        for r in m.reservations
        if r.first_shard_id != outcome.first_shard_id or outcome.outcome == CANCELLED
    )
    if (kept, below, reservations) == (m.overwrites, m.overwrites_forgotten_below, m.reservations):
        return m
    return dataclasses.replace(
        m, overwrites=kept, overwrites_forgotten_below=below, reservations=reservations
    )


def without_reservations(m: ShardMap, firsts: set[int]) -> ShardMap:
    """``m`` without the reservations whose first shard id is in ``firsts`` (their targets are
    destroyed); ``m`` itself if it lists none of them."""
    keep = tuple(r for r in m.reservations if r.first_shard_id not in firsts)
    return m if keep == m.reservations else dataclasses.replace(m, reservations=keep)


def _kept_outcomes(
    outcomes: Sequence[OverwriteOutcome], forgotten_below: int
) -> tuple[tuple[OverwriteOutcome, ...], int]:
    """The last :data:`OVERWRITES_KEPT` of ``outcomes``, and the bound below which the ones
    pushed out lie."""
    cut = max(0, len(outcomes) - OVERWRITES_KEPT)
    for o in outcomes[:cut]:
        forgotten_below = max(forgotten_below, o.first_shard_id + 1)
    return tuple(outcomes[cut:]), forgotten_below


# ---- validation ------------------------------------------------------------------------------
def check_split_points(split_points: Sequence[bytes]) -> tuple[bytes, ...]:
    """Split points must be non-empty bytes, strictly increasing."""
    out: list[bytes] = []
    for sp in split_points:
        if not isinstance(sp, bytes) or not sp:
            raise InvalidArgument(f"split points must be non-empty bytes, got {sp!r}")
        if out and sp <= out[-1]:
            raise InvalidArgument(
                f"split points must be strictly increasing: {sp!r} after {out[-1]!r}"
            )
        out.append(sp)
    return tuple(out)


def ranges_for(split_points: Sequence[bytes]) -> list[KeyRange]:
    bounds: list[bytes | None] = [None, *split_points, None]
    return [KeyRange(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


# ---- codec -----------------------------------------------------------------------------------
def encode_shard_map(m: ShardMap, table_path: str) -> bytes:
    prefix = table_path.rstrip("/") + "/"
    doc = {
        "created_at": m.created_at,
        "next_shard_id": m.next_shard_id,
        "shards": [
            {"id": s.shard_id, **range_json(s.key_range), "db": _relative(s.db_path, prefix)}
            for s in m.shards
        ],
        "pending": [
            {
                "op_id": str(op.op_id),
                "kind": op.kind,
                "sources": list(op.sources),
                "targets": [{"id": i, **range_json(r)} for i, r in op.targets],
                "started_at": op.started_at,
                **_replace_json(op),
            }
            for op in m.pending
        ],
        "retired": [_relative(p, prefix) for p in m.retired],
    }
    if m.value_encoding is not None:  # absent otherwise: maps without one keep their bytes
        doc["value_encoding"] = {
            "format": m.value_encoding.format,
            "schema": m.value_encoding.schema,
        }
    if m.plain_values:  # likewise
        doc["plain_values"] = True
    # always written: a map without them was written before outcomes were recorded
    doc["overwrites"] = [
        {"job": o.job_id, "first": o.first_shard_id, "outcome": o.outcome} for o in m.overwrites
    ]
    doc["overwrites_forgotten_below"] = m.overwrites_forgotten_below
    if m.reservations:  # absent otherwise: maps without any keep their bytes
        doc["reservations"] = [
            {
                "job": r.job_id,
                "first": r.first_shard_id,
                "count": r.count,
                "at": r.reserved_at,
                "cancelled": r.cancelled,
            }
            for r in m.reservations
        ]
    payload = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")
    return seal(SHARDMAP_MAGIC, FORMAT_VERSION, payload)


def _replace_json(op: PendingOp) -> dict[str, Any]:
    """A replace's own fields (absent from splits and merges: their bytes stay as they were)."""
    if op.kind != "replace":
        return {}
    enc = op.value_encoding
    return {
        "txn": txn_json(op.txn),
        "value_encoding": None if enc is None else {"format": enc.format, "schema": enc.schema},
        "job": op.job_id,
    }


def _relative(db_path: str, prefix: str) -> str:
    if not db_path.startswith(prefix):
        raise InvalidArgument(f"database {db_path!r} is not under the table root {prefix!r}")
    return db_path[len(prefix) :]


def decode_shard_map(data: bytes, *, map_id: int, table_path: str, name: str) -> ShardMap:
    """Raises CorruptionError for anything that is not a valid map."""
    opened = open_sealed(data, magic=SHARDMAP_MAGIC, name=name, versions=SUPPORTED_VERSIONS)
    try:
        # bounded before parsing (slatedb_core.meta.json_doc, SECURITY.md)
        doc = load_stored_json(opened.payload, name)
        return _from_doc(doc, map_id, table_path, name)
    except CorruptionError:
        raise
    # RecursionError: deeply nested JSON; OverflowError: int() of Infinity or 1e400.
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        InvalidArgument,
        RecursionError,
        OverflowError,
    ) as e:
        raise CorruptionError(name, f"bad shard map document: {type(e).__name__}: {e}") from None


def _from_doc(doc: dict[str, Any], map_id: int, table_path: str, name: str) -> ShardMap:
    pending_ids: dict[int, PendingOp] = {}
    pending: list[PendingOp] = []
    for p in doc["pending"]:
        op = PendingOp(
            op_id=uuid.UUID(p["op_id"]),
            kind=str(p["kind"]),
            sources=tuple(int(i) for i in p["sources"]),
            targets=tuple((int(t["id"]), range_of(t)) for t in p["targets"]),
            started_at=float(p["started_at"]),
            txn=txn_of(p.get("txn")),
            value_encoding=_value_encoding(p.get("value_encoding")),
            job_id=_optional_str(p.get("job"), "job"),
        )
        if op.kind not in PENDING_KINDS:
            raise CorruptionError(name, f"unknown pending operation kind {op.kind!r}")
        for sid in op.sources:
            if sid in pending_ids:
                raise CorruptionError(name, f"shard {sid} is a source of two pending operations")
            pending_ids[sid] = op
        pending.append(op)
    shards = []
    for i, s in enumerate(doc["shards"]):
        rel = validate_relative_path(str(s["db"]), what="shard database path")
        sid = int(s["id"])
        shards.append(Shard(i, range_of(s), join(table_path, rel), sid, sid in pending_ids))
    m = ShardMap(
        id=map_id,
        shards=tuple(shards),
        created_at=float(doc["created_at"]),
        next_shard_id=int(doc["next_shard_id"]),
        pending=tuple(pending),
        retired=tuple(
            join(table_path, validate_relative_path(str(p), what="retired database path"))
            for p in doc["retired"]
        ),
        value_encoding=_value_encoding(doc.get("value_encoding")),
        plain_values=_flag(doc.get("plain_values", False), "plain_values"),
        **_outcomes_of(doc),
        reservations=tuple(_reservation_of(r) for r in doc.get("reservations", ())),
    )
    problem = layout_problem(m)
    if problem is not None:
        raise CorruptionError(name, problem)
    return m


def _outcomes_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The overwrite outcomes of a map document; a map written before they were recorded has
    none, and nothing below its next_shard_id can be told (``overwrites_forgotten_below``)."""
    if "overwrites" not in doc:
        return {"overwrites": (), "overwrites_forgotten_below": int(doc["next_shard_id"])}
    out = []
    for o in doc["overwrites"]:
        job = _optional_str(o["job"], "job")
        first = o["first"]
        if job is None or isinstance(first, bool) or not isinstance(first, int):
            raise TypeError("an overwrite outcome needs a str job and an int first")
        out.append(OverwriteOutcome(job, first, str(o["outcome"])))
    below = doc["overwrites_forgotten_below"]
    if isinstance(below, bool) or not isinstance(below, int):
        raise TypeError(f"overwrites_forgotten_below must be an int, got {below!r}")
    return {"overwrites": tuple(out), "overwrites_forgotten_below": below}


def _reservation_of(r: Any) -> Reservation:
    job, first, count, at = r["job"], r["first"], r["count"], r["at"]
    if not isinstance(job, str) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in (first, count)
    ):
        raise TypeError("a reservation needs a str job and int first and count")
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise TypeError(f"a reservation's time must be a number, got {at!r}")
    return Reservation(job, first, count, float(at), _flag(r["cancelled"], "cancelled"))


def _optional_str(v: Any, what: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise TypeError(f"{what} must be a string or null, got {type(v).__name__}")
    return v


def _flag(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"{what} must be true or false, got {v!r}")
    return v


def _value_encoding(v: Any) -> ValueEncoding | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise TypeError(f"value_encoding must be an object, got {type(v).__name__}")
    return ValueEncoding(str(v["format"]), str(v["schema"]))


def layout_problem(m: ShardMap) -> str | None:
    """Why ``m`` is not a valid map, or None."""
    if not m.shards:
        return "a shard map needs at least one shard"
    if m.shards[0].key_range.start is not None or m.shards[-1].key_range.end is not None:
        return "the shards must cover the whole key space (unbounded first start and last end)"
    ids = [s.shard_id for s in m.shards]
    if len(set(ids)) != len(ids) or max(ids) >= m.next_shard_id:
        return f"shard ids {ids} must be unique and below next_shard_id {m.next_shard_id}"
    for a, b in zip(m.shards, m.shards[1:], strict=False):
        if a.key_range.end is None or a.key_range.end != b.key_range.start:
            return f"shards {a.index} and {b.index} are not contiguous"
        if a.key_range.is_empty():
            return f"shard {a.index} has an empty range"
    if m.shards[-1].key_range.is_empty():
        return "the last shard has an empty range"
    if m.plain_values and m.value_encoding is not None:
        return "a map records both plain values and a value encoding"
    problem = _outcomes_problem(m)
    if problem is not None:
        return problem
    for op in m.pending:
        srcs = [m.by_id(i) for i in op.sources]
        if not srcs or any(s is None for s in srcs):
            return f"pending {op.kind} {op.op_id} names no source or one that is not in the map"
        hull = KeyRange(srcs[0].key_range.start, srcs[-1].key_range.end)  # type: ignore[union-attr]
        tgt = [r for _, r in op.targets]
        if not tgt or tgt[0].start != hull.start or tgt[-1].end != hull.end:
            return f"pending {op.kind} {op.op_id} does not cover its sources' range"
        if any(t_id >= m.next_shard_id for t_id, _ in op.targets):
            return f"pending {op.kind} {op.op_id} targets an id at or past next_shard_id"
        shape = (len(op.sources), len(op.targets))
        if op.kind == "replace":
            if op.sources != tuple(s.shard_id for s in m.shards):
                return f"pending replace {op.op_id} does not name every shard of the map"
        elif op.kind not in ("split", "merge") or (op.txn, op.value_encoding, op.job_id) != (
            None,
            None,
            None,
        ):
            return f"pending {op.kind} {op.op_id} is not a split, merge or replace"
        elif shape != ((1, 2) if op.kind == "split" else (2, 1)):
            return f"pending {op.kind} {op.op_id} has {shape[0]} source(s), {shape[1]} target(s)"
        positions = [src.index for src in srcs if src is not None]
        if positions != list(range(positions[0], positions[0] + len(positions))):
            return f"pending {op.kind} {op.op_id} names shards that are not adjacent"
        for (_, lo), (_, hi) in zip(op.targets, op.targets[1:], strict=False):
            if lo.end is None or lo.end != hi.start or lo.is_empty():
                return f"pending {op.kind} {op.op_id} has targets that do not tile its range"
    return None


def _outcomes_problem(m: ShardMap) -> str | None:
    firsts = [o.first_shard_id for o in m.overwrites]
    if len(firsts) > OVERWRITES_KEPT or len(set(firsts)) != len(firsts):
        return f"overwrite outcomes: more than {OVERWRITES_KEPT}, or one overwrite listed twice"
    if any(not 0 <= f < m.next_shard_id for f in firsts):
        return "an overwrite outcome names a shard id at or past next_shard_id"
    if any(o.outcome not in OUTCOMES for o in m.overwrites):
        return f"an overwrite outcome is not one of {OUTCOMES}"
    if not 0 <= m.overwrites_forgotten_below <= m.next_shard_id:
        return "overwrites_forgotten_below is not within 0..next_shard_id"
    end = 0
    for r in sorted(m.reservations, key=lambda r: r.first_shard_id):
        if r.count < 1 or r.first_shard_id < end or r.first_shard_id + r.count > m.next_shard_id:
            return (
                "a reservation is empty, overlaps another or reaches past next_shard_id: "
                f"{r.first_shard_id}+{r.count}"
            )
        end = r.first_shard_id + r.count
    return None


# ---- the store -------------------------------------------------------------------------------
MapChange = Callable[[ShardMap], ShardMap | None]


class ShardMapStore:
    """Reads and commits the shard map of the table at ``table_path``."""

    def __init__(
        self,
        store: ObjectStore,
        table_path: str,
        *,
        max_attempts: int = 20,
        pointer_stride: int = 16,
    ) -> None:
        validate_relative_path(table_path, what="table path")
        self.store = store
        self.table_path = table_path
        self.seq = SequencedStore(
            store, table_path, SHARDMAP_DIR, SHARDMAP_SUFFIX, pointer_stride=pointer_stride
        )
        self.versions: VersionedStore[ShardMap, ShardMap] = VersionedStore(
            self.seq,
            what=f"shard map update of {table_path!r}",
            read_latest=self.read_latest,
            decode=self._decode,
            encode=self._encode,
            retry=RetryPolicy(max_attempts=max_attempts),
        )

    def _decode(self, map_id: int, data: bytes) -> ShardMap:
        return decode_shard_map(
            data, map_id=map_id, table_path=self.table_path, name=self.seq.path(map_id)
        )

    def _encode(self, map_id: int, m: ShardMap, _base: ShardMap | None) -> tuple[bytes, ShardMap]:
        problem = layout_problem(m)
        if problem is not None:
            raise InvalidArgument(f"refusing to commit an invalid shard map: {problem}")
        committed = ShardMap(
            map_id,
            m.shards,
            m.created_at,
            m.next_shard_id,
            m.pending,
            m.retired,
            m.value_encoding,
            m.plain_values,
            m.overwrites,
            m.overwrites_forgotten_below,
            m.reservations,
        )
        return encode_shard_map(m, self.table_path), committed

    def try_read_latest(self) -> ShardMap | None:
        found = self.seq.read_latest()
        return None if found is None else self._decode(*found)

    def read(self, map_id: int) -> ShardMap:
        return self._decode(map_id, self.seq.read(map_id))

    def create_initial(self, m: ShardMap) -> ShardMap:
        """Commit version 1; VersionExists if the table exists."""
        return self.versions.commit(FIRST_ID, m, None)

    def update(self, change: MapChange, base: ShardMap | None = None) -> ShardMap:
        """Apply ``change`` to the latest map and commit it as the next version, re-applying it
        to the winner's map after losing a race. ``change`` returns None (or its argument) to
        commit nothing, and raises to refuse (e.g. ShardMapConflict)."""

        def attempt(current: ShardMap) -> ShardMap | None:
            new = change(current)
            if new is None or new is current:
                return None
            # the plain-values record stays until a version records an encoding (an encoded
            # overwrite): changes written before it existed need not know of it
            plain = new.value_encoding is None and (new.plain_values or current.plain_values)
            # the overwrite outcomes only grow (the oldest pushed out past the bound): a change
            # that did not build on them, or raced an outcome's commit, loses none
            listed = {o.first_shard_id for o in current.overwrites}
            outcomes, below = _kept_outcomes(
                (
                    *current.overwrites,
                    *(o for o in new.overwrites if o.first_shard_id not in listed),
                ),
                max(current.overwrites_forgotten_below, new.overwrites_forgotten_below),
            )
            # a reservation whose targets are shards is done, whoever swapped them in
            reserved = tuple(r for r in new.reservations if new.by_id(r.first_shard_id) is None)
            return _renumbered(
                dataclasses.replace(new, reservations=reserved), plain, outcomes, below
            )

        return self.versions.update(attempt, base=base)

    def read_latest(self) -> ShardMap:
        m = self.try_read_latest()
        if m is None:
            raise DatabaseNotFound(
                f"no table (shard map) under {self.table_path!r} in {self.store.url}"
            )
        return m

    # ---- GC ---------------------------------------------------------------------------------
    def collect(self, min_age: timedelta, now: float | None = None) -> int:
        """Delete map versions older than ``min_age``, never the latest: first advance the
        boundary over them (SlateDB RFC 0026), then delete. Returns how many were deleted."""
        entries = self.seq.list()
        if not entries:
            return 0
        deleted = 0

        def delete(doomed: Sequence[SequencedEntry]) -> None:
            nonlocal deleted
            for e in doomed:
                try:
                    self.store.delete(e.path)
                    deleted += 1
                except ObjectNotFound:
                    pass

        collect_old_versions(
            self.seq.boundary,
            entries,
            entries[-1].id,
            min_age_s=min_age.total_seconds(),
            now_s=time.time() if now is None else now,
            delete=delete,
        )
        return deleted


def _renumbered(
    m: ShardMap,
    plain_values: bool,
    overwrites: tuple[OverwriteOutcome, ...],
    overwrites_forgotten_below: int,
) -> ShardMap:
    """``m`` with shard indexes equal to positions and seal flags derived from its pending ops,
    recording ``plain_values`` and the overwrite outcomes."""
    sealed = {sid for op in m.pending for sid in op.sources}
    shards = tuple(
        Shard(i, s.key_range, s.db_path, s.shard_id, s.shard_id in sealed)
        for i, s in enumerate(m.shards)
    )
    return ShardMap(
        m.id,
        shards,
        m.created_at,
        m.next_shard_id,
        m.pending,
        m.retired,
        m.value_encoding,
        plain_values,
        overwrites,
        overwrites_forgotten_below,
        m.reservations,
    )
