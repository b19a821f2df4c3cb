"""GC boundary files for sequenced metadata (SlateDB RFC 0026; docs/gc-and-boundaries.md).

``<db>/gc/<namespace>.boundary`` holds one ASCII u64, an inclusive high-watermark: ids ``<= B`` may
already be deleted, so a create-if-absent that "succeeds" at such an id proves nothing (the earlier
object of that id may have been garbage-collected) and must not be reported as committed.

Invariants kept here:

* a missing file reads as 0, until this process has once seen it; after that, missing is a hard
  error (:class:`BoundaryMissing`), because GC never deletes boundary files;
* the value only moves forward: :meth:`BoundaryObject.advance` uses create-if-absent or a conditional
  update and re-reads until the durable value is at least the target; a read that goes backwards is
  reported as corruption;
* ``check`` reads through a conditional GET (If-None-Match on the cached e-tag), so the common case
  costs one small request that returns no body, and is never served from a stale cache.
"""

from __future__ import annotations

import logging
import threading

from slatedb_core.errors import (
    BoundaryMissing,
    CommitRetriesExhausted,
    CorruptionError,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    PreconditionFailed,
    StoreError,
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


def parse_boundary(data: bytes, name: str) -> int:
    text = data.strip(b"\n")
    if not text or len(text) > _MAX_DIGITS or not text.isdigit() or not text.isascii():
        raise CorruptionError(name, f"boundary must be one ASCII u64, got {data[:40]!r}")
    value = int(text)
    if value > U64_MAX:
        raise CorruptionError(name, f"boundary {value} exceeds u64")
    return value


class BoundaryObject:
    """One namespace's boundary, with the last observed value cached for conditional reads."""

    def __init__(self, store: ObjectStore, path: str, *, max_advance_attempts: int = 100) -> None:
        self.store = store
        self.path = path
        self._lock = threading.Lock()
        self._value = 0
        self._e_tag: str | None = None
        self._observed = False
        self._max_attempts = max_advance_attempts

    @property
    def cached(self) -> int:
        """The last value this process observed (0 if none); no request is made."""
        return self._value

    def read(self) -> int:
        """The durable boundary now (one request)."""
        value, _ = self._read()
        return value

    def _read(self) -> tuple[int, ObjectVersion | None]:
        with self._lock:
            e_tag = self._e_tag
        try:
            if e_tag is not None:
                res = self.store.get_if_none_match(self.path, e_tag)
                if res is None:
                    with self._lock:
                        return self._value, ObjectVersion(e_tag, None)
            else:
                res = self.store.get(self.path)
        except ObjectNotFound:
            with self._lock:
                if self._observed:
                    raise BoundaryMissing(
                        f"boundary file {self.path} existed (value {self._value}) and is now "
                        "missing; GC never deletes boundaries, refusing to continue"
                    ) from None
            return 0, None
        value = parse_boundary(res.data, self.path)
        with self._lock:
            if value < self._value:
                raise CorruptionError(
                    self.path, f"boundary moved backwards from {self._value} to {value}"
                )
            self._value = value
            self._e_tag = res.meta.e_tag
            self._observed = True
        return value, res.version

    def check(self, object_id: int, object_path: str) -> int:
        """Raise ObjectVersionBehindBoundary if ``object_id`` is at or behind the boundary."""
        boundary = self.read()
        if object_id <= boundary:
            log.warning(
                "stale sequenced write rejected: %s id %d <= boundary %d",
                object_path,
                object_id,
                boundary,
            )
            raise ObjectVersionBehindBoundary(object_path, object_id, boundary)
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
                current, version = self._read()
                if current >= target:
                    return current
                data = str(target).encode("ascii")
                if version is None:
                    self.store.put_if_absent(self.path, data)
                else:
                    self.store.put_if_match(self.path, data, version)
            except (ObjectAlreadyExists, PreconditionFailed):
                continue  # a concurrent GC moved it; re-read and compare
            except StoreError as e:
                if not e.retryable:
                    raise
                log.warning("boundary advance of %s: %s; re-reading", self.path, e)
                continue  # the write may or may not have landed: re-read decides
            with self._lock:
                self._value = max(self._value, target)
                self._observed = True
                self._e_tag = None  # unknown until the next read
            return target
        raise CommitRetriesExhausted(
            f"advance boundary {self.path} to {target}", self._max_attempts
        )
