"""Rescaling a sharded table: split a shard through projected clones, merge two through union
(SlateDB RFC 0004, "Manifest Projection and Union"), without losing an acknowledged write.

The danger is a write that lands in the old shard's database after the clone (or union) took its
snapshot: it is acknowledged, then destroyed with the old database. Fencing the old writer just
before cloning is not enough on its own, because a writer could open the old shard again (it read
the map before the rescale) between the fence and the commit of the new map. So the map is
changed twice, and every writer re-reads the map *after* fencing (``Table.writer``)::

    1  seal      commit map N+1: the source shards stay in place (reads go on) but a pending
                 operation names them and the target shards (new ids). Create-if-absent on the
                 map: of two rescales of the same shards exactly one commits, the loser raises
                 ShardMapConflict having created nothing.
    2  fence     per source: open a Db (bumps the writer epoch, writes a fencing WAL SST,
                 replays every acknowledged write) and flush its memtable to L0, so the manifest
                 holds every acknowledged write and the WAL nothing more (union needs that).
                 A writer opened before 1 is fenced here (its next write raises Fenced); one
                 opened after 1 fences us but sees the seal after opening and leaves without
                 writing: we fence again (``TableOptions.fence_attempts``), also when it fences
                 our writer while that one is still opening (``_as_writer``).
    3  clone     split: two clones of the source projected to [start, at) and [at, end);
                 merge: one union of the two sources with their ranges (checked adjacent);
                 refused (the op dropped, the sources unsealed) if their exactly-once records
                 differ: a batch reached one and not the other, and must be re-run first
                 (merge() compares them before step 1 too, so a pair already differing is
                 refused with nothing sealed or fenced).
                 Resumable (slatedb_core.lifecycle.clone / union), destinations named by the target ids.
    4  commit    map N+2: the targets replace the sources, the op is dropped, the sources are
                 listed as retired.
    5  retire    soft-destroy the sources (the GC deletes them after db_delete_grace, once the
                 targets' final checkpoints on them are released).

A replace (an overwrite of the whole table, :mod:`slatedb_core.table.overwrite`) runs the same
steps with every shard of the map as its sources, except 3: its targets were built before the
seal and hold the new contents already. In its place, once the sources are fenced (their
exactly-once records can no longer change): if the overwrite has a txn and a source records that
version of its app or a later one, the replace is cancelled (the op dropped from the map, which
unseals the sources, then the targets destroyed) and the table keeps its contents; otherwise each
target gets the records that hold for every source overlapping its key range (the lowest version
per app, none for an app one of them lacks: ``combined_range_transactions``, the rule of a merge
too), so that a batch a failed job left on some shards only is still written by its re-run where
it is missing. Step 4 also sets the map's value encoding to the replace's (None: plain values)
and records the overwrite committed in the map (``ShardMap.overwrites``), as a cancel records it
cancelled in the commit that drops the op: a retry of the overwrite job then tells its outcome
from the map alone, whoever ran the op.

A crash after 1 leaves the shards sealed (readable, not writable): re-running the same split, or
``Table.resume()``, runs 2-5 again; each step is idempotent. A crash after 4 leaves the new map
with sources not yet destroyed: any later rescale or ``resume()`` finishes 5. Orphan clones of an
op that never commits cannot exist: targets are only created after the seal that names them.

``split(i, at)`` is idempotent by outcome: if ``at`` is already a boundary of the shard (or of the
shards that replaced it), it only finishes pending retirements and returns the map. ``merge`` is
not (a merged shard can merge again): pass ``expected_map_id`` to apply it only to the map version
the caller decided on.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from slatedb_core.errors import (
    DatabaseDestroyed,
    DatabaseNotFound,
    InvalidArgument,
    InvalidDeletion,
    MergeBlockedByBatch,
    PreconditionFailed,
    ShardMapConflict,
)
from slatedb_core.feed.retention import carry_consumers
from slatedb_core.keys import KeyRange
from slatedb_core.layout import join, shard_db_name
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import delete_database_objects, destroy, is_own_object
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.manifest.model import AppVersion, Manifest, combined_range_transactions
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import DbOptions, check_int
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.options import TableOptions
from slatedb_core.table.shardmap import (
    CANCELLED,
    COMMITTED,
    OverwriteOutcome,
    PendingOp,
    Shard,
    ShardMap,
    ShardMapStore,
    with_overwrite_outcome,
    without_reservations,
)
from slatedb_core.table.snapshot import table_wal_url
from slatedb_core.table.writers import act_as_writer
from slatedb_core.writer.db import Db

log = logging.getLogger(__name__)

__all__ = [
    "RescaleContext",
    "destroy_cancelled_targets",
    "discard_database",
    "merge",
    "resume",
    "split",
]

_NO_L0_LIMIT = 1 << 30
T = TypeVar("T")


@dataclass(frozen=True)
class RescaleContext:
    """What rescaling needs of a table: where it is, its options, its map store, and the map its
    caller read last (which ``shard_index`` arguments index)."""

    path: str
    store: ObjectStore
    options: TableOptions
    maps: ShardMapStore
    shard_map: ShardMap


def split(table: RescaleContext, shard_index: int, at: bytes) -> ShardMap:
    """Split shard ``shard_index`` (of the map ``table`` read last) at ``at``.

    Raises InvalidArgument if ``at`` is not inside the shard, ShardMapConflict if another
    rescale holds or replaced the shard."""
    if not isinstance(at, bytes) or not at:
        raise InvalidArgument(f"split key must be non-empty bytes, got {at!r}")
    shard = _seen(table, shard_index)
    latest = table.maps.read_latest()
    if at in (shard.key_range.start, shard.key_range.end) or _already_split(latest, shard, at):
        return resume(table, latest)
    if not shard.key_range.contains(at):
        raise InvalidArgument(f"split key {at!r} is outside shard {shard_index} {shard.key_range}")
    op = latest.pending_for(shard.shard_id)
    if op is not None and not (op.kind == "split" and op.split_at == at):
        raise _held(shard, op)
    if op is None:
        if latest.by_id(shard.shard_id) is None:
            raise _gone(shard, latest)

        def seal(m: ShardMap) -> ShardMap:
            src = m.by_id(shard.shard_id)
            if src is None:
                raise _gone(shard, m)
            held = m.pending_for(shard.shard_id)
            if held is not None:
                raise _held(shard, held)
            a, b = m.next_shard_id, m.next_shard_id + 1
            rng = src.key_range
            new = PendingOp(
                uuid.uuid4(),
                "split",
                (src.shard_id,),
                ((a, KeyRange(rng.start, at)), (b, KeyRange(at, rng.end))),
                time.time(),
            )
            return _with(m, pending=(*m.pending, new), next_shard_id=b + 1)

        latest = table.maps.update(seal, base=latest)
        op = latest.pending_for(shard.shard_id)
        assert op is not None
    return _run(table, latest, op)


def merge(
    table: RescaleContext, shard_index: int, *, expected_map_id: int | None = None
) -> ShardMap:
    """Merge shard ``shard_index`` with shard ``shard_index + 1`` (of the map ``table`` read
    last) into one database."""
    # merge("0") is InvalidArgument (RELIABILITY.md, review finding 14)
    shard_index = check_int("shard_index", shard_index)
    if expected_map_id is not None:
        expected_map_id = check_int("expected_map_id", expected_map_id, lo=1)
    shards = table.shard_map.shards
    if not 0 <= shard_index < len(shards) - 1:
        raise InvalidArgument(
            f"merge needs shard_index in 0..{len(shards) - 2} (it merges with the next shard), "
            f"got {shard_index}"
        )
    a, b = _seen(table, shard_index), _seen(table, shard_index + 1)
    latest = table.maps.read_latest()
    if expected_map_id is not None and latest.id != expected_map_id:
        raise ShardMapConflict(
            f"table {table.path!r}: shard map is at {latest.id}, not the expected {expected_map_id}"
        )
    op = latest.pending_for(a.shard_id) or latest.pending_for(b.shard_id)
    if op is not None:
        if not (op.kind == "merge" and op.sources == (a.shard_id, b.shard_id)):
            raise _held(a if a.shard_id in op.sources else b, op)
        return _run(table, latest, op)
    _refuse_if_records_differ(table, latest, a, b)

    def seal(m: ShardMap) -> ShardMap:
        sa, sb = m.by_id(a.shard_id), m.by_id(b.shard_id)
        for want, got in ((a, sa), (b, sb)):
            if got is None:
                raise _gone(want, m)
            held = m.pending_for(want.shard_id)
            if held is not None:
                raise _held(want, held)
        assert sa is not None and sb is not None
        if sb.index != sa.index + 1:  # cannot happen while both exist: ranges never move
            raise ShardMapConflict(f"shards {a.shard_id} and {b.shard_id} are not adjacent")
        new = PendingOp(
            uuid.uuid4(),
            "merge",
            (sa.shard_id, sb.shard_id),
            ((m.next_shard_id, KeyRange(sa.key_range.start, sb.key_range.end)),),
            time.time(),
        )
        return _with(m, pending=(*m.pending, new), next_shard_id=m.next_shard_id + 1)

    latest = table.maps.update(seal, base=latest)
    op = latest.pending_for(a.shard_id)
    assert op is not None
    return _run(table, latest, op)


def resume(table: RescaleContext, latest: ShardMap | None = None) -> ShardMap:
    """Finish every pending operation and soft-destroy every retired database that is not yet;
    retired databases the GC has deleted are dropped from the map. Then destroy the targets of
    every overwrite the map records cancelled but not yet cleaned up
    (:func:`destroy_cancelled_targets`: a crash between a cancel's map commit and its destroys
    left them). An overwrite reserved and never sealed is not resume's: its job may still be
    running (the table GC cancels it once older than the ingest retention).

    A pending merge that differing exactly-once records refuse (step 3) is cancelled, its shards
    unsealed; every other op and every retirement is still finished, and only then is
    MergeBlockedByBatch raised (one error, naming each blocked merge): the caller learns of it
    without a second resume being needed for the rest."""
    m = latest if latest is not None else table.maps.read_latest()
    blocked: list[str] = []
    for op in m.pending:
        try:
            m = _run(table, m, op)
        except MergeBlockedByBatch as e:  # _run cancelled it: the shards take writes again
            blocked.append(str(e))
            m = table.maps.read_latest()
    gone = [p for p in m.retired if not _retire(table, p)]
    if gone:

        def prune(cur: ShardMap) -> ShardMap | None:
            keep = tuple(p for p in cur.retired if p not in gone)
            return None if keep == cur.retired else _with(cur, retired=keep)

        m = table.maps.update(prune, base=m)
    m, _ = destroy_cancelled_targets(table.store, table.maps, m)
    if blocked:
        raise MergeBlockedByBatch("; ".join(blocked))
    return m


# ---- the steps -------------------------------------------------------------------------------
def _run(table: RescaleContext, m: ShardMap, op: PendingOp) -> ShardMap:
    """Steps 2-5 of ``op``, which ``m`` holds as pending."""
    sources = [m.by_id(i) for i in op.sources]
    if any(s is None for s in sources):  # pragma: no cover - the map codec refuses such maps
        raise ShardMapConflict(f"pending {op.kind} {op.op_id} names shards not in map {m.id}")
    srcs = [s for s in sources if s is not None]
    targets = [(join(table.path, shard_db_name(tid)), tid, rng) for tid, rng in op.targets]
    log.info(
        "table %r: %s %s of shards %s into %s",
        table.path,
        op.kind,
        op.op_id,
        [s.shard_id for s in srcs],
        [t[1] for t in targets],
    )
    try:
        for s in srcs:
            _fence(table, s)
        if op.kind == "split":
            for path, _, rng in targets:
                create_clone(
                    path,
                    srcs[0].db_path,
                    table.store,
                    projection=rng,
                    parent_wal_url=table_wal_url(table.options),
                )
            _carry_consumers(table, srcs, [path for path, _, _ in targets])
        elif op.kind == "merge":
            ((path, _, _),) = targets
            differ = _records_differ(table, srcs)
            if differ is not None:
                _cancel(table, op, [path])
                raise MergeBlockedByBatch(differ)
            sources_ = [UnionSource(s.db_path, range=s.key_range) for s in srcs]
            create_union(path, sources_, table.store, wal_url=table_wal_url(table.options))
            _carry_consumers(table, srcs, [path])
        elif not _targets_live(table, op, [t[0] for t in targets]) or not _carry_records(
            table, srcs, [(path, rng) for path, _, rng in targets], op
        ):
            return _cancel(table, op, [t[0] for t in targets])
        if op.kind == "replace":
            # an overwrite's targets too: a consumer's hold keeps their build (and the WAL
            # after it) until it read them (slatedb_core.table.changes)
            _carry_consumers(table, srcs, [t[0] for t in targets])
    except _OpGone:
        log.info("table %r: %s %s finished by a concurrent run", table.path, op.kind, op.op_id)
        return table.maps.read_latest()
    except DatabaseDestroyed:
        # While the op is pending only its own commit (step 4, then 5) destroys its sources,
        # and only its cancel its targets: a concurrent run of it (a driver's retried commit,
        # an operator's resume) finished it while we fenced or read them (the GC may have
        # collected the retired sources since). Still pending: someone else destroyed them.
        cur = table.maps.read_latest()
        if any(p.op_id == op.op_id for p in cur.pending):
            raise
        log.info("table %r: %s %s finished by a concurrent run", table.path, op.kind, op.op_id)
        return cur

    def complete(cur: ShardMap) -> ShardMap | None:
        # The swap requires the op still pending, checked atomically by the versioned update: a
        # cancel or an abort drops it (recording the overwrite cancelled) before it destroys the
        # targets, so no run swaps in a target destroyed after its _targets_live check.
        if all(p.op_id != op.op_id for p in cur.pending):
            if all(cur.by_id(tid) is not None for _, tid, _ in targets):
                return None  # a concurrent run of the same op committed it
            raise ShardMapConflict(
                f"{op.kind} {op.op_id} was dropped from shard map {cur.id} before its swap (an "
                "abort or a concurrent run cancelled it); its sources keep their contents"
            )
        pos = [s.index for s in (cur.by_id(i) for i in op.sources) if s is not None]
        lo, hi = min(pos), max(pos) + 1
        new = tuple(Shard(0, rng, path, tid) for path, tid, rng in targets)
        swapped = _with(
            cur,
            shards=(*cur.shards[:lo], *new, *cur.shards[hi:]),
            pending=tuple(p for p in cur.pending if p.op_id != op.op_id),
            retired=(*cur.retired, *(s.db_path for s in srcs if s.db_path not in cur.retired)),
            value_encoding=op.value_encoding if op.kind == "replace" else cur.value_encoding,
        )
        return _outcome(swapped, op, COMMITTED)

    m = table.maps.update(complete)
    for s in srcs:
        _retire(table, s.db_path)
    return m


def _carry_consumers(table: RescaleContext, srcs: list[Shard], targets: list[str]) -> None:
    """Register the sources' change-feed consumers on the targets before the swap, so that
    they follow the targets' ingests from their start (issue 43 adversarial review)."""
    for path in targets:
        carry_consumers(table.store, [s.db_path for s in srcs], path, time.time())


def _carry_records(
    table: RescaleContext, srcs: list[Shard], targets: list[tuple[str, KeyRange]], op: PendingOp
) -> bool:
    """A replace's step 3: False if its txn is already applied (a fenced source records that
    version of the app or a later one); else True, once each target (its database path, its key
    range) holds the exactly-once records of the sources overlapping its range, combined as a
    merge combines them (``combined_range_transactions``: what every one of them applied), on
    top of its own (the replace's txn, recorded when it was built)."""
    held: list[tuple[KeyRange, tuple[AppVersion, ...]]] = []
    for s in srcs:  # fenced: read without a writer, the latest manifest holds every commit
        m = ManifestStore(table.store, s.db_path).read_latest().manifest
        held.append((s.key_range, m.transactions))
    txn = op.txn
    if txn is not None and any(
        r.app_id == txn.app_id and r.version >= txn.version for _, records in held for r in records
    ):
        log.info(
            "table %r: replace %s: app %r batch %s is already applied; cancelled",
            table.path,
            op.op_id,
            txn.app_id,
            txn.version,
        )
        return False
    options = dataclasses.replace(table.options.writer, compactor=None)

    def unswapped(_: StoredManifest) -> bool:
        # Still pending: no map has the target as a shard yet, so no user writer can be on it.
        # Once the op is gone (a concurrent run committed or cancelled it), opening the target
        # could fence the writer of a live shard (issue 37, 7c): stop.
        return any(p.op_id == op.op_id for p in table.maps.read_latest().pending)

    for path, rng in targets:
        carried = combined_range_transactions(
            records for src, records in held if not src.intersect(rng).is_empty()
        )
        # a concurrent run of the same replace may open the target after us
        if (
            carried
            and _as_writer(
                table,
                path,
                options,
                "carrying records into",
                functools.partial(_record, carried),
                only_if=unswapped,
            )
            is None
        ):
            raise _OpGone
    return True


def _records_differ(table: RescaleContext, srcs: list[Shard]) -> str | None:
    """Why a merge of the fenced ``srcs`` is refused, or None: their exactly-once records
    differ, so a batch reached one and not the other (its job failed between the shards'
    commits, or this merge's seal refused one). A merged database records one version per app
    for all its keys (``combined_range_transactions``): recording the batch would lose the rows
    of the range it missed, not recording it would make its re-run write the other range's rows
    a second time, over what was written there since (a deleted key would come back). So the
    batch must be re-run (or a later one of its app committed) before the merge."""
    held = [
        (
            s,
            {
                r.app_id: r.version
                for r in ManifestStore(table.store, s.db_path).read_latest().manifest.transactions
            },
        )
        for s in srcs
    ]
    (a, ra), (b, rb) = held[0], held[-1]
    for app in sorted(ra.keys() | rb.keys()):
        va, vb = ra.get(app), rb.get(app)
        if va != vb:
            return (
                f"table {table.path!r}: merge of shards {a.shard_id} and {b.shard_id} refused: "
                f"app {app!r} is at batch {va} in one and {vb} in the other (a batch that "
                "reached one shard only); the shards keep their contents. Write that batch "
                "again with the same app id and version (or the app's next batch), so that "
                "every shard records it, then merge"
            )
    return None


def _refuse_if_records_differ(table: RescaleContext, latest: ShardMap, a: Shard, b: Shard) -> None:
    """MergeBlockedByBatch, before anything is sealed or fenced, if the latest manifests of the
    two shards (both in ``latest``) already hold differing records: a batch that reached one of
    them only blocks the merge until it is re-run (step 3), and the fenced look would only find
    the same, after fencing both shards' writers and committing two map versions for nothing
    (the rescaling asset tries a blocked pair on every pass). Records only grow, so a pair that
    agrees here may still differ under the fence: step 3 looks again."""
    sa, sb = latest.by_id(a.shard_id), latest.by_id(b.shard_id)
    if sa is None or sb is None:
        return  # the seal says it is gone
    try:
        differ = _records_differ(table, [sa, sb])
    except DatabaseDestroyed:
        return  # replaced meanwhile: the seal refuses the map
    if differ is not None:
        raise MergeBlockedByBatch(differ)


def _record(records: tuple[AppVersion, ...], db: Db) -> bool:
    db.record_transactions(records)
    return True


class _OpGone(Exception):
    """Internal: the pending op a run works on left the map (a concurrent run of it finished or
    cancelled it); ``_run`` returns the latest map."""


def _targets_live(table: RescaleContext, op: PendingOp, targets: list[str]) -> bool:
    """A replace's targets are all there, not destroyed: an abort of the overwrite (which
    destroys them) or a lost database cancels the replace instead of swapping in databases
    that hold nothing (docs/overwrite.md, "Retries")."""
    for path in targets:
        try:
            stored = ManifestStore(table.store, path).try_read_latest()
        except DatabaseDestroyed:
            stored = None
        if stored is None or stored.manifest.destroyed_at_s is not None:
            log.warning(
                "table %r: replace %s: target %r is gone (aborted?); cancelled",
                table.path,
                op.op_id,
                path,
            )
            return False
    return True


def _cancel(table: RescaleContext, op: PendingOp, targets: list[str]) -> ShardMap:
    """Drop the pending ``op`` (its sources are unsealed and keep their contents), recording a
    replace's overwrite cancelled in the same map commit, then destroy its targets. In that
    order: a concurrent run of ``op`` can no longer commit the targets (its step 4 finds the op
    gone) once they are destroyed, and no attempt of the overwrite seals it again (it finds its
    outcome recorded). A crash in between leaves targets no map names as shards, but the map's
    reservation of the overwrite, marked cancelled by the drop, names them:
    ``Table.resume()`` and the table GC destroy them (:func:`destroy_cancelled_targets`), as
    do :func:`slatedb_core.table.overwrite.abort_overwrite` and a retried commit."""

    def drop(cur: ShardMap) -> ShardMap | None:
        if all(p.op_id != op.op_id for p in cur.pending):
            return None
        dropped = _with(cur, pending=tuple(p for p in cur.pending if p.op_id != op.op_id))
        return _outcome(dropped, op, CANCELLED)

    m = table.maps.update(drop)
    if any(m.by_id(tid) is not None for tid, _ in op.targets):  # pragma: no cover - by design
        raise ShardMapConflict(f"replace {op.op_id} was committed while being cancelled")
    first = min(tid for tid, _ in op.targets)
    if op.kind == "replace" and m.reservation(first) is not None:
        m, _ = destroy_cancelled_targets(table.store, table.maps, m, only=first)
    else:  # a merge's target; a replace planned before maps kept reservations
        for path in targets:
            discard_database(table.store, path)
    return m


def destroy_cancelled_targets(
    store: ObjectStore, maps: ShardMapStore, m: ShardMap, *, only: int | None = None
) -> tuple[ShardMap, int]:
    """Destroy the targets of every overwrite that ``m`` (the latest map, or one behind it)
    lists reserved and cancelled (only the one whose first target id is ``only``, if given),
    then drop their reservations in one map commit. Returns the map after it and how many
    target databases were destroyed.

    A cancel is final (no attempt seals or swaps a cancelled overwrite, checked atomically by
    the versioned map update), so this needs no age and may run while stale attempts of the
    overwrite still run: their builds fail on the destroyed targets. A target id that holds no
    database gets the tombstone, so that a stale attempt cannot create it afterwards. A
    reservation stays listed while one of its targets could not be destroyed (the next
    ``Table.resume()`` or table GC tries again)."""
    done: set[int] = set()
    destroyed = 0
    for r in m.reservations:
        if not r.cancelled or (only is not None and r.first_shard_id != only):
            continue
        if any(m.by_id(i) is not None for i in r.shard_ids) or any(
            i in r.shard_ids for op in m.pending for i, _ in op.targets
        ):  # pragma: no cover - a cancelled overwrite's targets are never sealed or swapped in
            log.error(
                "table %r: cancelled overwrite %s names live shards; left alone",
                maps.table_path,
                r.job_id,
            )
            continue
        buried = [_bury(store, join(maps.table_path, shard_db_name(i))) for i in r.shard_ids]
        if None not in buried:
            done.add(r.first_shard_id)
        destroyed += sum(1 for b in buried if b)
    if done:
        log.info(
            "table %r: destroyed %d target(s) of %d cancelled overwrite(s)",
            maps.table_path,
            destroyed,
            len(done),
        )
        m = maps.update(lambda cur: without_reservations(cur, done), base=m)
    return m, destroyed


def _bury(store: ObjectStore, db_path: str) -> bool | None:
    """Hard-destroy the database at ``db_path``, a target of a cancelled overwrite: True if
    there was one, False if there was none (the path gets the tombstone: none can be created
    there any more), None if it could not be destroyed now (left for the next try)."""
    ms = ManifestStore(store, db_path)
    try:
        stored = ms.try_read_latest()
    except DatabaseDestroyed:
        stored = None
    try:
        if stored is None:
            delete_database_objects(ms)  # the tombstone, and any object of a racing create
            return False
        destroy(db_path, store, soft=False)
    except (DatabaseNotFound, DatabaseDestroyed):
        pass
    except InvalidDeletion as e:  # a checkpoint holds it (never ours), or it kept changing
        log.warning("destroying %r, a cancelled overwrite's target: %s; left for later", db_path, e)
        return None
    return True


def _outcome(m: ShardMap, op: PendingOp, outcome: str) -> ShardMap:
    """``m`` recording how a replace's overwrite ended (splits and merges record nothing)."""
    if op.kind != "replace":
        return m
    first = min(tid for tid, _ in op.targets)
    return with_overwrite_outcome(m, OverwriteOutcome(op.job_id or "", first, outcome))


def discard_database(
    store: ObjectStore, db_path: str, *, only_if: Callable[[], bool] | None = None
) -> bool:
    """Hard-destroy ``db_path``, a database no shard map names (the target of an overwrite
    that did not commit); nothing if there is none, or it is destroyed already. False if it
    was left alone because ``only_if`` did not hold.

    ``only_if`` (does no map name the database still?) is asked after the database's manifest
    is read, and the destroy is committed only on top of that manifest (as ``act_as_writer``
    opens): a writer opened on the database after the check, once a map named it, makes the
    destroy look again, and ``only_if`` then says no. A stale attempt of an overwrite thus
    never destroys a target a concurrent attempt swapped in (issue 37, 7c)."""
    ms = ManifestStore(store, db_path)
    for _ in range(_DISCARD_ATTEMPTS):
        try:
            stored = ms.try_read_latest()
        except DatabaseDestroyed:
            stored = None
        if stored is None or stored.manifest.destroyed_at_s is not None:
            return True
        if only_if is not None:
            if not only_if():
                return False
            try:
                ms.update_at(_destroyed_on(stored.id), base=stored)
            except PreconditionFailed:
                continue
        try:
            destroy(db_path, store, soft=False)
        except (DatabaseNotFound, DatabaseDestroyed):
            pass
        return True
    log.warning("discarding %r: its manifest kept changing; left for abort_overwrite", db_path)
    return False


_DISCARD_ATTEMPTS = 5


def _destroyed_on(base_id: int) -> Callable[[Manifest, int], Manifest]:
    """A manifest change marking the database destroyed (``destroy`` deletes it next), only as
    the version after ``base_id``: PreconditionFailed once another version came first."""

    def change(m: Manifest, next_id: int) -> Manifest:
        if next_id != base_id + 1:
            raise PreconditionFailed(f"manifest: the latest is {next_id - 1}, not {base_id}")
        return dataclasses.replace(m, destroyed_at_s=int(time.time()))

    return change


def _fence(table: RescaleContext, shard: Shard) -> None:
    """Step 2: after this, the shard's manifest holds every acknowledged write and no writer
    that opened before the seal can add one."""
    # One flush, no compactor: it must not stall behind l0_max_ssts waiting for a compactor that
    # may not run (the limit is backpressure for steady writers; one SST over it is harmless).
    options = dataclasses.replace(table.options.writer, compactor=None, l0_max_ssts=_NO_L0_LIMIT)
    _as_writer(table, shard.db_path, options, "fencing", Db.flush_memtable)


def _as_writer(
    table: RescaleContext,
    db_path: str,
    options: DbOptions,
    what: str,
    act: Callable[[Db], T],
    *,
    only_if: Callable[[StoredManifest], bool] | None = None,
) -> T | None:
    """Open a writer on ``db_path`` and ``act`` with it, retried while a writer opened after ours
    fences it (:func:`slatedb_core.table.writers.act_as_writer`, ``TableOptions.fence_attempts``
    times): a shard's writer opened after the seal (an ingest the seal refused opens one to read
    its checkpoint), or a concurrent run of the same op. One a concurrent run of the op retired
    raises DatabaseDestroyed, which ``_run`` settles from the map. ``only_if``: see there (a
    target is opened only while no map has swapped it in)."""
    return act_as_writer(
        table.store,
        db_path,
        options,
        table.options.fence_attempts,
        f"table {table.path!r}: {what}",
        act,
        only_if=only_if,
    )


def _retire(table: RescaleContext, db_path: str) -> bool:
    """Step 5; False if the database is gone: never there, or deleted by the GC (which
    ``destroy`` accepts without an error: a deleted path stays destroyed)."""
    try:
        # its fence goes where its WAL is (SlateDB RFC 0009)
        destroy(db_path, table.store, soft=True, wal_url=table_wal_url(table.options))
    except DatabaseNotFound:
        return False
    except DatabaseDestroyed:
        pass
    return not _deleted(table.store, db_path)


def _deleted(store: ObjectStore, db_path: str) -> bool:
    """The GC deleted the database at ``db_path``, all of it: its path holds the tombstone and
    none of its own objects. One whose deletion began (the tombstone is written first) but did
    not finish is not: its retired entry is what makes the next GC pass finish it
    (``delete_database_objects`` deletes the latest manifest last, SlateDB RFC 0004
    "Deleting a Database")."""
    if not ManifestStore(store, db_path).is_tombstone():
        return False
    prefix = db_path.rstrip("/") + "/"
    return not any(is_own_object(db_path, o.path) for o in store.list(prefix))


# ---- helpers -------------------------------------------------------------------------------
def _seen(table: RescaleContext, index: int) -> Shard:
    shards = table.shard_map.shards
    if isinstance(index, bool) or not isinstance(index, int):
        raise InvalidArgument(f"shard index must be an int, got {type(index).__name__}")
    if not 0 <= index < len(shards):
        raise InvalidArgument(f"shard index {index} out of range 0..{len(shards) - 1}")
    return shards[index]


def _already_split(latest: ShardMap, shard: Shard, at: bytes) -> bool:
    """``shard`` was replaced and ``at`` is now a boundary inside its former range."""
    return (
        latest.by_id(shard.shard_id) is None
        and shard.key_range.contains(at)
        and at in latest.split_points
    )


def _gone(shard: Shard, m: ShardMap) -> ShardMapConflict:
    return ShardMapConflict(
        f"shard {shard.shard_id} ({shard.db_path!r}) is no longer in shard map {m.id}: another "
        "split or merge replaced it; re-read the map"
    )


def _held(shard: Shard, op: PendingOp) -> ShardMapConflict:
    return ShardMapConflict(
        f"shard {shard.shard_id} ({shard.db_path!r}) is sealed by {op.kind} {op.op_id}, started "
        f"at {time.ctime(op.started_at)}; wait for it, or Table.resume() it if its run died"
    )


def _with(m: ShardMap, **changes: object) -> ShardMap:
    fields = {
        "id": m.id,
        "shards": m.shards,
        "created_at": time.time(),
        "next_shard_id": m.next_shard_id,
        "pending": m.pending,
        "retired": m.retired,
        "value_encoding": m.value_encoding,
        "overwrites": m.overwrites,
        "overwrites_forgotten_below": m.overwrites_forgotten_below,
        "reservations": m.reservations,
    }
    fields.update(changes)
    return ShardMap(**fields)  # type: ignore[arg-type]
