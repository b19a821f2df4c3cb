"""An object store that records every call of one "process" and kills it at a chosen call.

A crash point is named by the call it sits next to: (op, kind, ordinal), "the ordinal-th call of
this op on this kind of object", and a side: ``before`` (the process dies as it is about to send
the request; nothing reaches the store) or ``after`` (the request took effect; the process dies
before it sees the answer). Naming by ordinal per (op, kind) rather than by global position keeps
a crash point stable when unrelated calls of different kinds change order between runs.

Death is real for the process that owns this wrapper: the first crash raises
:class:`ProcessKilled` (a ``BaseException``, so no ``except Exception`` retry loop of the library
swallows it), and from then on every call from any thread of that process raises it again before
reaching the store. The harness then stops the process's background threads
(:func:`tests.crash.process.run_process`). Calls are serialised by a lock held across the inner
request, so "right after call k" really means no other request of the process took effect between
call k and the death.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeVar

from slatedb_core.store.objectstore import (
    GetResult,
    ObjectMeta,
    ObjectStore,
    ObjectVersion,
    RequestCounters,
)

T = TypeVar("T")
Side = Literal["before", "after"]


class ProcessKilled(BaseException):
    """The simulated process died at a crash point; raised by every later call it attempts.

    Deliberately not a :class:`slatedb_core.errors.SlateDBError` nor an ``Exception``: a kill -9
    is not an error the library may handle, retry or log and carry on from.
    """


@dataclass(frozen=True, slots=True)
class Call:
    """One store call of a process: what it did, to which kind of object, and the how-many-th
    call of that (op, kind) it was."""

    index: int
    op: str
    kind: str
    ordinal: int
    path: str


@dataclass(frozen=True, slots=True)
class CrashPoint:
    op: str
    kind: str
    ordinal: int
    side: Side


# Objects of one database, by the first segment of their path under the database root.
_NAMESPACES = {
    "manifest": "manifest",
    "compactions": "compactions",
    "wal": "wal",
    "compacted": "sst",
}


def path_kind(path: str, roots: dict[str, str]) -> str:
    """A short, stable name for the kind of object ``path`` is (ids and ULIDs stripped).

    ``roots`` maps database paths to display names; an empty display name (the usual single
    database) leaves the kind unprefixed, e.g. ``manifest``; others read ``clone.manifest``.
    """
    for root in sorted(roots, key=len, reverse=True):
        if path == root or path.startswith(root + "/"):
            rest = path[len(root) + 1 :]
            label = roots[root]
            break
    else:
        return "other"
    seg, _, tail = rest.partition("/")
    if seg == "":
        kind = "db"
    elif seg == "gc":
        kind = tail.removesuffix(".boundary") + "-boundary" if tail else "gc"
    elif seg in _NAMESPACES:
        kind = _NAMESPACES[seg]
        if tail == "_latest_version":
            kind += "-pointer"
    else:
        kind = seg
    return f"{label}.{kind}" if label else kind


def _timed_boundary_read(op: str, path: str, roots: dict[str, str]) -> bool:
    """A writer's ``gc/wal.boundary`` read or the boundary lease's own calls: how many there are
    depends on timing (a read every half lease, one after a create no read vouches for;
    slatedb_core/meta/lease.py), so they are no crash points. A death at a read is a death
    before the process's next call, which is one; creating the file at 0 changes nothing."""
    if threading.current_thread().name == "boundary-lease-read":
        return True
    return op in ("get", "get_if_none_match") and path_kind(path, roots) == "wal-boundary"


class CrashStore(ObjectStore):
    """Delegates to ``inner``; records calls while armed; dies at ``target`` (if set)."""

    def __init__(
        self, inner: ObjectStore, roots: dict[str, str], target: CrashPoint | None = None
    ) -> None:
        self._inner = inner
        self._roots = roots
        self.url = f"crash+{inner.url}"
        self.counters = RequestCounters()
        self.target = target
        self.calls: list[Call] = []
        self.died = threading.Event()
        self.crashed_at: Call | None = None
        self.calls_after_death = 0
        self.late_calls: list[tuple[str, str, str]] = []
        """``(op, path, thread name)`` of every call the dead process attempted."""
        self._armed = False
        self._ordinals: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    @property
    def inner(self) -> ObjectStore:
        return self._inner

    def arm(self) -> None:
        """Start recording (and counting towards the crash point) from the next call."""
        with self._lock:
            self._armed = True

    def disarm(self) -> None:
        with self._lock:
            self._armed = False

    def _die(self, call: Call) -> ProcessKilled:
        self.crashed_at = call
        self.died.set()
        return ProcessKilled(f"killed {self.target.side if self.target else ''} {call}")

    def _run(self, op: str, path: str, request: Callable[[], T]) -> T:
        with self._lock:
            if self.died.is_set():
                self.calls_after_death += 1
                self.late_calls.append((op, path, threading.current_thread().name))
                raise ProcessKilled(f"dead process attempted {op} {path}")
            call: Call | None = None
            hit = False
            if self._armed and not _timed_boundary_read(op, path, self._roots):
                kind = path_kind(path, self._roots)
                ordinal = self._ordinals.get((op, kind), 0)
                self._ordinals[(op, kind)] = ordinal + 1
                call = Call(len(self.calls), op, kind, ordinal, path)
                self.calls.append(call)
                t = self.target
                hit = t is not None and (t.op, t.kind, t.ordinal) == (op, kind, ordinal)
            if hit and self.target is not None and self.target.side == "before":
                assert call is not None
                raise self._die(call)
            self.counters.incr(op)
            try:
                result = request()
            except Exception:
                if hit:  # the request was made; its answer (an error here) is never seen
                    assert call is not None
                    raise self._die(call) from None
                raise
            if hit:
                assert call is not None
                raise self._die(call)
            return result

    # ---- the ObjectStore interface -----------------------------------------------------------
    def get(self, path: str, *, byte_range: tuple[int, int] | None = None) -> GetResult:
        return self._run("get", path, lambda: self._inner.get(path, byte_range=byte_range))

    def get_if_none_match(self, path: str, e_tag: str) -> GetResult | None:
        return self._run("get", path, lambda: self._inner.get_if_none_match(path, e_tag))

    def head(self, path: str) -> ObjectMeta:
        return self._run("head", path, lambda: self._inner.head(path))

    def put(self, path: str, data: bytes) -> ObjectVersion:
        return self._run("put", path, lambda: self._inner.put(path, data))

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        return self._run("put_if_absent", path, lambda: self._inner.put_if_absent(path, data))

    def put_if_match(self, path: str, data: bytes, expected: ObjectVersion) -> ObjectVersion:
        return self._run(
            "put_if_match", path, lambda: self._inner.put_if_match(path, data, expected)
        )

    def copy_if_absent(self, src: str, dst: str) -> None:
        # A crash point names the copy by the object it creates, ``dst``.
        self._run("copy", dst, lambda: self._inner.copy_if_absent(src, dst))

    def list(self, prefix: str, *, start_after: str | None = None) -> Iterator[ObjectMeta]:
        # Materialised inside the call: a lazy listing would send its requests after the death.
        items = self._run(
            "list", prefix, lambda: builtins.list(self._inner.list(prefix, start_after=start_after))
        )
        return iter(items)

    def delete(self, path: str) -> None:
        self._run("delete", path, lambda: self._inner.delete(path))
