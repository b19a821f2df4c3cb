"""Where a clone or a union came from, so that a re-run can tell its own database (finished or
not) from anything else at the destination (SlateDB RFC 0004, "Clones": "Validate parent_path and
parent_checkpoint are contained in M_c.external_dbs. If not, exit with error"; RELIABILITY.md,
review findings 9 and 13).

The manifests cannot answer that for the life of the database: GC collects manifest 1 (min_age),
and it *detaches* a clone from an external database whose SSTs it no longer references (the
final checkpoint, then the ``external_dbs`` entry go). After both, a finished clone's manifest
names its parent nowhere, and an ordinary database looks like any unfinished union. So the
origin is written down once, next to the manifests: ``<db>/clone.origin``, a sealed envelope
(magic ``SDBO``, CRC-checked) holding JSON::

    {"kind": "clone", "parent": "p", "checkpoint": "<uuid>", "range": null | [start, end]}
    {"kind": "union", "sources": [[path, range], ...], "entries": [[path, "<uuid>"], ...]}

(keys hex, null = unbounded; a union's sources sorted, ``range`` null when not given, and its
entries are manifest 1's ``external_dbs`` as (path, source checkpoint)). GC never touches it (it
lists only ``manifest/``, ``wal/``, ``compacted/``, ``compactions/``); destroy deletes it with
every other object under ``<db>/``.

It is written by create-if-absent *after* manifest 1 and before any other step, by the run that
created manifest 1 or that recognised it, and it is derived from manifest 1 and the request
only, so two runs write the same record. Between manifest 1 and the record (a crash there),
manifest 1 is the latest manifest (nothing else commits to an uninitialized database) and is
recognised by itself: it was born ``initialized=false`` (only clone and union write that);

* a clone's has ``writer_epoch >= 1`` and names its parent in its *last* entry;
* a union's has ``writer_epoch = 0`` and every entry's final checkpoint id is
  :func:`union_final_id` of (destination, the request's sources and ranges, the entry's path and
  source checkpoint): a name-based UUID, so a re-run recomputes it and nothing else matches it.

A database without a record whose manifest 1 is gone was made before records existed: a clone is
then accepted as before if its latest manifest's last entry is the parent (a detached one cannot
be recognised any more: CloneConflict, as before); a union is not (see
docs/projection-and-union.md).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slatedb_core.errors import CorruptionError, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.keys import KeyRange
from slatedb_core.layout import clone_origin_path
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.meta.json_doc import load_stored_json
from slatedb_core.meta.sequenced import FIRST_ID
from slatedb_core.store.objectstore import ObjectStore

MAGIC = b"SDBO"
VERSION = 1
_UNION_NS = uuid.UUID("6f1c3d52-5b0e-4a55-9a43-2d8e0d9c7f10")

RangeKey = tuple[str | None, str | None] | None
"""A range as stored: (start hex, end hex), None for an unbounded end; None = not given."""
Signature = tuple[tuple[str, RangeKey], ...]
"""A union request: its sources' (path, range), sorted."""


@dataclass(frozen=True, slots=True)
class CloneOrigin:
    parent: str
    checkpoint: uuid.UUID
    range: RangeKey  # the clone's key_range (None: all keys)


@dataclass(frozen=True, slots=True)
class UnionOrigin:
    sources: Signature
    entries: tuple[tuple[str, uuid.UUID], ...]  # manifest 1's external dbs, sorted


Origin = CloneOrigin | UnionOrigin


def origin_path(db_path: str) -> str:
    return clone_origin_path(db_path)


def range_key(rng: KeyRange | None) -> RangeKey:
    if rng is None:
        return None
    return (
        None if rng.start is None else rng.start.hex(),
        None if rng.end is None else rng.end.hex(),
    )


def key_range(rk: RangeKey) -> KeyRange:
    if rk is None:
        return KeyRange()
    start, end = rk
    return KeyRange(
        None if start is None else bytes.fromhex(start), None if end is None else bytes.fromhex(end)
    )


def signature(sources: Sequence[tuple[str, KeyRange | None]]) -> Signature:
    keyed = [(path, range_key(rng)) for path, rng in sources]
    return tuple(sorted(keyed, key=lambda p: json.dumps(p)))


def union_final_id(dest: str, sig: Signature, path: str, checkpoint: uuid.UUID) -> uuid.UUID:
    """The final checkpoint id a union at ``dest`` over ``sig`` gives its entry (path,
    checkpoint): unique per entry (the pair is), and recomputable by a re-run."""
    text = json.dumps([dest, sig, path, str(checkpoint)])
    return uuid.uuid5(_UNION_NS, text)


# ---- recognising manifest 1 ------------------------------------------------------------------
def clone_origin_of(m: Manifest, *, first: bool) -> CloneOrigin | None:
    """What ``m`` says about the clone it belongs to: from manifest 1 (``first``), only if it is
    a clone's; from a later manifest (a database from before origin records), its last entry."""
    if first and (m.initialized or m.writer_epoch < 1):
        return None
    if not m.external_dbs:
        return None
    last = m.external_dbs[-1]
    rng = None if m.key_range is None else KeyRange.of(m.key_range)
    return CloneOrigin(last.path, last.source_checkpoint_id, range_key(rng))


def union_entries(m: Manifest) -> tuple[tuple[str, uuid.UUID], ...]:
    pairs = {(e.path, e.source_checkpoint_id) for e in m.external_dbs}
    return tuple(sorted(pairs, key=lambda p: (p[0], str(p[1]))))


def union_origin_of(m: Manifest, dest: str, sig: Signature) -> UnionOrigin | None:
    """The union over ``sig`` that manifest 1 ``m`` belongs to, or None if it is not one."""
    if m.initialized or m.writer_epoch != 0:
        return None
    for e in m.external_dbs:
        if e.final_checkpoint_id != union_final_id(dest, sig, e.path, e.source_checkpoint_id):
            return None
    if not m.external_dbs and all(r is not None for _, r in sig):
        # No entries: the sources held no SST, so only the declared ranges tell such unions
        # apart (the database is empty either way): manifest 1's range is their hull.
        ranges = [key_range(r) for _, r in sig]
        have = KeyRange() if m.key_range is None else KeyRange.of(m.key_range)
        if have != _hull([r for r in ranges if not r.is_empty()] or ranges[:1]):
            return None
    return UnionOrigin(sig, union_entries(m))


def _hull(ranges: Sequence[KeyRange]) -> KeyRange:
    starts = [r.start for r in ranges]
    ends = [r.end for r in ranges]
    start = None if None in starts else min(s for s in starts if s is not None)
    end = None if None in ends else max(e for e in ends if e is not None)
    return KeyRange(start, end)


# ---- the record ------------------------------------------------------------------------------
def _encode(o: Origin) -> bytes:
    body: dict[str, object]
    if isinstance(o, CloneOrigin):
        body = {
            "kind": "clone",
            "parent": o.parent,
            "checkpoint": str(o.checkpoint),
            "range": o.range,
        }
    else:
        body = {
            "kind": "union",
            "sources": [list(s) for s in o.sources],
            "entries": [[p, str(c)] for p, c in o.entries],
        }
    return seal(MAGIC, VERSION, json.dumps(body, sort_keys=True).encode("utf-8"))


def _range_of(value: object) -> RangeKey:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError(f"bad range {value!r}")
    start, end = value
    for b in (start, end):
        if b is not None:
            bytes.fromhex(b)
    return (start, end)


def _decode(data: bytes, name: str) -> Origin:
    payload = open_sealed(data, magic=MAGIC, name=name, versions=frozenset({VERSION})).payload
    try:
        body = load_stored_json(payload, name)  # bounded (meta.json_doc, SECURITY.md)
        if body["kind"] == "clone":
            return CloneOrigin(
                str(body["parent"]), uuid.UUID(body["checkpoint"]), _range_of(body["range"])
            )
        if body["kind"] == "union":
            sources = tuple((str(p), _range_of(r)) for p, r in body["sources"])
            entries = tuple((str(p), uuid.UUID(c)) for p, c in body["entries"])
            return UnionOrigin(sources, entries)
        raise ValueError(f"unknown kind {body['kind']!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptionError(name, f"unreadable origin record: {e}") from e


def read_origin(store: ObjectStore, db_path: str) -> Origin | None:
    path = origin_path(db_path)
    try:
        data = store.get(path).data
    except ObjectNotFound:
        return None
    return _decode(data, path)


def record_origin(store: ObjectStore, db_path: str, origin: Origin) -> Origin:
    """Create-if-absent; returns the record now stored (another run's, if it was first: the
    caller refuses it if it differs from ``origin``)."""
    try:
        store.put_if_absent(origin_path(db_path), _encode(origin))
        return origin
    except ObjectAlreadyExists:
        found = read_origin(store, db_path)
        if found is None:  # deleted meanwhile (a destroy): leave it to the caller's re-read
            raise
        return found


# ---- is the database at the destination the one asked for? ---------------------------------
def describe(o: Origin) -> str:
    if isinstance(o, CloneOrigin):
        return f"a clone of {o.parent!r} at checkpoint {o.checkpoint}"
    paths = ", ".join(repr(p) for p, _ in o.sources)
    return f"a union of {paths}"


def clone_mismatch(
    o: Origin, parent: str, checkpoint: uuid.UUID | None, projection: KeyRange | None
) -> str | None:
    """Why ``o`` is not a clone of ``parent`` (at ``checkpoint``, within ``projection``, when
    given: SlateDB RFC 0004 accepts any checkpoint when none is given); None if it is."""
    if isinstance(o, UnionOrigin) or o.parent != parent:
        return f"it is {describe(o)}"
    if checkpoint is not None and checkpoint != o.checkpoint:
        return f"it was cloned at checkpoint {o.checkpoint}"
    have = key_range(o.range)
    if projection is not None and have.intersect(projection) != have:
        return f"it covers {have}, not within {projection}"
    return None


def union_mismatch(
    o: Origin, sig: Signature, checkpoints: Sequence[tuple[str, uuid.UUID | None]]
) -> str | None:
    """Why ``o`` is not the union of ``sig`` (each source at its checkpoint, when given)."""
    if isinstance(o, CloneOrigin) or o.sources != sig:
        return f"it is {describe(o)}" + ("" if isinstance(o, CloneOrigin) else " (other ranges)")
    for path, cp in checkpoints:
        named = [c for p, c in o.entries if p == path]
        if cp is not None and named and cp not in named:
            return f"it was made from {path!r} at another checkpoint than {cp}"
    return None


def establish(
    ms: ManifestStore,
    latest: Manifest,
    from_first: Callable[[Manifest], Origin | None],
    from_latest: Callable[[Manifest], Origin | None] | None,
    mismatch: Callable[[Origin], str | None],
) -> str | None:
    """None if the database at ``ms.db_path`` (latest manifest ``latest``) is recognisably the
    clone or union asked for, writing its origin record if it has none yet; else why not (see
    the module docstring)."""
    store, path = ms.store, ms.db_path
    recorded = read_origin(store, path)
    try:
        first: Manifest | None = ms.read(FIRST_ID).manifest
    except ObjectNotFound:
        first = None
    if recorded is not None:
        if first is not None and first.initialized:
            return f"its manifest 1 was written by a writer, yet {origin_path(path)} exists"
        return mismatch(recorded)
    if first is not None:
        origin = from_first(first)
    else:
        origin = None if from_latest is None else from_latest(latest)
    if origin is None:
        gone = "" if first is not None else " (its manifest 1 is gone and it has no origin record)"
        return f"it is not recognisably a clone or union made by this request{gone}"
    why = mismatch(origin)
    if why is not None:
        return why
    stored = record_origin(store, path, origin)
    if stored != origin:
        return mismatch(stored) or f"another run recorded it as {describe(stored)}"
    return None
