"""Sequenced metadata objects: ``<db>/<namespace>/{id:020}.<suffix>``, written only by
create-if-absent.

The filename is the commit point (SlateDB RFC 0001 "Manifest Updates";
docs/manifest-and-fencing.md): whoever creates id ``N+1`` first owns that version. This module
adds three things to the bare protocol:

* **Cheap latest lookup** (Lance issue #1362). An advisory pointer ``<namespace>/_latest_version``
  holds a recent id as ASCII. Lookup = GET pointer + one LIST starting just below it, so it costs
  2 requests whatever the history length. Correctness never depends on the pointer: a missing or
  garbage pointer falls back to a full listing, a stale one only makes the LIST return a few more
  names, and one that points past the real latest is detected (nothing listed at or after it) and
  ignored. It is rewritten every ``pointer_stride`` commits, so commits rarely pay for it.
* **Boundary check after every create** (SlateDB RFC 0026). See :mod:`slatedb_core.meta.boundary`.
* **Ambiguous creates resolved by content.** A create can fail after taking effect (a lost
  response, a client-side retry that then sees its own object). Every object we write carries a
  random nonce (a manifest's in its table of ours, docs/format.md "Manifest"; our own objects' in
  :mod:`slatedb_core.meta.envelope`), so on ``AlreadyExists`` or an I/O error we read
  the object back: identical bytes mean the object is ours and the create succeeded; different
  bytes mean we lost. The writer neither re-applies its change on top of itself nor reports a
  false conflict.

A lost race raises the generic :class:`VersionExists`; the manifest store asks for its subclass
:class:`ManifestVersionExists` (``conflict=``). The update loop over these objects is
:mod:`slatedb_core.meta.versioned`; names come from :mod:`slatedb_core.layout`.

Ids start at 1: the boundary's "missing = 0" is inclusive, so id 0 would be born behind it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from slatedb_core.errors import (
    InvalidArgument,
    InvalidDeletion,
    ObjectAlreadyExists,
    ObjectNotFound,
    StoreError,
    VersionExists,
    is_retryable,
)
from slatedb_core.layout import LATEST_POINTER, boundary_path, join, sequenced_name
from slatedb_core.meta.boundary import U64_MAX, BoundaryObject
from slatedb_core.store.objectstore import ObjectStore, validate_relative_path

log = logging.getLogger(__name__)

FIRST_ID = 1


@dataclass(frozen=True, slots=True)
class SequencedEntry:
    id: int
    path: str
    size: int
    last_modified: datetime


class SequencedStore:
    """One namespace of sequenced objects of one database (or table): ``<db_path>/<namespace>/``,
    its boundary ``<db_path>/gc/<namespace>.boundary``. A lost race raises ``conflict``."""

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        namespace: str,
        suffix: str,
        *,
        pointer_stride: int = 16,
        ambiguity_retries: int = 5,
        conflict: type[VersionExists] = VersionExists,
    ) -> None:
        validate_relative_path(db_path, what="database path")
        self.store = store
        self.db_path = db_path
        self.namespace = namespace
        self.suffix = suffix
        self.dir = join(db_path, namespace)
        self.pointer_path = join(self.dir, LATEST_POINTER)
        self.boundary = BoundaryObject(store, boundary_path(db_path, namespace))
        self._pointer_stride = max(1, pointer_stride)
        self._ambiguity_retries = ambiguity_retries
        self._conflict = conflict
        self._name_re = re.compile(r"^(\d{20})\." + re.escape(suffix) + r"$")

    # ---- names ---------------------------------------------------------------------------
    def path(self, object_id: int) -> str:
        if not 0 <= object_id <= U64_MAX:
            raise InvalidArgument(f"sequenced id {object_id} out of u64 range")
        return f"{self.dir}/{sequenced_name(object_id, self.suffix)}"

    def parse(self, path: str) -> int | None:
        """The id named by ``path``, or None for anything that is not one of ours."""
        if not path.startswith(self.dir + "/"):
            return None
        m = self._name_re.match(path[len(self.dir) + 1 :])
        if m is None:
            return None
        oid = int(m.group(1))
        # 20 digits reach past u64: no writer makes such a name, and path() would refuse the id.
        return oid if oid <= U64_MAX else None

    # ---- reads ---------------------------------------------------------------------------
    def list(self, start: int | None = None, end: int | None = None) -> list[SequencedEntry]:
        """Entries with ``start <= id < end`` (None = unbounded), sorted by id."""
        after = self.path(start - 1) if start is not None and start > 0 else None
        out: list[SequencedEntry] = []
        for meta in self.store.list(self.dir, start_after=after):
            oid = self.parse(meta.path)
            if oid is None:
                continue
            if end is not None and oid >= end:
                break
            out.append(SequencedEntry(oid, meta.path, meta.size, meta.last_modified))
        return out

    def _read_pointer(self) -> int | None:
        try:
            data = self.store.get(self.pointer_path).data
        except ObjectNotFound:
            return None
        text = data.strip()
        if not text.isdigit() or len(text) > 20 or int(text) > U64_MAX:
            log.warning("ignoring garbage latest pointer %s: %r", self.pointer_path, data[:40])
            return None
        return int(text)

    def latest_id(self) -> int | None:
        """The highest existing id, or None for an empty namespace. Two requests when the pointer
        is sane; a full listing otherwise."""
        return self._lookup()[0]

    def _lookup(self) -> tuple[int | None, bool]:
        """(:meth:`latest_id`, whether a sane pointer found it)."""
        pointer = self._read_pointer()
        if pointer is not None and pointer >= FIRST_ID:
            ids = [e.id for e in self.list(start=pointer)]
            if ids:
                return ids[-1], True
            # Nothing at or after the pointer: it points past reality. Ignore it.
            log.warning(
                "latest pointer %s=%d names no object; listing all", self.pointer_path, pointer
            )
        ids = [e.id for e in self.list()]
        return (ids[-1] if ids else None), False

    def read(self, object_id: int) -> bytes:
        return self.store.get(self.path(object_id)).data

    def read_latest(self, max_attempts: int = 10) -> tuple[int, bytes] | None:
        """(id, bytes) of the latest object. Retries if GC deleted the id between LIST and GET."""
        found = self.read_latest_hinted(max_attempts)
        return None if found is None else found[:2]

    def read_latest_hinted(self, max_attempts: int = 10) -> tuple[int, bytes, bool] | None:
        """:meth:`read_latest`, and whether the pointer found it. Only a creator that passed its
        boundary check writes the pointer, and destroy deletes it: a latest found without one
        may be a void write (a zombie's, into a destroyed path) and deserves a boundary read."""
        for _ in range(max_attempts):
            latest, pointed = self._lookup()
            if latest is None:
                return None
            try:
                return latest, self.read(latest), pointed
            except ObjectNotFound:
                continue  # superseded and collected meanwhile: look again
        raise StoreError(f"latest object in {self.dir} kept disappearing while being read")

    # ---- writes --------------------------------------------------------------------------
    def create(self, object_id: int, data: bytes) -> None:
        """Commit ``data`` as ``object_id``.

        Raises VersionExists (``conflict``) when another writer owns the id, ObjectVersionBehindBoundary
        when the id is at or behind the GC boundary (a stale writer), and StoreError only when the
        outcome stayed unknown after ``ambiguity_retries`` attempts to find out.
        """
        if object_id < FIRST_ID:
            raise InvalidArgument(f"sequenced ids start at {FIRST_ID}, got {object_id}")
        path = self.path(object_id)
        self._create_resolving_ambiguity(path, object_id, data)
        self.boundary.check(object_id, path)
        if object_id % self._pointer_stride == 0 or object_id == FIRST_ID:
            self._write_pointer(object_id)

    def _create_resolving_ambiguity(self, path: str, object_id: int, data: bytes) -> None:
        last_error: StoreError | None = None
        for _ in range(self._ambiguity_retries):
            try:
                self.store.put_if_absent(path, data)
                return
            except ObjectAlreadyExists:
                if self._holds(path, data, on_missing=lambda: False):
                    return  # an earlier attempt of ours landed
                raise self._conflict(path, object_id) from None
            except StoreError as e:
                if not is_retryable(e):
                    raise
                last_error = e
                log.info("create %s came back ambiguous (%s); reading it back", path, e)
                try:
                    if self._holds(path, data, on_missing=lambda: None):
                        return
                except VersionExists:
                    raise
                except StoreError as read_error:
                    last_error = read_error
                    continue
                # Not there: the create did not take effect. Try again.
        assert last_error is not None
        raise last_error

    def _holds(self, path: str, data: bytes, on_missing: Callable[[], bool | None]) -> bool | None:
        """True if ``path`` holds exactly ``data``; raises VersionExists if it holds
        something else; ``on_missing()`` if it does not exist."""
        try:
            stored = self.store.get(path).data
        except ObjectNotFound:
            return on_missing()
        if stored == data:
            return True
        oid = self.parse(path)
        raise self._conflict(path, oid if oid is not None else -1, existing=stored)

    def _write_pointer(self, object_id: int) -> None:
        try:
            self.store.put(self.pointer_path, str(object_id).encode("ascii"))
        except StoreError as e:  # advisory only: a stale pointer costs a longer LIST, nothing else
            log.warning("could not update latest pointer %s: %s", self.pointer_path, e)

    # ---- GC ------------------------------------------------------------------------------
    def advance_boundary(self, target: int) -> int:
        """Declare ids ``<= target`` dead. Refuses to cover the latest object."""
        latest = self.latest_id()
        if latest is None or target >= latest:
            raise InvalidDeletion(
                f"boundary {target} would cover the latest {self.namespace} ({latest})"
            )
        return self.boundary.advance(target)

    def delete(self, object_id: int, *, latest: int | None = None) -> None:
        """Delete one object; allowed only at or behind the durable boundary and never the latest."""
        boundary = self.boundary.read()
        if object_id > boundary:
            raise InvalidDeletion(
                f"{self.path(object_id)} is ahead of the {self.namespace} boundary {boundary}; "
                "advance the boundary first"
            )
        if latest is None:
            latest = self.latest_id()
        if latest is None or object_id >= latest:
            raise InvalidDeletion(f"refusing to delete the latest {self.namespace} {object_id}")
        self.store.delete(self.path(object_id))
