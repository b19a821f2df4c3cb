"""GC boundary files for sequenced metadata (SlateDB RFC 0026; docs/gc-and-boundaries.md).

``<db>/gc/<namespace>.boundary`` holds one ASCII u64, an inclusive high-watermark: ids ``<= B`` may
already be deleted, so a create-if-absent that "succeeds" at such an id proves nothing (the earlier
object of that id may have been garbage-collected) and must not be reported as committed.

Invariants kept here:

* a missing file reads as 0, until this process has once seen it; after that, missing is a hard
  error (:class:`BoundaryMissing`), because GC never deletes boundary files;
* the value only moves forward: :meth:`BoundaryObject.advance` uses create-if-absent or a conditional
  update and re-reads until the durable value is at least the target; a read answered below what
  this process knew when it sent it is reported as corruption (one answered below what another
  read took in meanwhile was only served first: the newer value stands);
* ``check`` reads through a conditional GET (If-None-Match on the cached e-tag), so the common case
  costs one small request that returns no body, and is never served from a stale cache;
* what a boundary with a lease (``<u64> <lease ms>``, ``gc/wal.boundary``) covers is deleted
  only once this process has known the covering value for the lease
  (:meth:`BoundaryObject.wait_settled`): a read of the boundary made before the advance vouches
  for creates that land within the lease (:mod:`slatedb_core.meta.lease`,
  docs/gc-and-boundaries.md "The boundary lease").
"""

from __future__ import annotations

import logging
import os
import threading
import time

from slatedb_core.errors import (
    BoundaryMissing,
    CommitRetriesExhausted,
    CorruptionError,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    PreconditionFailed,
    StoreError,
    is_retryable,
)
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion

log = logging.getLogger(__name__)

U64_MAX = 2**64 - 1
_MAX_DIGITS = len(str(U64_MAX))

TOMBSTONE = U64_MAX
"""The boundary of every sequenced namespace (manifest, compactions, WAL) of a destroyed and
collected database: no id can be created there again (docs/clones-and-destroy.md)."""
ULID_MS_TOMBSTONE = 2**48 - 1
"""The same for ``gc/compacted.boundary``, whose values are ULID milliseconds (48 bits)."""


LEASE_ENV = "SLATEDB_WAL_LEASE_MS"
MAX_LEASE_MS = 600_000


def _default_lease_s() -> float:
    raw = os.environ.get(LEASE_ENV)
    if raw is None:
        return 1.0
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LEASE_MS:
        raise InvalidArgument(
            f"{LEASE_ENV}={raw!r}: want a whole number of milliseconds from 1 to {MAX_LEASE_MS}"
        )
    return int(raw) / 1000


DEFAULT_LEASE_S = _default_lease_s()
"""The boundary lease recorded in a ``gc/wal.boundary`` this process creates (or upgrades from
a file without one). A read of the boundary vouches that what it does not cover still exists
for the lease: whoever deletes objects the boundary covers waits the lease after it first knew
the covering value (:meth:`BoundaryObject.wait_settled`), so a create that completes within it
of the start of a read showing the boundary below its id collided with the object if it was
there (:mod:`slatedb_core.meta.lease`). The lease lives in the file, written once and kept by
every advance, so every process of a database agrees on it whatever its own default. 1 s, or
:data:`LEASE_ENV` in ms (the test suite shortens it: GC passes that delete WAL SSTs wait it)."""


def lease_clock() -> float:
    """Seconds on a clock that only moves forward and keeps counting while the machine is
    suspended (``CLOCK_BOOTTIME`` where there is one): a writer stopped between its boundary read
    and its create must not believe no time passed."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else time.monotonic()


def _u64(text: bytes, data: bytes, name: str) -> int:
    if not text or len(text) > _MAX_DIGITS or not text.isdigit() or not text.isascii():
        raise CorruptionError(
            name, f"boundary must be one ASCII u64 (and a lease in ms), got {data[:40]!r}"
        )
    value = int(text)
    if value > U64_MAX:
        raise CorruptionError(name, f"boundary {value} exceeds u64")
    return value


def parse_boundary_lease(data: bytes, name: str) -> tuple[int, int | None]:
    """``(value, lease in ms or None)`` of a boundary file: ``<u64>`` or ``<u64> <lease ms>``."""
    parts = data.strip(b"\n").split(b" ")
    if len(parts) > 2:
        raise CorruptionError(
            name, f"boundary must be one ASCII u64 (and a lease), got {data[:40]!r}"
        )
    value = _u64(parts[0], data, name)
    if len(parts) == 1:
        return value, None
    lease = _u64(parts[1], data, name)
    if lease > MAX_LEASE_MS:
        raise CorruptionError(name, f"boundary lease {lease} ms exceeds {MAX_LEASE_MS} ms")
    return value, lease


def parse_boundary(data: bytes, name: str) -> int:
    """The value of a boundary file (see :func:`parse_boundary_lease`)."""
    return parse_boundary_lease(data, name)[0]


def reject_if_covered(boundary: int, object_id: int, object_path: str) -> None:
    """Raise ObjectVersionBehindBoundary if ``object_id`` is at or behind ``boundary``."""
    if object_id <= boundary:
        log.warning(
            "stale sequenced write rejected: %s id %d <= boundary %d",
            object_path,
            object_id,
            boundary,
        )
        raise ObjectVersionBehindBoundary(object_path, object_id, boundary)


def _lease_ms(lease_s: float) -> int:
    ms = round(lease_s * 1000)
    if not 1 <= ms <= MAX_LEASE_MS:
        raise ValueError(f"boundary lease {lease_s} s out of range (1 ms .. {MAX_LEASE_MS} ms)")
    return ms


class BoundaryObject:
    """One namespace's boundary, with the last observed value cached for conditional reads."""

    def __init__(
        self,
        store: ObjectStore,
        path: str,
        *,
        max_advance_attempts: int = 100,
        lease_s: float | None = None,
    ) -> None:
        """``lease_s``: record a lease (:data:`DEFAULT_LEASE_S`) in the file when this process
        creates it or advances one that has none; None for boundaries without a lease."""
        self.store = store
        self.path = path
        self._new_lease_ms = None if lease_s is None else _lease_ms(lease_s)
        self._lease_ms: int | None = None  # the file's, as last read or written
        self._lock = threading.Lock()
        self._value = 0
        self._e_tag: str | None = None
        self._observed = False
        self._max_attempts = max_advance_attempts
        # (value, lease_clock() when this process first knew it): the covering values, ascending
        self._known_since: list[tuple[int, float]] = []

    @property
    def cached(self) -> int:
        """The last value this process observed (0 if none); no request is made."""
        return self._value

    def read(self) -> int:
        """The durable boundary now (one request)."""
        return self._read()[0]

    def read_lease(self) -> tuple[int, int | None]:
        """The durable boundary now and the lease in ms the same read showed (None: the file
        has none, or there is no file). One request."""
        value, _, lease_ms = self._read()
        return value, lease_ms

    def create_with_lease(self) -> int | None:
        """Create the file at 0 with this process's lease if there is none (one request), so
        that reads of it can vouch for creates; 0 covers nothing, so it is always true. Returns
        the lease in ms if this call created the file (it held no boundary until then), else
        None."""
        if self._new_lease_ms is None:
            raise ValueError(f"{self.path}: no lease to record")
        try:
            self.store.put_if_absent(self.path, f"0 {self._new_lease_ms}".encode("ascii"))
        except ObjectAlreadyExists:
            return None
        with self._lock:
            self._observed = True
            self._lease_ms = self._new_lease_ms
            self._e_tag = None  # unknown until the next read
            self._note(0)
        return self._new_lease_ms

    def _read(self) -> tuple[int, ObjectVersion | None, int | None]:
        with self._lock:
            e_tag = self._e_tag
            # known before this request went out, so its answer cannot be below it; an answer
            # below what other reads took in meanwhile was merely served before theirs
            floor = self._value
        try:
            if e_tag is not None:
                res = self.store.get_if_none_match(self.path, e_tag)
                if res is None:
                    with self._lock:
                        return self._value, ObjectVersion(e_tag, None), self._lease_ms
            else:
                res = self.store.get(self.path)
        except ObjectNotFound:
            with self._lock:
                if self._observed:
                    raise BoundaryMissing(
                        f"boundary file {self.path} existed (value {self._value}) and is now "
                        "missing; GC never deletes boundaries, refusing to continue"
                    ) from None
            return 0, None, None
        value, lease_ms = parse_boundary_lease(res.data, self.path)
        with self._lock:
            if value < floor:
                raise CorruptionError(
                    self.path, f"boundary moved backwards from {floor} to {value}"
                )
            if value < self._value:
                # Concurrent reads (a writer's background read and its checks after creates)
                # may be answered in one order and taken in in the other: this older answer
                # is no corruption, and the newer value is as true for this read's caller.
                return self._value, res.version, self._lease_ms
            self._lease_ms = lease_ms
            self._value = value
            self._e_tag = res.meta.e_tag
            self._observed = True
            self._note(value)
        return value, res.version, lease_ms

    def _note(self, value: int) -> None:
        """Record that this process knows ``value`` from now on (caller holds ``_lock``); the
        read or write that showed it has completed, so the value was durable before now."""
        if not self._known_since or self._known_since[-1][0] < value:
            self._known_since.append((value, lease_clock()))
            del self._known_since[:-64]  # only the newest matter; old ones are long settled

    @property
    def lease_s(self) -> float:
        """The file's lease as last read or written here (0 for a file without one: no reader
        of such a file trusts a read for a later create)."""
        with self._lock:
            return (self._lease_ms or 0) / 1000

    def settled(self) -> int:
        """The highest value this process has known for at least the lease (0 if none): what it
        covers may be deleted now. No request is made."""
        now = lease_clock()
        lease = self.lease_s
        with self._lock:
            done = [v for v, since in self._known_since if now - since >= lease]
        return max(done, default=0)

    def wait_settled(self, value: int) -> None:
        """Sleep until a value at or above ``value`` has been known for the lease, so a
        writer's read made before it was published no longer vouches for anything it covers
        (:mod:`slatedb_core.meta.lease`). Call it after :meth:`advance` (or a read) showed it."""
        with self._lock:
            since = next((t for v, t in self._known_since if v >= value), None)
        if since is None:
            raise ValueError(f"{self.path}: boundary {value} was never observed here")
        left = since + self.lease_s - lease_clock()
        if left > 0:
            time.sleep(left)

    def check(self, object_id: int, object_path: str) -> int:
        """Raise ObjectVersionBehindBoundary if ``object_id`` is at or behind the boundary."""
        boundary = self.read()
        reject_if_covered(boundary, object_id, object_path)
        return boundary

    def advance(self, target: int) -> int:
        """Durably move the boundary to at least ``target``; returns the durable value."""
        if not 0 <= target <= U64_MAX:
            raise ValueError(f"boundary target {target} out of u64 range")
        for _ in range(self._max_attempts):
            try:
                # A fresh, unconditional read: the update needs the current version.
                with self._lock:
                    self._e_tag = None
                current, version, _ = self._read()
                if current >= target:
                    return current
                with self._lock:
                    lease_ms = self._lease_ms if self._lease_ms is not None else self._new_lease_ms
                data = (str(target) if lease_ms is None else f"{target} {lease_ms}").encode("ascii")
                if version is None:
                    self.store.put_if_absent(self.path, data)
                else:
                    self.store.put_if_match(self.path, data, version)
            except (ObjectAlreadyExists, PreconditionFailed):
                continue  # a concurrent GC moved it; re-read and compare
            except StoreError as e:
                if not is_retryable(e):
                    raise
                log.warning("boundary advance of %s: %s; re-reading", self.path, e)
                continue  # the write may or may not have landed: re-read decides
            with self._lock:
                self._value = max(self._value, target)
                self._observed = True
                self._e_tag = None  # unknown until the next read
                self._lease_ms = lease_ms
                self._note(target)
            return target
        raise CommitRetriesExhausted(
            f"advance boundary {self.path} to {target}", self._max_attempts
        )
