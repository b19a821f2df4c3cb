"""A change-feed consumer's retention: a named checkpoint that pins what the consumer still
needs, moved forward as it advances and released when it goes (docs/changes.md).

SlateDB RFC 0019 leaves WAL retention to the caller ("the WalReader must stay ahead of the
garbage collector"); PostgreSQL's replication slots are the model here. A registered consumer
holds one checkpoint (SlateDB RFC 0004), named ``changes-consumer:<name>``. The garbage
collector keeps every WAL SST at or after the replay point of each manifest an unexpired
checkpoint pins (:mod:`slatedb_core.gc.wal_ssts`), and that manifest's SSTs; so a checkpoint
whose manifest's ``replay_after_wal_id`` is at or below the consumer's next WAL id keeps every
change the consumer has not read. Each time the consumer resumes from a persisted cursor
(:func:`hold`), the checkpoint moves to the manifest being committed when that manifest's
replay point is at or below the cursor's WAL id (the checkpoint edit leaves the replay point as
it is), deleting the old one in the same update; otherwise the old one stays. While the
bootstrap snapshot is delivered, the checkpoint is the one the snapshot reads and stays. A
consumer with no live checkpoint (new, or back after it lapsed) is registered again, and its
registration record (:mod:`slatedb_core.feed.registrations`) says from which seq on ingests
are marked for it; :func:`release` unregisters it.

Every edit is a pure function of the manifest it is applied to (the manifest store re-applies
it after a lost race; :mod:`slatedb_core.checkpoints`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta

from slatedb_core.checkpoints import check_live, drop_named_change, expire_time_s
from slatedb_core.errors import InvalidArgument, ObjectNotFound
from slatedb_core.feed.cursor import Cursor
from slatedb_core.feed.ingests import consumer_marks_change, extend_marks, pruned_marks_last
from slatedb_core.feed.registrations import (
    Registration,
    delete_registration,
    read_registration,
    write_registration,
)
from slatedb_core.manifest.model import Checkpoint, Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore

CONSUMER_PREFIX = "changes-consumer:"
"""The name of a consumer's checkpoint is this prefix and the consumer's name."""
SNAPSHOT_CHECKPOINT = "changes-snapshot"
"""The name of the checkpoint an unregistered feed's bootstrap snapshot reads."""


def checkpoint_name(consumer: str) -> str:
    """The name of consumer ``consumer``'s checkpoint (InvalidArgument for a bad name)."""
    if not isinstance(consumer, str) or not consumer or len(consumer) > 200:
        raise InvalidArgument("a change-feed consumer's name is a non-empty str of <= 200 chars")
    if not consumer.isprintable():
        raise InvalidArgument(f"a change-feed consumer's name must be printable: {consumer!r}")
    return CONSUMER_PREFIX + consumer


def held_by(m: Manifest, consumer: str, now_s: float) -> list[Checkpoint]:
    """The unexpired checkpoints of ``consumer`` in ``m`` (normally one)."""
    name = checkpoint_name(consumer)
    return [c for c in m.checkpoints if c.name == name and not c.is_expired(now_s)]


def hold_change(
    path: str,
    consumer: str,
    cursor: Cursor | None,
    lifetime: timedelta | None,
    now_s: float,
) -> Callable[[Manifest, int], Manifest | None]:
    """The edit that keeps what ``consumer`` still needs after ``cursor`` (None: the consumer
    bootstraps from a snapshot of the manifest being committed, so the checkpoint moves there):
    see the module docstring. Commits nothing when the checkpoint already pins the latest
    manifest, or must stay where it is and needs no later expiry. A consumer with no live
    checkpoint (new, or back after it lapsed) is registered (again) by it: what its feed may
    then skip is settled by its registration (:mod:`slatedb_core.feed.registrations`)."""
    name = checkpoint_name(consumer)
    expire = expire_time_s(now_s, lifetime)

    def change(m: Manifest, next_id: int) -> Manifest | None:
        # the markers of ingests the consumer delivered go; the others live as long as it
        # (slatedb_core.feed.ingests)
        pruned = m if cursor is None else consumer_marks_change(m, consumer, cursor.seq)
        moved = held(pruned, next_id) or pruned
        mine = [c for c in moved.checkpoints if c.name == name and not c.is_expired(now_s)]
        until = mine[-1].expire_time_s if mine else expire
        out = dataclasses.replace(
            moved, checkpoints=extend_marks(moved.checkpoints, consumer, until)
        )
        return None if out == m else out

    def held(m: Manifest, next_id: int) -> Manifest | None:
        mine = [c for c in m.checkpoints if c.name == name]
        live = [c for c in mine if not c.is_expired(now_s)]
        others = tuple(c for c in m.checkpoints if c.name != name)
        if cursor is not None and cursor.snapshot is not None:
            keep = [c for c in live if c.id == cursor.snapshot.checkpoint]
            return _extended(m, others, mine, keep, expire)
        movable = cursor is None or m.replay_after_wal_id <= cursor.wal_id
        if live and (not movable or (cursor is not None and _pins_current(live, next_id))):
            return _extended(m, others, mine, live, expire)
        check_live(path, m)
        cp = Checkpoint(
            id=uuid.uuid4(),
            manifest_id=next_id,
            create_time_s=int(now_s),
            expire_time_s=expire,
            name=name,
        )
        return dataclasses.replace(m, checkpoints=(*others, cp))

    return change


def _pins_current(live: list[Checkpoint], next_id: int) -> bool:
    """Whether the one live checkpoint already pins the manifest the edit is applied to."""
    return len(live) == 1 and live[0].manifest_id == next_id - 1


def _extended(
    m: Manifest,
    others: tuple[Checkpoint, ...],
    mine: list[Checkpoint],
    keep: list[Checkpoint],
    expire: int | None,
) -> Manifest | None:
    """``m`` with only ``keep`` of the consumer's checkpoints, their expiry moved to ``expire``
    once less than half their lifetime is left; None when that changes nothing."""
    kept = []
    for c in keep:
        if c.expire_time_s is not None and (expire is None or expire > c.expire_time_s):
            lived = c.expire_time_s - c.create_time_s
            if expire is None or expire - c.expire_time_s >= lived / 2:
                c = dataclasses.replace(c, expire_time_s=expire)
        kept.append(c)
    if kept == mine:
        return None
    return dataclasses.replace(m, checkpoints=(*others, *kept))


@dataclasses.dataclass(frozen=True, slots=True)
class Held:
    """What :func:`hold` left: the consumer's checkpoint (None: it holds none, a snapshot
    cursor whose checkpoint is gone) and the seq above which every ingest that committed is
    marked for it (:attr:`Registration.marked_after`)."""

    checkpoint: Checkpoint | None
    marked_after: int


def hold(
    manifests: ManifestStore,
    consumer: str,
    cursor: Cursor | None,
    lifetime: timedelta | None,
    now_s: float,
    *,
    floor: str | None = None,
) -> Held:
    """Apply :func:`hold_change`, and keep the consumer's registration record
    (:mod:`slatedb_core.feed.registrations`) in step: written when the checkpoint is new or
    moved, with ``floor`` (the encoded cursor resumed from; default ``cursor``'s)."""
    store, path = manifests.store, manifests.db_path
    reg = read_registration(store, path, consumer)
    change = hold_change(path, consumer, cursor, lifetime, now_s)
    bases: list[Manifest] = []
    # the clock read as each try of the edit is built: whether the checkpoint was live in the
    # manifest it is built on is judged then, not at ``now_s`` (a consumer stalled since it
    # read ``now_s`` must not vouch for a checkpoint that lapsed meanwhile, when an ingest
    # that committed skipped it: slatedb_core.feed.ingests.mark_ingest)
    seen_s: list[float] = []

    def observed(m: Manifest, next_id: int) -> Manifest | None:
        nonlocal reg
        bases.append(m)  # the last one is what the committed edit (or no edit) was built on
        seen_s.append(max(now_s, time.time()))
        pruned = 0 if cursor is None else pruned_marks_last(m, consumer, cursor.seq)
        if (
            reg is not None
            and pruned > reg.marked_after
            and reg.checkpoint in {c.id for c in held_by(m, consumer, seen_s[-1])}
        ):
            # the edit drops the markers of ingests up to ``pruned``: an older cursor of this
            # consumer (another process under its name, a restored sink) must not take their
            # gaps for failed ingests, so the record says so before they go (a record that
            # does not speak for the live checkpoint already gives way to the L0 seq)
            reg = dataclasses.replace(reg, marked_after=pruned, updated_s=int(now_s))
            write_registration(store, path, reg)
        return change(m, next_id)

    stored = manifests.update_at(observed)
    base = bases[-1] if bases else stored.manifest
    before = {c.id for c in held_by(base, consumer, seen_s[-1] if seen_s else now_s)}
    if before and reg is not None and reg.checkpoint in before:
        marked_after = reg.marked_after
    else:
        # registered by this edit (no live checkpoint before it), or a record that does not
        # speak for the live checkpoint: the manifest's L0 seq, never below the truth
        marked_after = base.last_l0_seq
    live = held_by(stored.manifest, consumer, now_s)
    if not live:
        return Held(None, marked_after)
    cp = live[-1]
    if reg is None or reg.checkpoint != cp.id or reg.marked_after != marked_after:
        if floor is None and cursor is not None:
            floor = cursor.encode()
        write_registration(
            store, path, Registration(consumer, cp.id, marked_after, floor, int(now_s))
        )
    return Held(cp, marked_after)


def release(manifests: ManifestStore, consumer: str) -> None:
    """Unregister ``consumer``: delete its checkpoint and its ingest markers (the GC may
    collect what only they kept), then its registration record."""
    drop = drop_named_change(checkpoint_name(consumer))

    def change(m: Manifest) -> Manifest | None:
        dropped = drop(m)
        base = m if dropped is None else dropped
        out = consumer_marks_change(base, consumer, None)
        return None if out is m else out

    manifests.update(change)
    delete_registration(manifests.store, manifests.db_path, consumer)


def carry_consumers(store: ObjectStore, sources: Sequence[str], target: str, now_s: float) -> None:
    """Register on the database ``target`` (a split's clone or a merge's union of ``sources``,
    before any writer can reach it) every consumer with a live checkpoint on a source, expiring
    as there: from then on each ingest into ``target`` is marked for them
    (:func:`~slatedb_core.feed.ingests.mark_ingest`). Registered only when the table's feed
    first reads ``target``, a consumer would take the seq gap of an ingest committed before
    that for a failed ingest's, and skip its rows (docs/changes.md, "Tables"). Idempotent (a
    resumed rescale runs it again): a consumer already registered on ``target`` is left."""
    wanted: dict[str, int | None] = {}
    for src in sources:
        for c in ManifestStore(store, src).read_latest().manifest.checkpoints:
            if c.name is None or not c.name.startswith(CONSUMER_PREFIX) or c.is_expired(now_s):
                continue
            e = wanted.get(c.name, c.expire_time_s)
            wanted[c.name] = (
                None if e is None or c.expire_time_s is None else max(e, c.expire_time_s)
            )
    if not wanted:
        return

    bases: list[Manifest] = []

    def change(m: Manifest, next_id: int) -> Manifest | None:
        bases.append(m)
        have = {c.name for c in m.checkpoints}
        added = tuple(
            Checkpoint(
                id=uuid.uuid5(_CARRY_NS, f"{name}:{target}"),
                manifest_id=next_id,
                create_time_s=int(now_s),
                expire_time_s=expire,
                name=name,
            )
            for name, expire in sorted(wanted.items())
            if name not in have
        )
        return dataclasses.replace(m, checkpoints=(*m.checkpoints, *added)) if added else None

    stored = ManifestStore(store, target).update_at(change)
    if not bases:
        return
    have = {c.name for c in bases[-1].checkpoints}
    for c in stored.manifest.checkpoints:
        if c.name in wanted and c.name not in have and c.name is not None:
            # registered here by this edit: every ingest into ``target`` after it is marked
            reg = Registration(
                c.name[len(CONSUMER_PREFIX) :], c.id, bases[-1].last_l0_seq, None, int(now_s)
            )
            write_registration(store, target, reg)


_CARRY_NS = uuid.UUID("0d6c3a52-8f0e-4a0c-9a3e-5b1f3c7e2d41")


@dataclasses.dataclass(frozen=True)
class ConsumerHold:
    """What a registered consumer's checkpoint holds: the replay point of the manifest it pins
    against the latest one's. ``wal_behind`` WAL SSTs (at most) are kept for it alone that the
    GC would otherwise collect; a consumer whose hold never moves is falling behind."""

    name: str
    checkpoint: Checkpoint
    pinned_replay_after: int | None
    """None when the pinned manifest is gone (its checkpoint expired and was collected)."""
    latest_replay_after: int
    expired: bool

    @property
    def wal_behind(self) -> int | None:
        """How many WAL ids the latest replay point is past the pinned one (None: unknown)."""
        if self.pinned_replay_after is None:
            return None
        return max(0, self.latest_replay_after - self.pinned_replay_after)


def consumer_holds(manifests: ManifestStore, now_s: float) -> list[ConsumerHold]:
    """Every registered consumer of the database and what it holds, by name."""
    latest = manifests.read_latest()
    out = []
    for name, cp in sorted(consumers(latest.manifest).items()):
        try:
            pinned: int | None = manifests.read(cp.manifest_id).manifest.replay_after_wal_id
        except ObjectNotFound:
            pinned = None
        out.append(
            ConsumerHold(
                name,
                cp,
                pinned,
                latest.manifest.replay_after_wal_id,
                cp.is_expired(now_s),
            )
        )
    return out


def consumers(m: Manifest) -> dict[str, Checkpoint]:
    """The registered consumers of ``m`` by name, with their checkpoints (expired included, so
    a consumer that fell behind its lifetime shows)."""
    return {
        c.name[len(CONSUMER_PREFIX) :]: c
        for c in m.checkpoints
        if c.name is not None and c.name.startswith(CONSUMER_PREFIX)
    }


__all__ = [
    "CONSUMER_PREFIX",
    "SNAPSHOT_CHECKPOINT",
    "ConsumerHold",
    "Held",
    "carry_consumers",
    "checkpoint_name",
    "consumer_holds",
    "consumers",
    "held_by",
    "hold",
    "hold_change",
    "release",
]
