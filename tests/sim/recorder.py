"""A store wrapper that watches every request that reached the real store, and the invariants
that can be judged from outside the engine by looking only at those requests.

It sits *under* the :class:`~slatedb_core.testing.FaultyStore`, so it sees the ground truth:
a create whose response the fault layer then dropped is still recorded as having happened. Each
rule is checked at the request that could break it; the few that are about the whole namespace
(ids above a boundary contiguous, the latest manifest present) are checked by :meth:`check` after
every simulation step. Violations are collected rather than raised, because a raise inside a store
call would be caught and retried by the engine like any other failure.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ulid import ULID

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.manifest.codec import decode_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.boundary import parse_boundary
from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
)

SEQUENCED = re.compile(r"^(?P<db>[^/]+)/(?P<ns>manifest|compactions|wal)/(?P<id>\d{20})\.\w+$")
BOUNDARY = re.compile(r"^(?P<db>[^/]+)/gc/(?P<ns>manifest|compactions|wal|compacted)\.boundary$")
COMPACTED = re.compile(r"^(?P<db>[^/]+)/compacted/(?P<ulid>[0-9A-HJKMNP-TV-Z]{26})\.sst$")


class InvariantViolation(AssertionError):
    """An invariant of the protocol was broken; the message says which and where."""


@dataclass
class DbRecord:
    """What the recorder knows about one database path."""

    boundaries: dict[str, int] = field(default_factory=dict)
    existing: dict[str, set[int]] = field(
        default_factory=lambda: {"manifest": set(), "compactions": set(), "wal": set()}
    )
    max_created: dict[str, int] = field(default_factory=dict)
    epochs: dict[int, tuple[int, int]] = field(default_factory=dict)  # manifest id -> epochs
    destroyed: bool = False
    """A manifest with destroyed_at_s was committed: GC (or hard destroy) may delete anything."""
    initialized: bool = True
    """The newest manifest says initialized: False while a clone is still copying its WAL."""
    max_parallel_writes: int = 1
    """The largest ``max_parallel_writes`` any committed manifest of it held."""
    collected_at: int | None = None
    """Event number at which the last manifest of the destroyed database was deleted (by GC or
    hard destroy): from then on nothing may be committed there again (RELIABILITY.md, review finding 1)."""


class RecordingStore(ObjectStore):
    """Delegates to ``inner``; records effects and checks per-request invariants."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self.url = f"recording+{inner.url}"
        self.counters = RequestCounters()
        self._lock = threading.Lock()
        self._bytes: dict[str, bytes] = {}
        self._history: dict[str, list[bytes]] = {}
        self.dbs: dict[str, DbRecord] = {}
        self.violations: list[str] = []
        self.checks = 0
        self.released: set[str] = set()
        """Databases the harness is hard-destroying: every delete under them is allowed (but
        never of a boundary file)."""
        self.events = 0
        """Counts successful creates and deletes; :meth:`mark` reads it."""
        self.creates: list[tuple[int, str, str]] = []
        """(event number, thread name, path) of every successful create of a sequenced object."""
        self.boundary_reads: list[tuple[int, str, str]] = []
        """(event number, thread name, path) of every read of a ``gc/*.boundary`` file."""
        self.damaged: set[str] = set()
        """Objects the harness deleted or corrupted at rest (tests.sim.damage): judged by what
        reads return, not by the namespace rules."""
        self._decoded: dict[str, Manifest] = {}

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    # ---- bookkeeping -----------------------------------------------------------------------
    def _db(self, name: str) -> DbRecord:
        rec = self.dbs.get(name)
        if rec is None:
            rec = self.dbs[name] = DbRecord()
        return rec

    def _violate(self, text: str) -> None:
        self.violations.append(text)

    def _may_delete_anything(self, db: str) -> bool:
        return db in self.released or self._db(db).destroyed

    def _created(self, path: str, data: bytes) -> None:
        """Rules for a successful create-if-absent (the commit point of sequenced objects)."""
        self.checks += 1
        m = SEQUENCED.match(path)
        if m is not None:
            db, ns, oid = m["db"], m["ns"], int(m["id"])
            rec = self._db(db)
            boundary = rec.boundaries.get(ns, 0)
            self.events += 1
            self.creates.append((self.events, threading.current_thread().name, path))
            earlier = self._history.get(path, [])
            if earlier and earlier[-1] != data and oid > boundary and path not in self.damaged:
                self._violate(
                    f"two different objects committed at {path} (id {oid} > {ns} boundary "
                    f"{boundary})"
                )
            self._history.setdefault(path, []).append(data)
            rec.existing[ns].add(oid)
            rec.max_created[ns] = max(rec.max_created.get(ns, 0), oid)
            if ns == "manifest" and oid > boundary:
                self._manifest_created(db, rec, oid, path, data)
        elif BOUNDARY.match(path):
            self._boundary_written(path, data)

    def _manifest_created(self, db: str, rec: DbRecord, oid: int, path: str, data: bytes) -> None:
        try:
            manifest = decode_manifest(data, name=path)
        except CorruptionError as e:
            self._violate(f"committed manifest {path} does not decode: {e}")
            return
        self._decoded[path] = manifest
        for dup in duplicates(manifest):
            self._violate(f"committed manifest {path} lists {dup} twice (a change applied twice)")
        epochs = (manifest.writer_epoch, manifest.compactor_epoch)
        prev = rec.epochs.get(oid - 1)
        if prev is not None and (epochs[0] < prev[0] or epochs[1] < prev[1]):
            self._violate(f"epochs decreased at {path}: (writer, compactor) {prev} -> {epochs}")
        rec.epochs[oid] = epochs
        rec.max_parallel_writes = max(rec.max_parallel_writes, manifest.max_parallel_writes)
        if oid >= max(rec.existing["manifest"]):
            rec.initialized = manifest.initialized
        if manifest.destroyed_at_s is not None:
            rec.destroyed = True

    def _boundary_written(self, path: str, data: bytes) -> None:
        m = BOUNDARY.match(path)
        assert m is not None
        rec = self._db(m["db"])
        try:
            value = parse_boundary(data, path)
        except CorruptionError as e:
            self._violate(f"boundary {path} written with garbage: {e}")
            return
        before = rec.boundaries.get(m["ns"], 0)
        if value < before:
            self._violate(f"boundary {path} moved back from {before} to {value}")
        rec.boundaries[m["ns"]] = max(before, value)

    def _deleted(self, path: str) -> None:
        self.checks += 1
        self.events += 1
        m = SEQUENCED.match(path)
        if m is not None:
            db, ns, oid = m["db"], m["ns"], int(m["id"])
            rec = self._db(db)
            existing = rec.existing[ns]
            if not self._may_delete_anything(db):
                boundary = rec.boundaries.get(ns, 0)
                if oid > boundary:
                    self._violate(f"deleted {path} ahead of the {ns} boundary {boundary}")
                if ns == "manifest" and existing and oid == max(existing):
                    self._violate(f"deleted the latest manifest {path}")
            existing.discard(oid)
            if ns == "manifest" and rec.destroyed and not existing and rec.collected_at is None:
                rec.collected_at = self.events
            return
        m = COMPACTED.match(path)
        if m is not None:
            db = m["db"]
            if self._may_delete_anything(db):
                return
            ms = ULID.from_str(m["ulid"]).milliseconds
            limit = self._db(db).boundaries.get("compacted", 0)
            if ms > limit:
                self._violate(f"deleted {path} (time {ms}) ahead of the compacted boundary {limit}")
            return
        # Never, not even when the database is destroyed: the boundaries are what keeps a stale
        # writer from committing into the emptied path (SlateDB RFC 0026; RELIABILITY.md, review finding 1).
        if BOUNDARY.match(path) is not None:
            self._violate(f"deleted boundary file {path}")

    def _read(self, path: str, data: bytes, whole: bool) -> None:
        if not whole or SEQUENCED.match(path) is None:
            return
        self.checks += 1
        known = self._bytes.get(path)
        if known is not None and known != data:
            self._violate(f"bytes at {path} changed between reads")

    # ---- whole-namespace rules, after every step ---------------------------------------------
    def check(self) -> list[str]:
        """Rules about whole namespaces; returns (and keeps) any new violations."""
        with self._lock:
            new: list[str] = []
            for db, rec in self.dbs.items():
                if self._may_delete_anything(db):
                    continue
                for ns in ("manifest", "compactions"):
                    self.checks += 1
                    boundary = rec.boundaries.get(ns, 0)
                    above = sorted(i for i in rec.existing[ns] if i > boundary)
                    if rec.max_created.get(ns, 0) > boundary and not above:
                        new.append(f"{db}: no {ns} left above the boundary {boundary}")
                    if above and above != list(range(boundary + 1, above[-1] + 1)):
                        new.append(f"{db}: {ns} ids above the boundary {boundary} are {above}")
                self.checks += 1
                wal_boundary = rec.boundaries.get("wal", 0)
                wal = sorted(i for i in rec.existing["wal"] if i > wal_boundary)
                # an unfinished clone copies its parent's WAL one SST at a time, resumably
                if (
                    rec.initialized
                    and wal
                    and wal[-1] > _contiguous_end(wal) + rec.max_parallel_writes
                ):
                    # A writer with N parallel writes issues id x only once every id <= x - N
                    # has landed: its holes (in flight, or lost when it died or was fenced) lie
                    # in the N ids after the contiguous run, until the next writer's fence fills
                    # them. With N = 1: no hole at all.
                    new.append(
                        f"{db}: WAL ids above the boundary {wal_boundary} have holes beyond a "
                        f"window of {rec.max_parallel_writes} parallel writes: {wal}"
                    )
            self.violations.extend(new)
            return new

    # ---- questions the harness asks -----------------------------------------------------------
    def mark(self) -> int:
        with self._lock:
            return self.events

    def collected(self, db: str) -> bool:
        with self._lock:
            return self._db(db).collected_at is not None

    def late_creates(
        self, db: str, *, thread: str, since: int = 0, reads: bool = False
    ) -> list[str]:
        """Sequenced objects of ``db`` that ``thread`` created (and with ``reads``, boundary files
        it read) after event ``since`` and after the destroyed database was collected: an
        operation that did either has run into the collected path, and may acknowledge nothing
        (RELIABILITY.md, review finding 1; its check must find the tombstone)."""
        with self._lock:
            at = self._db(db).collected_at
            if at is None:
                return []
            after = max(at, since)
            events = self.creates + self.boundary_reads if reads else self.creates
            return [
                p
                for n, t, p in sorted(events)
                if n > after and t == thread and p.startswith(db + "/")
            ]

    def damage(self, path: str, data: bytes | None, raw: ObjectStore) -> None:
        """Delete (``data`` None) or overwrite ``path`` behind the engine's back, in ``raw`` (the
        store under every fault and protocol layer), as a failing disk, an operator or a bug
        would, while nothing runs (tests.sim.damage)."""
        if data is None:
            raw.delete(path)
        else:
            raw.put(path, data)
        with self._lock:
            self.damaged.add(path)
            self._decoded.pop(path, None)
            if data is None:
                self._bytes.pop(path, None)
            else:
                self._bytes[path] = data

    def stored(self, path: str) -> bytes | None:
        with self._lock:
            return self._bytes.get(path)

    def latest_manifest(self, db: str) -> tuple[int, Manifest] | None:
        """The newest manifest of ``db`` in the store, decoded (None if none, or undecodable)."""
        with self._lock:
            ids = sorted(self._db(db).existing["manifest"], reverse=True)
        for oid in ids:
            path = f"{db}/manifest/{oid:020d}.manifest"
            got = self._manifest(path)
            if got is not None:
                return oid, got
            if self.stored(path) is not None:
                return None  # the newest one is corrupt
        return None

    def _manifest(self, path: str) -> Manifest | None:
        with self._lock:
            known = self._decoded.get(path)
            data = self._bytes.get(path)
        if data is None or known is not None:
            return None if data is None else known
        try:
            manifest = decode_manifest(data, name=path)
        except CorruptionError:
            return None
        with self._lock:
            self._decoded[path] = manifest
        return manifest

    def dangling(self, db: str) -> list[str]:
        """What the latest manifest of ``db``, and every manifest a checkpoint in it pins, names
        but the store does not hold: an SST, or a pinned manifest (review finding 2 of
        RELIABILITY.md: a commit that named an SST a GC pass had already deleted). Damaged objects
        are left out."""
        with self._lock:
            if self._db(db).destroyed:
                return []
        latest = self.latest_manifest(db)
        if latest is None:
            return []
        oid, manifest = latest
        out: list[str] = []
        pinned = {c.manifest_id: str(c.id) for c in manifest.checkpoints}
        todo: list[tuple[str, Manifest]] = [(f"manifest {oid}", manifest)]
        for mid, cid in sorted(pinned.items()):
            if mid == oid:
                continue
            path = f"{db}/manifest/{mid:020d}.manifest"
            pinned_manifest = self._manifest(path)
            if pinned_manifest is not None:
                todo.append((f"manifest {mid} (checkpoint {cid})", pinned_manifest))
            elif self.stored(path) is None and path not in self.damaged:
                out.append(f"checkpoint {cid} in manifest {oid} pins missing {path}")
        for where, mf in todo:
            for sst in mf.ssts:
                path = resolve_sst_path(db, mf, sst)
                if self.stored(path) is None and path not in self.damaged:
                    out.append(f"{where} names missing SST {path}")
        self.checks += 1
        return out

    def boundary(self, db: str, ns: str) -> int:
        with self._lock:
            return self._db(db).boundaries.get(ns, 0)

    def paths_under(self, db: str) -> list[str]:
        with self._lock:
            return sorted(p for p in self._bytes if p.startswith(db + "/"))

    # ---- the ObjectStore interface -------------------------------------------------------------
    def _boundary_read(self, path: str) -> None:
        if BOUNDARY.match(path) is not None:
            with self._lock:
                self.events += 1
                self.boundary_reads.append((self.events, threading.current_thread().name, path))

    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        self.counters.incr("get")
        self._boundary_read(path)
        res = self._inner.get(path, byte_range=byte_range)
        with self._lock:
            self._read(path, res.data, byte_range is None)
        return res

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        self.counters.incr("get")
        self._boundary_read(path)
        res = self._inner.get_if_none_match(path, e_tag)
        if res is not None:
            with self._lock:
                self._read(path, res.data, True)
        return res

    def head(self, path: str) -> ObjectMeta:
        self.counters.incr("head")
        return self._inner.head(path)

    def put(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put")
        if SEQUENCED.match(path):
            with self._lock:
                self._violate(f"unconditional put of sequenced object {path}")
        version = self._inner.put(path, data)
        with self._lock:
            self._bytes[path] = data
            if BOUNDARY.match(path):
                self._boundary_written(path, data)
        return version

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put_if_absent")
        version = self._inner.put_if_absent(path, data)
        with self._lock:
            self._bytes[path] = data
            self._created(path, data)
        return version

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        self.counters.incr("put_if_match")
        if SEQUENCED.match(path):
            with self._lock:
                self._violate(f"conditional overwrite of sequenced object {path}")
        version = self._inner.put_if_match(path, data, expected)
        with self._lock:
            self._bytes[path] = data
            if BOUNDARY.match(path):
                self._boundary_written(path, data)
        return version

    def copy_if_absent(self, src: str, dst: str) -> None:
        """A create of ``dst`` like ``put_if_absent``, with the bytes of ``src`` (known from an
        earlier write, or read back from ``dst`` once the copy has landed)."""
        self.counters.incr("copy")
        self._inner.copy_if_absent(src, dst)
        with self._lock:
            data = self._bytes.get(src)
        if data is None:
            data = self._inner.get(dst).data
        with self._lock:
            self._bytes[dst] = data
            self._created(dst, data)

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        self.counters.incr("list")
        return self._inner.list(prefix, start_after=start_after)

    def delete(self, path: str) -> None:
        self.counters.incr("delete")
        self._inner.delete(path)
        with self._lock:
            if self._bytes.pop(path, None) is not None:
                self._deleted(path)


def duplicates(manifest: Manifest) -> list[str]:
    """Checkpoints and SSTs ``manifest`` lists more than once: a change applied twice (RELIABILITY.md
    item 3: a committer that re-applied its change after GC passed its create). The codec refuses
    them since; this judges what reached the store."""
    out = []
    for what, ids in (
        ("checkpoint", [str(c.id) for c in manifest.checkpoints]),
        ("SST", [str(x.id) for x in manifest.ssts]),
    ):
        out += [f"{what} {i}" for i in sorted(set(ids)) if ids.count(i) > 1]
    return out


def _contiguous_end(ids: list[int]) -> int:
    """The last id of the unbroken run starting at ``ids[0]`` (ascending, non-empty)."""
    end = ids[0]
    for i in ids[1:]:
        if i != end + 1:
            break
        end = i
    return end
