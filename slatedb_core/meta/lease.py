"""Checking creates against a boundary in one round trip: the boundary lease
(docs/gc-and-boundaries.md, "The boundary lease").

SlateDB RFC 0026's rule is that a create-if-absent at an id is trusted only after a read of the
namespace's boundary shows the boundary below the id, and that read must be served after the
create: an object GC has deleted no longer collides with a zombie's create, and only a read made
later can see the boundary GC advanced before deleting it. That costs a second round trip per
create.

The lease moves the read off the critical path. The boundary file records a lease ``L``
(``<u64> <lease ms>``, written when the file is created and kept by every advance), and whoever
deletes what the boundary covers waits ``L`` after it first knew the covering value
(:meth:`~slatedb_core.meta.boundary.BoundaryObject.wait_settled`). So if a read *started* at
``s`` shows the boundary below id ``x``, the boundary covering ``x`` was published after ``s``
and nothing it covers is deleted before ``s + L``: a create of ``x`` that *completed*
before ``s + L`` (on this process's clock, which keeps counting through suspends) either
collided with the object that was there or filled a slot that was never collected. Either way
the create proves what a read after it would have proved. Only durations are compared, each on
one machine's clock, so clock offsets between machines do not matter; a margin
(:data:`TRUST_FRACTION`) covers clocks that run at slightly different rates.

:class:`LeasedBoundary` keeps a recent read in hand: before a create it starts a background
read once the newest one is older than half the lease, so a steady writer pays one
conditional GET (usually a bodiless 304) per half lease instead of one per create, and
never waits for it. A read that finds no file creates it at 0 with this process's lease
(:meth:`~slatedb_core.meta.boundary.BoundaryObject.create_with_lease`; 0 covers nothing); a
file without a lease vouches for nothing. A create that no read vouches for
(the read failed, or the create took longer than the lease) falls back to a read made after it,
the plain RFC 0026 check.
"""

from __future__ import annotations

import logging
import threading

from slatedb_core.meta.boundary import BoundaryObject, lease_clock, reject_if_covered

log = logging.getLogger(__name__)

TRUST_FRACTION = 0.8
"""A read vouches for creates completed within this fraction of its lease of its start."""
REFRESH_FRACTION = 0.5
"""A new background read starts once the newest read is older than this fraction of the lease."""
IDLE_REFRESH_S = 1.0
"""How often a writer re-reads a boundary file that records no lease (written by an older
version): such a read vouches for nothing until GC's next advance records one."""


class _Read:
    """One read of the boundary: when it started, and its value or error once done."""

    __slots__ = ("done", "error", "started", "trust_s", "value")

    def __init__(self, started: float) -> None:
        self.started = started
        self.done = threading.Event()
        self.value: int | None = None
        self.trust_s = 0.0  # how long after ``started`` a create may complete and be vouched for
        self.error: BaseException | None = None

    def vouches_for(self, created_at: float) -> bool:
        """Whether this read (once done, if it is not) speaks for a create completed at
        ``created_at``: it started after it (SlateDB RFC 0026's read after the create), or
        within the lease before it."""
        return (
            not self.done.is_set()
            or self.started >= created_at
            or created_at - self.started < self.trust_s
        )

    def fresh_until(self) -> float:
        """When a new read should replace this one (done)."""
        if self.error is not None:
            return self.started
        if self.trust_s == 0:  # a file without a lease: reading it again soon buys nothing
            return self.started + IDLE_REFRESH_S
        return self.started + self.trust_s * REFRESH_FRACTION / TRUST_FRACTION


class LeasedBoundary:
    """The boundary checks of one writer's creates (module docstring). Thread-safe."""

    def __init__(self, boundary: BoundaryObject) -> None:
        self.boundary = boundary
        self._lock = threading.Lock()
        self._reads: list[_Read] = []  # newest last: the last completed one and any in flight
        self.background_reads = 0
        self.checks_after_create = 0

    def prepare(self) -> None:
        """Call before a create: starts a background read if no recent one is done or under
        way, so that the check after the create finds one in hand."""
        now = lease_clock()
        with self._lock:
            newest = self._reads[-1] if self._reads else None
            if newest is not None and (not newest.done.is_set() or now < newest.fresh_until()):
                return
            read = _Read(now)
            self._reads.append(read)
            self.background_reads += 1
        try:
            threading.Thread(
                target=self._run, args=(read,), name="boundary-lease-read", daemon=True
            ).start()
        except BaseException as e:
            # No thread (the process is out of them): the read never runs, so it must not stay
            # in flight, or every check would wait for it and no prepare would start another.
            # The create goes ahead and is checked by a read after it (SlateDB RFC 0026).
            self._finish(read, e)
            if not isinstance(e, Exception):
                raise
            log.warning("boundary read of %s not started: %s", self.boundary.path, e)

    def _run(self, read: _Read) -> None:
        error: BaseException | None = None
        try:
            value, lease_ms = self.boundary.read_lease()
            if lease_ms is None and value == 0:
                # no file (or one at 0 without a lease, which vouches for nothing): create it.
                # Created by us, it held no boundary before, so this read still speaks from
                # its start; otherwise read what is there.
                created = self.boundary.create_with_lease()
                value, lease_ms = (0, created) if created else self.boundary.read_lease()
            read.value = value
            read.trust_s = (lease_ms or 0) / 1000 * TRUST_FRACTION
        except BaseException as e:
            error = e
        finally:
            self._finish(read, error)

    def _finish(self, read: _Read, error: BaseException | None) -> None:
        """Mark ``read`` done (failed with ``error`` if not None)."""
        if error is not None:
            read.error = error
        read.done.set()
        with self._lock:
            # keep the newest completed read and everything after it
            done = [i for i, r in enumerate(self._reads) if r.done.is_set()]
            if done:
                del self._reads[: done[-1]]

    def check(self, object_id: int, object_path: str, created_at: float) -> None:
        """Raise ObjectVersionBehindBoundary unless ``object_id`` is above the boundary, as seen
        by a read that vouches for a create completed at ``created_at`` (:func:`lease_clock`
        taken after the create returned) or, failing one, by a read made now."""
        with self._lock:
            candidates = [r for r in self._reads if r.vouches_for(created_at)]
        # a completed read first (the newest), then one still in flight: it started before the
        # create completed, so it may vouch for it too once it is done
        candidates.sort(key=lambda r: (r.done.is_set(), r.started), reverse=True)
        for read in candidates:
            read.done.wait()
            if read.error is None and read.value is not None and read.vouches_for(created_at):
                reject_if_covered(read.value, object_id, object_path)
                return
        # nothing vouches for this create: a read served after it (SlateDB RFC 0026)
        self.checks_after_create += 1
        self.boundary.check(object_id, object_path)
