"""Two-phase CAS (seed 001 "CAS on S3", pattern 5): create-if-absent without conditional writes.

:class:`TwoPhaseStore` wraps an object store that lacks conditional writes (an S3-compatible store
that ignores ``If-None-Match``) and gives it the full :class:`ObjectStore` contract with the help of
a transactional store (:mod:`slatedb_core.store.txn`, SQLite or PostgreSQL, chosen by URL). The
object store is used only for plain PUT, GET, HEAD, LIST and DELETE.

**Immutable objects** (manifests, compactions records, WAL and compacted SSTs) use the seed's
two-phase write. ``put_if_absent(dest, data)``:

1. PUT ``data`` to a temporary object ``<dest>.<uuid4 hex>.<crc32 hex>``;
2. INSERT the intent ``(dest, source, committed=false)``; ``dest`` is the primary key, so exactly
   one writer's insert succeeds; the losers get ``ObjectAlreadyExists`` and delete their temporary
   object. **From this insert on, the write is durable and owned by its writer**;
3. PUT ``data`` to ``dest`` (the "copy": the writer still holds the bytes, so it uploads them
   instead of a server-side copy; either is one PUT request);
4. UPDATE the intent to committed; 5. DELETE the temporary object.

A failure in steps 3-5 does not fail the write: the intent is durable and anyone completes it.
With ``complete_in_background=N`` steps 3-5 run on a pool of N threads and ``put_if_absent``
returns once the intent is inserted (one PUT and one INSERT of latency, as the seed notes);
``close()`` waits for them. The read paths below make that safe.
The write is linearised at the insert, and every read path is built so that it cannot miss a
write whose insert has happened:

* ``get``/``head`` of a missing object look up its intent; an uncommitted one is *rolled forward*
  (GET the temporary object, check its CRC against its name, PUT the destination, mark
  committed, delete the temporary) and its bytes are returned. A committed intent whose object is
  missing means the object was deleted: ``ObjectNotFound``. So the reader of sequenced id N sees
  either nothing (no insert yet) or the one object that owns N, never a loser's bytes.
* ``list`` first reads the uncommitted intents under the prefix and *then* lists the object
  store, and merges the two. An intent committed between those two reads was copied before it
  was committed, so the listing shows it; one uncommitted at the first read is in the merge. A
  latest-id lookup by LIST therefore never misses an inserted write.
* An insert that raised (the connection dropped after the server committed it) is resolved by
  reading the intent back: our source means the insert was ours. The sequenced store's own
  read-back-and-compare on an ambiguous ``put_if_absent`` keeps working on top of this, because a
  read of an inserted-but-uncommitted destination returns that intent's bytes.
* A committed intent whose destination no longer exists is the trace of a delete (object first,
  then intent) that has not finished or crashed in between; to match a native store, where the
  path is then free, a later ``put_if_absent`` deletes that stale intent (guarded by its source)
  and inserts again.

``delete`` deletes the object and then the intent (guarded by its source; a failure there is
only logged, because a committed intent without its object frees itself as above). An
uncommitted write is rolled forward first, so the delete is ordered after the create and a
delete that raised leaves the object readable, as on a native store. One race is
not closed, on this store as on a native one: a copy (by a stalled writer or reader) that lands
*after* a delete of the same path recreates the object, without an intent. The protocol only
deletes dead paths (behind a GC boundary, or unreferenced SSTs), which no live writer creates
again, so such an object is garbage that the next GC pass deletes again.

**Mutable conditional objects** cannot use pattern 5 (an unconditional copy of version 2 could
land after the copy of version 3). The protocol's only ones are the GC boundary files
``<db>/gc/<namespace>.boundary`` (created with ``put_if_absent``, advanced with ``put_if_match``,
read with a conditional GET). They are kept whole in the transactional store (seed pattern 2, a
few bytes each): a row with the data, a random e-tag and a version; ``put_if_match`` is one
``UPDATE ... WHERE etag = expected``, which the database executes atomically, so exactly one of
two racing updates from the same version succeeds. Which paths are such cells is a predicate
(``cell_paths``, default :func:`is_boundary_path`); a ``put_if_match`` on any other path raises
``UnsupportedOperation`` instead of silently degrading to an unconditional write, so a new mutable
conditional object fails its first test over this store rather than corrupting data. Cells appear
in listings like objects.

Plain ``put`` goes straight to the object store (the advisory ``_latest_version`` pointer, markers).
``copy_if_absent`` reads the source and creates the destination with the two-phase write above
(the temporary object's name carries the CRC of the bytes, so they pass through this process).

Temporary names end in ``.<32 hex>.<8 hex>``: the manifest, compactions and WAL listings parse
``^\\d{20}\\.<suffix>$`` and the GC parses ``<ULID>.sst``, so they skip them. GC
(:meth:`TwoPhaseStore.collect_garbage`, called by :mod:`slatedb_core.gc.collector` through
:func:`two_phase_of`) rolls forward uncommitted intents, deletes the intents of manifests at or
behind the manifest boundary that no checkpoint pins and of WAL SSTs below the replay point and at
or behind the WAL boundary (seed 001 "Transactional Store Deletion"), and deletes temporary
objects older than ``temp_min_age_s`` that no uncommitted intent names.

Counters: :attr:`counters` counts calls of this interface (like every store), ``inner.counters``
the object-store requests they cost, ``txn.counters`` the SQL statements.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slatedb_core.checksum import crc32
from slatedb_core.errors import (
    CorruptionError,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    UnsupportedOperation,
)
from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
    join,
)
from slatedb_core.store.txn import Cell, Intent, TxnStore, open_txn_store

log = logging.getLogger(__name__)

_TEMP = re.compile(r"\.([0-9a-f]{32})\.([0-9a-f]{8})$")
DEFAULT_TEMP_MIN_AGE_S = 24 * 3600.0
"""Seed 001: "any other file ... older than a day"."""


def temp_name(dest: str, data: bytes) -> str:
    return f"{dest}.{uuid.uuid4().hex}.{crc32(data):08x}"


def is_temp_name(path: str) -> bool:
    return _TEMP.search(path) is not None


def is_boundary_path(path: str) -> bool:
    """``.../gc/<name>.boundary``: the GC boundary files, the protocol's mutable CAS objects."""
    parts = path.split("/")
    return len(parts) >= 2 and parts[-2] == "gc" and parts[-1].endswith(".boundary")


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _now() -> datetime:
    return datetime.now(tz=UTC)


def _slice(data: bytes, byte_range: tuple[int, int] | None, path: str) -> bytes:
    if byte_range is None:
        return data
    start, end = byte_range
    if start < 0 or end < start:
        raise InvalidArgument(f"bad byte range {byte_range!r} for {path}")
    return data[start:end]


@dataclass
class TwoPhaseGcStats:
    recovered: int = 0
    intents_deleted: int = 0
    temps_deleted: int = 0
    failed: list[str] = field(default_factory=list)


class TwoPhaseStore(ObjectStore):
    """``ObjectStore`` over ``inner`` (plain writes only) and ``txn`` (intents and cells)."""

    def __init__(
        self,
        inner: ObjectStore,
        txn: TxnStore,
        *,
        namespace: str | None = None,
        cell_paths: Callable[[str], bool] = is_boundary_path,
        temp_min_age_s: float = DEFAULT_TEMP_MIN_AGE_S,
        insert_attempts: int = 5,
        complete_in_background: int = 0,
    ) -> None:
        self._inner = inner
        self.txn = txn
        self.ns = namespace if namespace is not None else inner.url
        self.url = f"twophase+{inner.url}"
        self.counters = RequestCounters()
        self._is_cell = cell_paths
        self.temp_min_age_s = temp_min_age_s
        self._insert_attempts = max(1, insert_attempts)
        # Steps 3-5 on a pool: put_if_absent then returns once the intent is durable (seed 001:
        # "the write is considered durable after one S3 write and one DynamoDB write").
        self._pool = (
            ThreadPoolExecutor(complete_in_background, thread_name_prefix="slatedb-2pc")
            if complete_in_background > 0
            else None
        )
        self._pending: set[Future[ObjectVersion]] = set()
        self._pending_lock = threading.Lock()

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    def __repr__(self) -> str:
        return f"TwoPhaseStore({self._inner!r}, {self.txn!r})"

    def _done(self, future: Future[ObjectVersion]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def drain(self) -> None:
        """Wait until every background completion started so far has finished."""
        with self._pending_lock:
            pending = list(self._pending)
        wait(pending)

    def close(self) -> None:
        """Finish background completions, then close the transactional store."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.txn.close()

    # ---- cells ---------------------------------------------------------------------------
    def _cell_meta(self, cell: Cell) -> ObjectMeta:
        return ObjectMeta(
            cell.path, len(cell.data), _dt(cell.modified_ms), cell.etag, str(cell.version)
        )

    def _cell(self, path: str) -> Cell:
        cell = self.txn.get_cell(self.ns, path)
        if cell is None:
            raise ObjectNotFound(path)
        return cell

    # ---- reads ---------------------------------------------------------------------------
    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        self.counters.incr("get")
        if self._is_cell(path):
            cell = self._cell(path)
            return GetResult(_slice(cell.data, byte_range, path), self._cell_meta(cell))
        return self._get_object(path, byte_range)

    def _get_object(self, path: str, byte_range: tuple[int, int] | None) -> GetResult:
        for _ in range(3):
            try:
                return self._inner.get(path, byte_range=byte_range)
            except ObjectNotFound:
                pass
            intent = self.txn.get_intent(self.ns, path)
            if intent is None or intent.committed:
                raise ObjectNotFound(path)
            done = self._roll_forward(intent)
            if done is None:
                continue  # completed (or deleted) meanwhile: look at the destination again
            data, version = done
            meta = ObjectMeta(path, len(data), _now(), version.e_tag, version.version)
            return GetResult(_slice(data, byte_range, path), meta)
        raise ObjectNotFound(path)

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        self.counters.incr("get")
        if self._is_cell(path):
            cell = self._cell(path)
            return None if cell.etag == e_tag else GetResult(cell.data, self._cell_meta(cell))
        try:
            return self._inner.get_if_none_match(path, e_tag)
        except ObjectNotFound:
            return self._get_object(path, None)

    def head(self, path: str) -> ObjectMeta:
        self.counters.incr("head")
        if self._is_cell(path):
            return self._cell_meta(self._cell(path))
        try:
            return self._inner.head(path)
        except ObjectNotFound:
            return self._get_object(path, None).meta

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        self.counters.incr("list")
        norm = prefix.rstrip("/")
        lo, hi = (norm + "/", norm + "0") if norm else ("", None)  # '0' follows '/'
        # The intents first, the objects second: see the module docstring.
        rows = self.txn.listed_rows(self.ns, lo, hi, start_after)
        found = {m.path: m for m in self._inner.list(prefix, start_after=start_after)}
        for r in rows:
            if r.is_cell or r.path not in found:
                found[r.path] = ObjectMeta(r.path, r.size, _dt(r.modified_ms), r.etag, None)
        return iter(sorted(found.values(), key=lambda m: m.path))

    # ---- writes --------------------------------------------------------------------------
    def put(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put")
        if self._is_cell(path):
            cell = self.txn.put_cell(self.ns, path, data)
            return ObjectVersion(cell.etag, str(cell.version))
        return self._inner.put(path, data)

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        self.counters.incr("put_if_match")
        if expected.e_tag is None and expected.version is None:
            raise InvalidArgument("put_if_match needs an e-tag or a version to compare against")
        if not self._is_cell(path):
            raise UnsupportedOperation(
                f"put_if_match {path}: two-phase CAS only creates immutable objects; a mutable "
                "conditional object must be a transactional cell (TwoPhaseStore cell_paths)"
            )
        version: int | None = None
        if expected.e_tag is None and expected.version is not None:
            if not expected.version.isdigit():
                raise PreconditionFailed(path)
            version = int(expected.version)
        cell = self.txn.update_cell(self.ns, path, data, etag=expected.e_tag, version=version)
        if cell is None:
            raise PreconditionFailed(path)
        return ObjectVersion(cell.etag, str(cell.version))

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put_if_absent")
        return self._create(path, data)

    def copy_if_absent(self, src: str, dst: str) -> None:
        """GET ``src`` (completing an uncommitted write of it, like :meth:`get`) and create ``dst``
        with its bytes by the two-phase write of :meth:`put_if_absent`. Not a server-side copy:
        the temporary object's name carries the CRC of the bytes (checked when a reader rolls the
        write forward), so the writer must hold them, and a server-side copy to a temporary name
        would cost as many requests as the upload it saves."""
        self.counters.incr("copy")
        if self._is_cell(src):
            data = self._cell(src).data
        else:
            data = self._get_object(src, None).data
        self._create(dst, data)

    def _create(self, path: str, data: bytes) -> ObjectVersion:
        if self._is_cell(path):
            cell = self.txn.create_cell(self.ns, path, data)
            if cell is None:
                raise ObjectAlreadyExists(path)
            return ObjectVersion(cell.etag, str(cell.version))
        if is_temp_name(path):
            raise InvalidArgument(f"{path!r} is shaped like a two-phase temporary object name")
        source = temp_name(path, data)
        self._inner.put(source, data)  # 1. nothing is durable yet: errors go to the caller
        try:
            self._insert(path, source, len(data))  # 2. the commit point
        except ObjectAlreadyExists:
            self._drop(source)
            raise
        if self._pool is not None:
            if not isinstance(data, bytes):
                # the caller may reuse its buffer (a memoryview of an encoder's scratch) once
                # this returns, before the background copy has read it
                data = bytes(data)
            try:
                future = self._pool.submit(self._complete, path, source, data)
            except RuntimeError:  # shut down: complete it here
                pass
            else:
                with self._pending_lock:
                    self._pending.add(future)
                future.add_done_callback(self._done)
                return ObjectVersion()
        return self._complete(path, source, data)  # 3-5: never fail the durable write

    def _insert(self, dest: str, source: str, size: int) -> None:
        last: StoreError | None = None
        for _ in range(self._insert_attempts):
            try:
                if self.txn.insert_intent(self.ns, dest, source, size):
                    return
            except StoreError as e:
                if not e.retryable:
                    raise
                last = e
                log.info("intent insert for %s came back ambiguous (%s); reading it", dest, e)
            try:
                existing = self.txn.get_intent(self.ns, dest)
            except StoreError as e:
                last = e
                continue
            if existing is None:
                continue  # not there (never inserted, or deleted meanwhile): insert again
            if existing.source == source:
                return  # an earlier attempt of ours took effect
            if existing.committed and not self._inner.exists(dest):
                # A delete took the object and has not (yet) removed the intent: the path is
                # free on a native store, so free it here too (guarded by the stale source).
                self.txn.delete_intent(self.ns, dest, existing.source)
                continue
            raise ObjectAlreadyExists(dest)
        if last is None:
            raise StoreError(f"create {dest}: the intent kept changing", path=dest)
        raise last

    def _complete(self, dest: str, source: str, data: bytes) -> ObjectVersion:
        try:
            version = self._inner.put(dest, data)
        except StoreError as e:
            log.warning("copy to %s failed (%s); the intent is durable, readers complete it", dest, e)
            return ObjectVersion()
        try:
            self.txn.commit_intent(self.ns, dest, source)
        except StoreError as e:
            log.warning("marking %s committed failed (%s); recovery completes it", dest, e)
            return version  # the temporary object stays until the intent is committed
        self._drop(source)
        return version

    def _drop(self, source: str) -> None:
        try:
            self._inner.delete(source)
        except StoreError as e:
            log.warning("could not delete temporary %s (%s); GC deletes it later", source, e)

    def _roll_forward(self, intent: Intent) -> tuple[bytes, ObjectVersion] | None:
        """Complete an uncommitted intent. Returns its bytes (and the copy's version, empty if the
        copy failed), or None if its temporary object is gone because someone else completed or
        deleted it."""
        try:
            data = self._inner.get(intent.source).data
        except ObjectNotFound:
            return None
        m = _TEMP.search(intent.source)
        if m is None or int(m.group(2), 16) != crc32(data):
            raise CorruptionError(intent.source, "two-phase temporary object fails its checksum")
        version = ObjectVersion()
        try:
            version = self._inner.put(intent.dest, data)
            self.txn.commit_intent(self.ns, intent.dest, intent.source)
        except StoreError as e:  # e.g. a read-only reader: the bytes are still the answer
            log.info("could not complete %s (%s); serving it from %s", intent.dest, e,
                     intent.source)
            return data, version
        self._drop(intent.source)
        return data, version

    def delete(self, path: str) -> None:
        self.counters.incr("delete")
        if self._is_cell(path):
            self.txn.delete_cell(self.ns, path)
            return
        intent = None if is_temp_name(path) else self.txn.get_intent(self.ns, path)
        if intent is not None and not intent.committed:
            # Complete it first, so the delete is ordered after the create and a failed delete
            # leaves the object readable, as on a native store.
            self._roll_forward(intent)
        self._inner.delete(path)  # the effect; what follows is bookkeeping
        if intent is not None:
            try:
                self.txn.delete_intent(self.ns, path, intent.source)
            except StoreError as e:  # a stale committed intent frees itself (see _insert) or GC
                log.warning("could not delete the intent of %s (%s)", path, e)

    # ---- recovery and GC -----------------------------------------------------------------
    def recover(self, prefix: str = "") -> int:
        """Seed 001 "Recovery": complete every uncommitted intent under ``prefix``. Returns how
        many were completed."""
        return len(self._recover(prefix))

    def _recover(self, prefix: str) -> set[str]:
        """The sources of the intents completed (their temporary objects are gone)."""
        norm = prefix.rstrip("/")
        lo, hi = (norm + "/", norm + "0") if norm else ("", None)
        done: set[str] = set()
        for intent in self.txn.pending_intents(self.ns, lo, hi):
            if self._roll_forward(intent) is not None:
                done.add(intent.source)
                continue
            # Temporary gone. Completed by someone else, or deleted outright.
            now = self.txn.get_intent(self.ns, intent.dest)
            if now is None or now.committed or now.source != intent.source:
                continue
            if self._inner.exists(intent.dest):
                self.txn.commit_intent(self.ns, intent.dest, intent.source)
                done.add(intent.source)
            else:
                log.warning("intent %s lost its temporary object %s; dropping it",
                            intent.dest, intent.source)
                self.txn.delete_intent(self.ns, intent.dest, intent.source)
        return done

    def collect_garbage(
        self,
        db_path: str,
        *,
        manifest_boundary: int,
        keep_manifests: Iterable[int],
        wal_boundary: int,
        wal_floor: int,
        listed: Iterable[ObjectMeta] = (),
        now_s: float,
    ) -> TwoPhaseGcStats:
        """One GC pass over the records of ``db_path`` (module docstring). ``listed`` are object
        listings the caller already made (``wal/``, ``compacted/``); ``manifest/`` and
        ``compactions/`` are listed here."""
        stats = TwoPhaseGcStats()
        recovered: set[str] = set()
        try:
            recovered = self._recover(db_path)
        except StoreError as e:
            stats.failed.append(f"recovery: {e}")
        stats.recovered = len(recovered)
        mdir = join(db_path, "manifest")
        if manifest_boundary > 0:
            keep = [f"{mdir}/{i:020d}.manifest" for i in sorted(set(keep_manifests))]
            stats.intents_deleted += self.txn.delete_committed_intents(
                self.ns, mdir + "/", f"{mdir}/{manifest_boundary:020d}.manifest", keep
            )
        wal_limit = min(wal_boundary, wal_floor - 1)
        if wal_limit > 0:
            wdir = join(db_path, "wal")
            stats.intents_deleted += self.txn.delete_committed_intents(
                self.ns, wdir + "/", f"{wdir}/{wal_limit:020d}.sst"
            )
        candidates = [m for m in listed if is_temp_name(m.path) and m.path not in recovered]
        for sub in ("manifest", "compactions"):
            candidates += [
                m for m in self._inner.list(join(db_path, sub)) if is_temp_name(m.path)
            ]
        old = [m for m in candidates if now_s - m.last_modified.timestamp() >= self.temp_min_age_s]
        if old:
            pending = {
                i.source for i in self.txn.pending_intents(self.ns, db_path + "/", db_path + "0")
            }
            for m in old:
                if m.path in pending:
                    continue
                try:
                    self._inner.delete(m.path)
                    stats.temps_deleted += 1
                except StoreError as e:
                    stats.failed.append(f"{m.path}: {e}")
        return stats


def two_phase_of(store: ObjectStore) -> TwoPhaseStore | None:
    """The :class:`TwoPhaseStore` under ``store`` (following wrappers' ``inner``), if any."""
    current: object = store
    for _ in range(16):
        if isinstance(current, TwoPhaseStore):
            return current
        current = getattr(current, "inner", None)
        if current is None:
            return None
    return None


def open_two_phase(
    store: ObjectStore | str,
    txn_url: str,
    *,
    temp_min_age_s: float = DEFAULT_TEMP_MIN_AGE_S,
    complete_in_background: int = 0,
) -> TwoPhaseStore:
    """Two-phase CAS over ``store`` (an object store or its URL, see
    :func:`~slatedb_core.store.url.open_store`) with the transactional store at ``txn_url``
    (``sqlite:///abs/path.db`` or ``postgresql://user@host:port/db``)."""
    if isinstance(store, str):
        from slatedb_core.store.url import open_store

        store = open_store(store)
    return TwoPhaseStore(
        store,
        open_txn_store(txn_url),
        temp_min_age_s=temp_min_age_s,
        complete_in_background=complete_in_background,
    )
