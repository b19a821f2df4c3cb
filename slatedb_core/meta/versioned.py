"""THE update loop of every sequenced object (manifests, ``.compactions`` records, a table's shard
map) and THE boundary-first collection of their old versions.

The update loop (docs/manifest-and-fencing.md; SlateDB RFC 0001 "Manifest Updates"), drawn::

        +-----------------------------+
        | base = local copy or latest |<--------------------------------+
        +--------------+--------------+                                 |
                       v                                                |
        fence check: epoch in base newer than ours? ---yes---> raise Fenced
                       | no                                             |
                       v                                                |
        new = change(base)   (None -> done, nothing written)            |
                       v                                                |
        create-if-absent  <namespace>/{base.id+1:020}.<suffix>          |
           |            |                 |                             |
        success    VersionExists    ObjectVersionBehindBoundary         |
           |            |                 | settle: committed? --yes--> return it
           |            |                 | no (void: our base was stale)
           |            +-----------------+--> backoff, re-read latest --+
           v                (after max_attempts: CommitRetriesExhausted)
        return the committed version (base.id+1, new)

An epoch older than the stored one is always raised to the caller as :class:`Fenced`; it is never
logged and dropped (SlateDB's manifest design doc, docs/manifest-and-fencing.md, describes how
that lost writes in the original). Each caller brings its own fence check: the manifest's
(:class:`~slatedb_core.manifest.store.Fence`), the compactor's epoch in ``.compactions``, none for
the shard map (a table has no single writer).

Two outcomes are ambiguous, and neither is settled by re-applying the change blindly:

* a create whose response was lost: :class:`~slatedb_core.meta.sequenced.SequencedStore` reads
  the object back and recognises its own bytes by their nonce;
* a create at or behind the GC boundary (SlateDB RFC 0026): void, unless others built on it before
  GC passed it. The caller's ``settle`` hook decides (the manifest reads its successor's parent
  nonce, :mod:`slatedb_core.manifest.store`); by default the void object is deleted, so nobody
  reads it as history, and the loop retries on the latest version.

Losers back off with full jitter, in slots sized from the first attempt (as Lance does), so
contenders spread out instead of colliding again at once. With immediate retries, the winner of
a race, whose next update builds on its own cached copy without re-reading, keeps winning and
starves the others into :class:`CommitRetriesExhausted`.

Boundary-first collection (SlateDB RFC 0026; docs/gc-and-boundaries.md): old versions are deleted
only after the boundary has durably moved over them, so a stalled writer that creates one of their
ids afterwards fails its boundary check; the latest version is never covered.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from slatedb_core.errors import (
    CommitRetriesExhausted,
    CorruptionError,
    ObjectVersionBehindBoundary,
    VersionExists,
)
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.meta.sequenced import SequencedEntry, SequencedStore

log = logging.getLogger(__name__)


class Version(Protocol):
    """A version of a sequenced object as its store hands it out: it knows its id."""

    @property
    def id(self) -> int: ...


V = TypeVar("V", bound=Version)
N = TypeVar("N")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often an update retries after losing a race, and how long it backs off in between."""

    max_attempts: int = 100
    max_backoff_s: float = 0.2
    min_backoff_s: float = 0.001

    def backoff_s(self, attempt: int, slot_s: float) -> float:
        """Full-jitter exponential backoff before retry ``attempt + 1``, in slots of ``slot_s``
        (the first attempt's duration, clamped to ``[min_backoff_s, max_backoff_s]``)."""
        slot = min(max(slot_s, self.min_backoff_s), self.max_backoff_s)
        cap = min(self.max_backoff_s, slot * (2 ** min(attempt, 10)))
        return random.uniform(0, cap)


Change = Callable[[V], N | None]
"""``change(base)``: the new content to commit on top of ``base``, or None to commit nothing. It
is re-applied to each newer version after a conflict, so it must be a pure function of ``base``."""
Fence = Callable[[V], None]
"""Raises (usually :class:`~slatedb_core.errors.Fenced`) if ``base`` belongs to a newer holder."""
Encode = Callable[[int, N, V | None], tuple[bytes, V]]
"""``encode(id, new, base)``: the bytes to create as ``id``, and the version they are once
committed. Raises to refuse ``new`` (nothing is written)."""
Settle = Callable[[V, ObjectVersionBehindBoundary], bool]
"""``settle(ours, err)``: our create of ``ours`` landed at or behind the GC boundary. True: it is
committed all the same; False: it is void (and removed), the loop retries on the latest version."""


class VersionedStore(Generic[V, N]):
    """The update loop over one namespace of sequenced objects (module docstring).

    ``read_latest`` returns the latest version (an empty one, id 0, if the caller allows updating
    a namespace without objects); ``decode(id, bytes)`` a version from an object's bytes. With
    ``build_on_winner`` > 0, that many first retries build on the winner's bytes, already read to
    rule out an ambiguous create of our own, instead of reading the latest (2 requests per attempt
    instead of 5).
    """

    def __init__(
        self,
        seq: SequencedStore,
        *,
        what: str,
        read_latest: Callable[[], V],
        decode: Callable[[int, bytes], V],
        encode: Encode[N, V],
        retry: RetryPolicy | None = None,
        settle: Settle[V] | None = None,
        build_on_winner: int = 0,
    ) -> None:
        self.seq = seq
        self.what = what
        self.retry = retry or RetryPolicy()
        self._read_latest = read_latest
        self._decode = decode
        self._encode = encode
        self._settle = settle or self.delete_void
        self._build_on_winner = build_on_winner

    def commit(self, object_id: int, new: N, base: V | None) -> V:
        """Create ``new`` (built on ``base``) as ``object_id``, once: VersionExists if another
        writer owns the id, ObjectVersionBehindBoundary if the create is void (after settling)."""
        data, ours = self._encode(object_id, new, base)
        try:
            self.seq.create(object_id, data)
        except ObjectVersionBehindBoundary as e:
            if self._settle(ours, e):
                return ours
            raise
        return ours

    def update(
        self, change: Change[V, N], *, base: V | None = None, fence: Fence[V] | None = None
    ) -> V:
        """Commit ``change(latest)`` as the next id, retrying on conflict; the version committed,
        or the base if ``change`` returned None. ``base`` is an optimistic guess of the latest
        (saves the read when right)."""
        current = base if base is not None else self._read_latest()
        first_attempt_s: float | None = None
        attempts = self.retry.max_attempts
        for attempt in range(1, attempts + 1):
            if fence is not None:
                fence(current)
            new = change(current)
            if new is None:
                return current
            started = time.monotonic()
            try:
                return self.commit(current.id + 1, new, current)
            except (VersionExists, ObjectVersionBehindBoundary) as e:
                # Behind the boundary means our base was stale long enough for GC to collect
                # id+1: the write is void (never reported), and like any conflict we re-read the
                # true latest, re-check the fence and re-apply the change there.
                if isinstance(e, ObjectVersionBehindBoundary):
                    log.warning(
                        "%s landed behind the GC boundary; retrying on the latest version",
                        self.what,
                    )
                else:
                    log.debug("%s lost id %d; retrying", self.what, current.id + 1)
                if first_attempt_s is None:
                    first_attempt_s = time.monotonic() - started
                if attempt == attempts:
                    break
                time.sleep(self.retry.backoff_s(attempt, first_attempt_s))
                current = self._next_base(current, e, attempt)
        raise CommitRetriesExhausted(self.what, attempts)

    def _next_base(self, current: V, err: Exception, attempt: int) -> V:
        """Where to retry after losing: the winner's version (``build_on_winner``), or the latest.

        Only a winner above the boundary is history: one at or behind it is a void stale write
        (possibly our own earlier attempt, whose boundary check failed), and building on it could
        report a change as committed that is in no real version. The boundary read is a
        conditional GET, usually a bodiless 304."""
        existing = err.existing if isinstance(err, VersionExists) else None
        if (
            existing is not None
            and attempt <= self._build_on_winner
            and current.id + 1 > self.seq.boundary.read()
        ):
            try:
                return self._decode(current.id + 1, existing)
            except CorruptionError:
                pass  # let read_latest report it properly if it is the latest
        return self._read_latest()

    def delete_void(self, ours: V, err: ObjectVersionBehindBoundary) -> bool:
        """The default settlement: our create behind the boundary is void; delete it so nobody
        mistakes it for history (GC collects it otherwise). Always False."""
        try:
            self.seq.store.delete(self.seq.path(ours.id))
        except Exception as e:  # GC will collect it anyway
            log.warning("could not delete void %s: %s", err.path, e)
        return False


# ---- boundary-first collection ----------------------------------------------------------------
def collect_old_versions(
    boundary: BoundaryObject,
    entries: Sequence[SequencedEntry],
    latest: int,
    *,
    min_age_s: float,
    now_s: float,
    delete: Callable[[Sequence[SequencedEntry]], None],
    keep: Collection[int] = frozenset(),
) -> int | None:
    """Collect the listed versions below ``latest`` older than ``min_age_s``: move ``boundary``
    over them first (durably), then ``delete`` those at or behind the durable boundary, except
    the ids in ``keep`` (e.g. manifests a checkpoint pins).

    Returns the durable boundary, or None if no version was old enough (then the boundary is
    neither moved nor read)."""
    old = [e for e in entries if e.id < latest and now_s - e.last_modified.timestamp() >= min_age_s]
    if not old:
        return None
    durable = boundary.advance(max(e.id for e in old))  # below latest: never covers it
    delete([e for e in old if e.id <= durable and e.id not in keep])
    return durable
