"""Two-phase CAS (SlateDB RFC 0001, "CAS on S3", pattern 5): create-if-absent without conditional writes.

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

``delete`` rolls an uncommitted write forward first (so it is ordered after the create), then
deletes the object and the intent (guarded by its source; a committed intent left without its
object frees itself as above). Not closed, here as on a native store: a stalled copy landing
after a delete of the same path recreates the object, without an intent; only dead paths are
ever deleted, so it is garbage that the next GC pass deletes again.

**Mutable conditional objects** (the GC boundary files ``<db>/gc/<namespace>.boundary``) cannot
use pattern 5 (a copy of version 2 could land after the copy of version 3): they are kept whole in
the transactional store (pattern 2), and ``put_if_match`` is one ``UPDATE ... WHERE etag = ?``.
``cell_paths`` (default :func:`~slatedb_core.layout.ends_in_boundary`: the GC boundary files,
the protocol's mutable CAS objects) says which paths are cells; ``put_if_match`` on
any other path raises ``UnsupportedOperation``, never an unconditional write. Cells are listed.

**Keys**: rows are keyed by the object's absolute location (``s3://bucket`` + ``lake/prod/x``),
not by the URL of the store that named it, so every URL reaching one object shares its intent
(:mod:`slatedb_core.store.twophase_keys`, which also moves rows stored under the old keys).

Plain ``put`` goes straight to the object store (the advisory ``_latest_version`` pointer, markers).
``copy_if_absent`` reads the source and creates the destination with the two-phase write above
(the temporary object's name carries the CRC of the bytes, so they pass through this process).

Temporary names and GC: :mod:`slatedb_core.gc.twophase`. Counters: :attr:`counters` (calls
of this interface), ``inner.counters`` (object-store requests), ``txn.counters`` (statements).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime

from slatedb_core.errors import (
    CorruptionError,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreError,
    UnsupportedOperation,
    is_retryable,
)
from slatedb_core.layout import ends_in_boundary
from slatedb_core.store.checksum import crc32
from slatedb_core.store.location import StoreLocation, store_location
from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
)
from slatedb_core.store.twophase_keys import (
    DEFAULT_TEMP_MIN_AGE_S,
    TEMP,
    KeyedRows,
    ensure_location_keys,
    is_temp_name,
    temp_name,
)
from slatedb_core.store.txn import Cell, Intent, TxnStore, open_txn_store

log = logging.getLogger(__name__)


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


class TwoPhaseStore(ObjectStore):
    """``ObjectStore`` over ``inner`` (plain writes only) and ``txn`` (intents and cells)."""

    def __init__(
        self,
        inner: ObjectStore,
        txn: TxnStore,
        *,
        namespace: str | None = None,
        cell_paths: Callable[[str], bool] = ends_in_boundary,
        temp_min_age_s: float = DEFAULT_TEMP_MIN_AGE_S,
        insert_attempts: int = 5,
        complete_in_background: int = 0,
    ) -> None:
        self._inner = inner
        self.txn = txn
        # keys: absolute locations (twophase_keys); an explicit namespace is a root of its own
        loc = StoreLocation(namespace) if namespace is not None else store_location(inner.url)
        self.location, self.ns = loc, loc.root
        ensure_location_keys(txn)  # rows under the old keys move once
        self._rows = KeyedRows(txn, loc)
        self.url = f"twophase+{inner.url}"
        self.counters = RequestCounters()
        self._is_cell = cell_paths
        self.temp_min_age_s = temp_min_age_s
        self._insert_attempts = max(1, insert_attempts)
        # Steps 3-5 on a pool: put_if_absent then returns once the intent is durable (SlateDB RFC 0001:
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

    @property
    def rows(self) -> KeyedRows:
        """The transactional rows of this store's objects (its GC pass reads and deletes them)."""
        return self._rows

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
        cell = self._rows.get_cell(path)
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
            intent = self._rows.get_intent(path)
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
        # The intents first, the objects second: see the module docstring.
        rows = self._rows.listed_rows(prefix, start_after)
        found = {m.path: m for m in self._inner.list(prefix, start_after=start_after)}
        for r in rows:
            if r.is_cell or r.path not in found:
                found[r.path] = ObjectMeta(r.path, r.size, _dt(r.modified_ms), r.etag, None)
        return iter(sorted(found.values(), key=lambda m: m.path))

    # ---- writes --------------------------------------------------------------------------
    def sweep_staged(self, prefix: str, *, older_than_s: float, now_s: float) -> tuple[int, int]:
        return self._inner.sweep_staged(prefix, older_than_s=older_than_s, now_s=now_s)

    def put(self, path: str, data: bytes) -> ObjectVersion:
        self.counters.incr("put")
        if self._is_cell(path):
            cell = self._rows.put_cell(path, data)
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
        cell = self._rows.update_cell(path, data, etag=expected.e_tag, version=version)
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
            cell = self._rows.create_cell(path, data)
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
                if self._rows.insert_intent(dest, source, size):
                    return
            except StoreError as e:
                if not is_retryable(e):
                    raise
                last = e
                log.info("intent insert for %s came back ambiguous (%s); reading it", dest, e)
            try:
                existing = self._rows.get_intent(dest)
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
                self._rows.delete_intent(dest, existing.source)
                continue
            raise ObjectAlreadyExists(dest)
        if last is None:
            raise StoreError(f"create {dest}: the intent kept changing", path=dest)
        raise last

    def _complete(self, dest: str, source: str, data: bytes) -> ObjectVersion:
        try:
            version = self._inner.put(dest, data)
        except StoreError as e:
            log.warning(
                "copy to %s failed (%s); the intent is durable, readers complete it", dest, e
            )
            return ObjectVersion()
        try:
            self._rows.commit_intent(dest, source)
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
        m = TEMP.search(intent.source)
        if m is None or int(m.group(2), 16) != crc32(data):
            raise CorruptionError(intent.source, "two-phase temporary object fails its checksum")
        version = ObjectVersion()
        try:
            version = self._inner.put(intent.dest, data)
            self._rows.commit_intent(intent.dest, intent.source)
        except StoreError as e:  # e.g. a read-only reader: the bytes are still the answer
            log.info(
                "could not complete %s (%s); serving it from %s", intent.dest, e, intent.source
            )
            return data, version
        self._drop(intent.source)
        return data, version

    def delete(self, path: str) -> None:
        self.counters.incr("delete")
        if self._is_cell(path):
            self._rows.delete_cell(path)
            return
        intent = None if is_temp_name(path) else self._rows.get_intent(path)
        if intent is not None and not intent.committed:
            # Complete it first, so the delete is ordered after the create and a failed delete
            # leaves the object readable, as on a native store.
            self._roll_forward(intent)
        self._inner.delete(path)  # the effect; what follows is bookkeeping
        if intent is not None:
            try:
                self._rows.delete_intent(path, intent.source)
            except StoreError as e:  # a stale committed intent frees itself (see _insert) or GC
                log.warning("could not delete the intent of %s (%s)", path, e)

    # ---- recovery and GC -----------------------------------------------------------------
    def recover(self, prefix: str = "") -> int:
        """SlateDB RFC 0001, "Recovery": complete every uncommitted intent under ``prefix``. Returns how
        many were completed."""
        return len(self.recover_sources(prefix))

    def recover_sources(self, prefix: str) -> set[str]:
        """Complete every uncommitted intent under ``prefix``; the sources of those completed
        (their temporary objects are gone)."""
        done: set[str] = set()
        for intent in self._rows.pending_intents(prefix):
            if self._roll_forward(intent) is not None:
                done.add(intent.source)
                continue
            # Temporary gone. Completed by someone else, or deleted outright.
            now = self._rows.get_intent(intent.dest)
            if now is None or now.committed or now.source != intent.source:
                continue
            if self._inner.exists(intent.dest):
                self._rows.commit_intent(intent.dest, intent.source)
                done.add(intent.source)
            else:
                log.warning(
                    "intent %s lost its temporary object %s; dropping it",
                    intent.dest,
                    intent.source,
                )
                self._rows.delete_intent(intent.dest, intent.source)
        return done


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
    store: ObjectStore,
    txn_url: str,
    *,
    temp_min_age_s: float = DEFAULT_TEMP_MIN_AGE_S,
    complete_in_background: int = 0,
) -> TwoPhaseStore:
    """Two-phase CAS over ``store`` with the transactional store at ``txn_url``
    (``sqlite:///abs/path.db`` or ``postgresql://user@host:port/db``). A ``twophase+`` or
    ``?txn=`` URL given to :func:`~slatedb_core.store.url.open_store` opens one."""
    return TwoPhaseStore(
        store,
        open_txn_store(txn_url),
        temp_min_age_s=temp_min_age_s,
        complete_in_background=complete_in_background,
    )
