"""Overwriting a sharded table: its whole contents replaced in one step that readers see as before
or after, never between (docs/overwrite.md).

An overwrite does not rewrite the shards in place. It builds new databases beside them and swaps
them in through the shard map, with the protocol of a rescale (:mod:`slatedb_core.table.rescale`,
SlateDB RFC 0004's "the client" keeping the ranges): the sources are every shard of the map, the
targets fresh databases already holding the new rows::

    plan     plan_overwrite: commit a map version that advances next_shard_id, reserving one
             fresh id per shard (no split, merge or other overwrite uses them), and lists the
             reservation (ShardMap.reservations: job, ids, time) until its ids are shards or,
             cancelled, destroyed (docs/overwrite.md, "Leftovers"). The plan's
             shard_map holds the TARGET shards: the map's split points, the reserved ids, the
             databases shard_db_name(id) under the table; IngestPlan.replaces is the id of the
             reserving map. stage_ssts routes and names the staged SSTs by it unchanged.
             Every argument is checked before this commit (overwrite_table: check_rows), so
             bad input leaves the store as it was (docs/overwrite.md, "The API").
    stage    Spark tasks (or overwrite_table in-process) stage SSTs of the new rows
             (slatedb_core.table.ingest.stage_ssts).
    1 build  commit_overwrite: each target database is created with its key range (if absent)
             and its staged SSTs ingested in ONE manifest update (Db.ingest_ssts), with the
             plan's txn recorded; a target whose manifest (as of our fence) already holds data
             or records was built by an earlier attempt and is left as it is.
    2 txn    with a txn: if a current shard records that version of its app or a later one, the
             overwrite is a no-op: the targets are destroyed, every shard reported SKIPPED.
    3 seal   create-if-absent on the map: a pending op of kind "replace" naming every shard as
             a source, the targets, the txn and the value encoding. If the map changed shape
             since planning (a split, merge or overwrite committed: a shard id at or above the
             reserved ones, or other split points), or a rescale holds a shard, the targets are
             destroyed and ShardMapConflict raised: nothing changed.
    4 fence  every source, as a rescale fences (rescale step 2): a writer opened before the seal
             is fenced (its next write raises Fenced); one opened after it sees the seal and is
             refused. Writes acknowledged before the fence are in the sources: the overwrite
             replaces them; none can follow. With a txn, the decision of 2 is taken again
             against the fenced sources (it is final now): already applied -> the op is
             dropped (unsealing the sources) and the targets destroyed. Otherwise each target
             gets the exactly-once records every source of its range applied (rescale step 3).
    5 swap   one map commit, only while the op is pending: the targets replace the sources,
             the op is dropped, the value encoding is the overwrite's (None: plain values), the
             sources are listed retired, the overwrite's outcome (job id, first target id,
             committed) joins the map's record of the last OVERWRITES_KEPT outcomes, and its
             reservation is dropped.
    6 retire soft-destroy the sources (slatedb_core.lifecycle.destroy); the GC deletes them once
             db_delete_grace has passed and no checkpoint holds them.

Readers: a :class:`~slatedb_core.table.snapshot.TableSnapshot` is one checkpoint per shard of one
map version (taken again if the map changes while it is taken), so one taken before 5 reads the
old contents to the end of its life (its checkpoints keep the retired databases' SSTs, SlateDB
RFC 0004 "Creating a Checkpoint"), and one taken after 5 only the new.

Crashes and retries: steps 4-6 are the pending op's, which ``Table.resume()``
(:func:`slatedb_core.table.rescale.resume`) finishes from the map alone, as it finishes a split.
A retried :func:`commit_overwrite` of the same plan finds where the first attempt stopped, from
the latest map alone: its outcome recorded, or its targets in the map (committed: it reports
that and resumes nothing), its op pending (it resumes it), or neither (it builds again, which
skips the targets already built). A map that no longer records an outcome the retry needs (more
than OVERWRITES_KEPT later ones) makes it raise OverwriteTooOld. :func:`abort_overwrite`, and
an attempt giving up on targets it built, undo an overwrite that did not commit: first a map
commit recording it cancelled (an abort drops its pending op in it), only then the targets are
destroyed; a seal refuses an overwrite with an outcome and a swap needs its op pending, so no
run swaps in a target destroyed after it checked it live. The record marks the overwrite's
reservation cancelled; the destroys end with a map commit dropping it, so targets a crash left
in between are destroyed by ``Table.resume()`` or the table GC, which also cancels (then
destroys) an overwrite reserved longer ago than its ingest retention and never sealed: a driver
that died before the seal (docs/overwrite.md, "Leftovers").
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from slatedb_core.errors import (
    DatabaseDestroyed,
    InvalidArgument,
    ManifestVersionExists,
    OverwriteTooOld,
    ShardMapConflict,
)
from slatedb_core.keys import KeyRange
from slatedb_core.layout import ingest_overwrite_record, join, shard_db_name
from slatedb_core.lsm.arrow_rows import arrow_entries
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import DbOptions, check_instance, check_optional
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path
from slatedb_core.table.ingest import (
    SEQ_GAP,
    SKIPPED,
    WRITTEN,
    AppVersion,
    IngestPlan,
    ShardIngestStats,
    attempt_dir,
    check_job_id,
    delete_staging,
    stage_ssts,
)
from slatedb_core.table.ingest_seqs import usable_seqs
from slatedb_core.table.options import TableOptions
from slatedb_core.table.overwrite_stats import built_earlier, shard_stats, stats_all
from slatedb_core.table.rescale import (
    RescaleContext,
    destroy_cancelled_targets,
    discard_database,
    resume,
)
from slatedb_core.table.shardmap import (
    CANCELLED,
    COMMITTED,
    OVERWRITES_KEPT,
    OverwriteOutcome,
    PendingOp,
    Reservation,
    Shard,
    ShardMap,
    ShardMapStore,
    ValueEncoding,
    with_overwrite_outcome,
)
from slatedb_core.table.staged import TTL_COLUMN
from slatedb_core.table.writers import act_as_writer
from slatedb_core.writer.db import Db
from slatedb_core.writer.ttl import NoExpiry, Ttl, check_ttl, timestamp_columns

log = logging.getLogger(__name__)

__all__ = [
    "abort_overwrite",
    "check_rows",
    "commit_overwrite",
    "overwrite_table",
    "plan_overwrite",
]

_COMMITTED, _CANCELLED, _PENDING, _FRESH = COMMITTED, CANCELLED, "pending", "fresh"
_CONCURRENT = "committed by a concurrent attempt"


# ---- planning --------------------------------------------------------------------------------
def plan_overwrite(
    table_path: str,
    store: ObjectStore,
    job_id: str | None = None,
    *,
    txn: AppVersion | None = None,
) -> IngestPlan:
    """The plan of a job replacing the contents of ``table_path``: commits a shard-map version
    reserving one fresh shard id per shard (module doc, "plan"). ShardMapConflict if a split,
    merge or overwrite holds the table now (finish it, or ``Table.resume()`` a crashed one)."""
    validate_relative_path(table_path, what="table path")
    store = check_store(store)
    check_optional("txn", txn, AppVersion)
    job = uuid.uuid4().hex if job_id is None else check_job_id(job_id)  # before the map commit
    maps = ShardMapStore(store, table_path)

    def reserve(m: ShardMap) -> ShardMap:
        if m.pending:
            op = m.pending[0]
            raise ShardMapConflict(
                f"table {table_path!r}: a {op.kind} ({op.op_id}) holds shards {list(op.sources)}; "
                "wait for it, or Table.resume() it if its run died, then overwrite"
            )
        first = m.next_shard_id
        held = Reservation(job, first, len(m.shards), time.time())
        return dataclasses.replace(
            m,
            created_at=time.time(),
            next_shard_id=first + len(m.shards),
            reservations=(*m.reservations, held),
        )

    reserved = maps.update(reserve)
    first = reserved.next_shard_id - len(reserved.shards)
    targets = tuple(
        Shard(
            s.index, s.key_range, join(table_path, shard_db_name(first + s.index)), first + s.index
        )
        for s in reserved.shards
    )
    target_map = ShardMap(reserved.id, targets, time.time(), reserved.next_shard_id)
    # the targets are fresh databases: every staged seq from SEQ_GAP up is above their writes
    return IngestPlan(table_path, job, target_map, SEQ_GAP, txn, replaces=reserved.id)


# ---- the commit ------------------------------------------------------------------------------
def commit_overwrite(
    store: ObjectStore,
    plan: IngestPlan,
    run_id: str,
    staged: Mapping[int, Sequence[tuple[str, int]]],
    *,
    value_encoding: ValueEncoding | None = None,
    options: DbOptions | None = None,
) -> list[ShardIngestStats]:
    """Replace the table's contents by the staged SSTs ``staged`` (target shard index -> (staged
    SST path, staged seq), oldest first), steps 1-6 of the module doc; one statistics row per
    target shard, WRITTEN, or SKIPPED when the plan's txn is already applied. ``value_encoding``:
    how the new values hold columns (None: plain values). Idempotent: a retry after a failure
    (or after success) finishes the same overwrite, or reports it committed, from the latest
    map alone. Raises ShardMapConflict, the table's contents unchanged and the targets destroyed
    (the overwrite recorded cancelled first), if the map changed shape since planning, or if
    the overwrite was aborted or cancelled; OverwriteTooOld, changing nothing, if the map no
    longer records whether it committed (docs/overwrite.md, "Retries")."""
    store = check_store(store)
    plan = _check_plan(plan)
    if not isinstance(run_id, str) or not run_id:
        raise InvalidArgument(f"run_id must be a non-empty str, got {run_id!r}")
    check_optional("value_encoding", value_encoding, ValueEncoding)
    opts = dataclasses.replace(
        check_optional("options", options, DbOptions) or DbOptions(), compactor=None
    )
    sources = _check_staged(plan, staged)
    ctx = _context(store, plan, opts)
    latest = ctx.maps.read_latest()
    where = _where_now(store, latest, plan)
    if where != _FRESH:
        return _finish(ctx, plan, latest, where, None, "committed by an earlier attempt")
    started = time.monotonic()
    applied = _already_applied(store, latest, plan.txn)
    if applied is not None:
        where = _discard_targets(store, plan)
        if where not in (_FRESH, _CANCELLED):
            return _finish(ctx, plan, ctx.maps.read_latest(), where, None, _CONCURRENT)
        return stats_all(plan, SKIPPED, applied, started)
    problem = _shape_problem(latest, plan)
    if problem is not None:
        where = _discard_targets(store, plan)
        if where not in (_FRESH, _CANCELLED):
            return _finish(ctx, plan, ctx.maps.read_latest(), where, None, _CONCURRENT)
        raise ShardMapConflict(problem)
    with ThreadPoolExecutor(max_workers=min(16, len(plan.shards))) as pool:
        built = list(
            pool.map(
                lambda t: _build(
                    store, plan, t, sources[t.index], opts, started, ctx.options.fence_attempts
                ),
                plan.shards,
            )
        )
    op = PendingOp(
        uuid.uuid4(),
        "replace",
        tuple(s.shard_id for s in latest.shards),
        tuple((t.shard_id, t.key_range) for t in plan.shards),
        time.time(),
        plan.txn,
        value_encoding,
        plan.job_id,
    )

    def seal(cur: ShardMap) -> ShardMap | None:
        if _where_now(store, cur, plan) != _FRESH:
            return None  # sealed or committed by a concurrent attempt, or cancelled (aborted)
        why = _shape_problem(cur, plan)
        if why is not None:
            raise ShardMapConflict(why)
        sealed = dataclasses.replace(op, sources=tuple(s.shard_id for s in cur.shards))
        return dataclasses.replace(cur, created_at=time.time(), pending=(sealed,))

    try:
        latest = ctx.maps.update(seal, base=latest)
    except ShardMapConflict:
        where = _discard_targets(store, plan)
        if where not in (_FRESH, _CANCELLED):
            return _finish(ctx, plan, ctx.maps.read_latest(), where, None, _CONCURRENT)
        raise
    return _finish(ctx, plan, latest, _where_now(store, latest, plan), built, "")


def abort_overwrite(store: ObjectStore, plan: IngestPlan) -> None:
    """Undo the overwrite of ``plan`` unless it committed: record it cancelled in the shard map
    (dropping its pending op if it sealed the table: the shards keep their contents and take
    writes again), then destroy whatever targets exist. Safe when none exist (then nothing is
    recorded: nothing was built), and when called again. Once recorded, no attempt of the plan
    seals or swaps it (docs/overwrite.md, "Retries"). An overwrite that committed already is
    left alone (logged): its new contents are the table's. OverwriteTooOld if the map no longer
    tells whether it committed."""
    store = check_store(store)
    plan = _check_plan(plan)
    where = _where_now(store, ShardMapStore(store, plan.table_path).read_latest(), plan)
    if where == _COMMITTED or _discard_targets(store, plan, abort=True) == _COMMITTED:
        log.warning(
            "table %r: overwrite job %s committed before its abort; kept",
            plan.table_path,
            plan.job_id,
        )


def overwrite_table(
    table_path: str,
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    *,
    value_encoding: ValueEncoding | None = None,
    txn: AppVersion | None = None,
    options: DbOptions | None = None,
    ttl: Ttl = None,
) -> list[ShardIngestStats]:
    """Plan, stage and commit an overwrite in this process (for tests, the CLI and small
    inputs): the table then holds exactly the rows of ``batches`` (``key`` binary, ``value``
    binary; a null value deletes, i.e. the key is absent), sorted once in memory. TTLs (SlateDB
    RFC 0003) as a table ingest stages them: a ``ttl`` column (ms; null: ``ttl``), else ``ttl``,
    else ``options.default_ttl`` (:func:`~slatedb_core.table.ingest.stage_ssts`). On a failure
    the overwrite is aborted (:func:`abort_overwrite`) before the error is raised, unless it
    committed; a process that dies after the seal leaves it for ``Table.resume()``."""
    options = check_optional("options", options, DbOptions)
    check_optional("value_encoding", value_encoding, ValueEncoding)
    checked = check_ttl("ttl", ttl)
    rows = check_rows(batches, options or DbOptions(), checked)
    plan = plan_overwrite(table_path, store, txn=txn)
    run_id = uuid.uuid4().hex
    staged: dict[int, list[tuple[str, int]]] = {}
    try:
        directory = attempt_dir(plan, run_id, 0, 0)
        for sst in stage_ssts(
            store, plan, directory, 0, rows, options, partition=0, ttl_ms=checked
        ):
            staged.setdefault(sst.shard.index, []).append((sst.path, sst.seq))
        return commit_overwrite(
            store, plan, run_id, staged, value_encoding=value_encoding, options=options
        )
    except BaseException:
        abort_overwrite(store, plan)
        raise
    finally:
        delete_staging(store, table_path, plan.job_id, run_id)


def check_rows(
    batches: Iterable[pa.RecordBatch],
    options: DbOptions,
    ttl: int | NoExpiry | None = None,
) -> list[pa.RecordBatch]:
    """The rows of an overwrite, checked as staging checks them (``key`` and ``value`` binary
    columns, keys non-null and 1..``max_key_bytes``, values up to ``max_value_bytes``, a
    ``ttl`` column's TTLs; empty batches too) BEFORE :func:`plan_overwrite` commits its map
    version, so that refused rows leave the store unchanged (issue 37, hole 6).
    InvalidArgument says what is wrong."""
    rows = list(batches)
    for b in rows:
        check_instance("batches", b, pa.RecordBatch)
        entries = arrow_entries(b, "key", "value", options)
        if TTL_COLUMN in b.schema.names:
            timestamp_columns(b, entries.column(2), TTL_COLUMN, ttl, options.default_ttl, 0)
    return rows


# ---- the steps -------------------------------------------------------------------------------
def _build(
    store: ObjectStore,
    plan: IngestPlan,
    target: Shard,
    sources: Sequence[tuple[str, int]],
    options: DbOptions,
    started: float,
    attempts: int,
) -> ShardIngestStats:
    """Step 1 for one target: create its database (if absent) and ingest its staged SSTs, unless
    an earlier attempt did (its manifest, read as of our fence, holds data or records). A
    concurrent attempt of the same commit (a driver retrying while the first still runs) fences
    us on the target before it ingests the same SSTs: we wait a little and look again, up to
    ``attempts`` times (``TableOptions.fence_attempts``), so that two attempts racing on the
    targets do not both fail before either sealed.

    The writer is opened only on top of the manifest checked unbuilt, checked before the map
    (``act_as_writer``'s ``only_if``): a stale attempt that saw the overwrite fresh never
    fences the writer a user opened on the target once a concurrent attempt swapped it in
    (issue 37, 7c): that writer's open, after the swap and so after our check, fails ours."""
    _create_target(store, target)
    maps = ShardMapStore(store, plan.table_path)

    def unbuilt(stored: StoredManifest) -> bool:
        # Built already (by an earlier or a concurrent attempt: a fresh target's data only comes
        # from this ingest), or sealed by a concurrent attempt (which built every target first):
        # leave it alone.
        return (
            not _holds_data(stored.manifest)
            and _where_now(store, maps.read_latest(), plan) == _FRESH
        )

    built = act_as_writer(
        store,
        target.db_path,
        options,
        attempts,
        f"overwrite job {plan.job_id}: building",
        functools.partial(_ingest, store, plan, target, sources, started),
        only_if=unbuilt,
    )
    if built is not None:
        return built
    stored = ManifestStore(store, target.db_path).read_latest()
    return built_earlier(store, target, sources, started, stored.manifest.writer_epoch, stored.id)


def _holds_data(m: Manifest) -> bool:
    return bool(m.l0 or m.compacted or m.transactions)


def _ingest(
    store: ObjectStore,
    plan: IngestPlan,
    target: Shard,
    sources: Sequence[tuple[str, int]],
    started: float,
    db: Db,
) -> ShardIngestStats:
    """Step 1 with the target's writer ``db``, which fenced any earlier attempt on it."""
    epoch = db.writer_epoch
    stored = db.manifest
    # Ingest only into a target that holds nothing and that, now that we fenced it, no attempt
    # has sealed: once sealed (or swapped in) it was built, and its manifest may be empty
    # because its own writers deleted everything since, which an ingest would undo. An attempt
    # sealing after our fence built this target before it (we see its data or txn; an empty
    # target gains nothing here either) or after it (fencing our ingest).
    if (
        _holds_data(stored.manifest)
        or _where_now(store, ShardMapStore(store, plan.table_path).read_latest(), plan) != _FRESH
    ):
        return built_earlier(store, target, sources, started, epoch, stored.id)
    result = db.ingest_ssts(
        [p for p, _ in sources], seqs=usable_seqs([s for _, s in sources]), txn=plan.txn
    )
    # a Fenced close after this commit is act_as_writer's to swallow: it stands
    return shard_stats(
        target,
        WRITTEN,
        "",
        started,
        rows=result.rows,
        ssts=result.ssts,
        bytes=result.bytes_written,
        manifest_id=result.manifest_id,
        epoch=epoch,
    )


def _finish(
    ctx: RescaleContext,
    plan: IngestPlan,
    latest: ShardMap,
    where: str,
    built: list[ShardIngestStats] | None,
    message: str,
) -> list[ShardIngestStats]:
    """Steps 4-6 (the pending op's, run by rescale.resume) and the statistics: WRITTEN if the
    overwrite committed, SKIPPED if it was cancelled because its txn was applied, else
    ShardMapConflict (cancelled: aborted, or its targets lost). ``where``: how far it got in
    ``latest``.

    Only a pending overwrite is resumed. One found committed resumes nothing: its op is done,
    and the map's pending ops are others' (a later split or overwrite, whose sources may be
    this one's targets); running them from a stale attempt would fence writers of shards it no
    longer owns (issue 37, 7c). Retired sources it left undestroyed are soft-destroyed by the
    next ``Table.resume()``."""
    started = time.monotonic()
    m = latest
    if where == _PENDING:
        m = resume(dataclasses.replace(ctx, shard_map=latest), latest)
        where = _where_now(ctx.store, m, plan)
    if where == _CANCELLED:  # a crash may have left targets between the record and the destroy
        _destroy_targets(ctx.store, plan)
    if where != _COMMITTED:
        applied = _already_applied(ctx.store, m, plan.txn)
        if applied is None:  # cancelled for another reason: its targets were aborted
            raise ShardMapConflict(
                f"table {plan.table_path!r}: overwrite job {plan.job_id} was cancelled (its "
                "targets were aborted or lost before the swap); the table keeps its contents"
            )
        return stats_all(plan, SKIPPED, applied, started)
    if built is not None:
        return built
    return [shard_stats(t, WRITTEN, message, started) for t in plan.shards]


def _create_target(store: ObjectStore, target: Shard) -> None:
    """The first manifest of a target database, carrying its key range (as ``Table.create``
    creates a shard's); an existing one with that range is accepted."""
    ms = ManifestStore(store, target.db_path)
    rng = target.key_range
    try:
        ms.create_initial(Manifest(key_range=None if rng == KeyRange() else rng.to_bytes_range()))
    except ManifestVersionExists:
        have = ms.read_latest().manifest  # DatabaseDestroyed: an abort destroyed it
        if KeyRange.of(have.key_range) != rng:
            raise InvalidArgument(
                f"database {target.db_path!r} exists with another key range: not this "
                "overwrite's target"
            ) from None


def _discard_targets(store: ObjectStore, plan: IngestPlan, *, abort: bool = False) -> str:
    """Destroy the targets of an overwrite that did not commit, after recording it cancelled in
    the shard map: a map commit that requires it still unsealed (for an ``abort``, it drops its
    pending op instead, in the same commit). Returns where the overwrite stands then: cancelled
    (its targets destroyed), committed or pending (a concurrent attempt sealed or swapped it:
    its targets are left alone, they may be live shards with writers now), or fresh when no
    target exists and the overwrite is not sealed (nothing to destroy, nothing recorded: an
    attempt may still build and commit it, as if it had started after this call).

    Recording first closes the window in which a run of the overwrite has checked its targets
    live (``rescale._targets_live``) and is about to swap them in: a swap requires its op still
    pending, and a seal an overwrite without an outcome, both checked atomically by the
    versioned map update, so no run swaps in a target destroyed after its check (issue 37,
    review of cc661bd, hole D). The targets are read first: with none built there is nothing
    to destroy and nothing to record."""
    maps = ShardMapStore(store, plan.table_path)
    if not any(_target_exists(store, t.db_path) for t in plan.shards) and (
        not abort or _where_now(store, maps.read_latest(), plan) != _PENDING
    ):
        return _FRESH
    ids = {t.shard_id for t in plan.shards}

    def cancel(cur: ShardMap) -> ShardMap | None:
        where = _where_now(store, cur, plan)
        if where == _PENDING and abort:
            keep = tuple(p for p in cur.pending if {i for i, _ in p.targets} != ids)
            cur = dataclasses.replace(cur, created_at=time.time(), pending=keep)
        elif where != _FRESH:
            return None  # committed, or cancelled already; or sealed by a concurrent attempt
        first = min(ids)
        return with_overwrite_outcome(
            dataclasses.replace(cur, created_at=time.time()),
            OverwriteOutcome(plan.job_id, first, _CANCELLED),
        )

    where = _where_now(store, maps.update(cancel), plan)
    if where == _CANCELLED:
        _destroy_targets(store, plan)
    return where


def _destroy_targets(store: ObjectStore, plan: IngestPlan) -> None:
    """Destroy the targets of ``plan``'s overwrite, recorded cancelled, and drop its
    reservation from the map (:func:`~slatedb_core.table.rescale.destroy_cancelled_targets`);
    with no reservation (cleaned up already, or planned before maps kept reservations) destroy
    whatever of them exists."""
    maps = ShardMapStore(store, plan.table_path)
    first = min(t.shard_id for t in plan.shards)
    latest = maps.read_latest()
    if latest.reservation(first) is not None:
        destroy_cancelled_targets(store, maps, latest, only=first)
        return
    for t in plan.shards:
        discard_database(store, t.db_path)


def _target_exists(store: ObjectStore, db_path: str) -> bool:
    """A target database is there and not destroyed."""
    try:
        stored = ManifestStore(store, db_path).try_read_latest()
    except DatabaseDestroyed:
        return False
    return stored is not None and stored.manifest.destroyed_at_s is None


def _already_applied(store: ObjectStore, m: ShardMap, txn: AppVersion | None) -> str | None:
    """Step 2: why the txn is already applied (a shard of ``m`` records it or a later version
    of its app), or None."""
    if txn is None:
        return None
    for s in m.shards:
        try:
            stored = ManifestStore(store, s.db_path).try_read_latest()
        except DatabaseDestroyed:  # a rescale replaced it meanwhile: step 3 refuses the map
            continue
        have = None if stored is None else stored.manifest.app_version(txn.app_id)
        if have is not None and have >= txn.version:
            return (
                f"app {txn.app_id!r} batch {txn.version} is already applied: shard "
                f"{s.shard_id} records version {have}"
            )
    return None


def _where(m: ShardMap, plan: IngestPlan) -> str:
    """How far the overwrite of ``plan`` got in map ``m``: committed (its targets in the map,
    retired since by a later rescale or overwrite, or its outcome recorded so), cancelled (its
    outcome recorded so), its replace pending, or neither (fresh)."""
    ids = {t.shard_id for t in plan.shards}
    paths = {t.db_path for t in plan.shards}
    if any(s.shard_id in ids for s in m.shards) or paths & set(m.retired):
        return _COMMITTED
    recorded = m.overwrite_outcome(min(ids))
    if recorded is not None:
        return recorded.outcome
    if any(op.kind == "replace" and {i for i, _ in op.targets} == ids for op in m.pending):
        return _PENDING
    return _FRESH


def _where_now(store: ObjectStore, m: ShardMap, plan: IngestPlan) -> str:
    """:func:`_where`, from ``m`` alone whenever it can tell. It cannot when the overwrite is
    neither named nor recorded by ``m``, its outcome may have been pushed out of the map's
    bounded record (its first target id is below ``overwrites_forgotten_below``), and either a
    shard id at or above its targets' says something committed after it was planned, or the
    record is full, so that a cancel of it may have been pushed out (without either, the bound
    is an old map's and it committed nothing: its targets would be in the map, or below shards
    it put there). Then an
    ``overwrite.done`` record (written by commits before the map recorded outcomes) says
    committed; without one, OverwriteTooOld: neither "committed" nor "plan it again" (which
    would re-apply it over every later write) can be said."""
    where = _where(m, plan)
    first = min(t.shard_id for t in plan.shards)
    if where != _FRESH or first >= m.overwrites_forgotten_below:
        return where
    # Nothing committed since (no shard id at or above ours) says "not committed", not "may
    # commit": an outcome pushed out of a full record may have been a cancel whose target
    # destroys a crash cut short, and sealing those targets would commit an aborted overwrite.
    # A bound from a map written before outcomes were recorded (the record not full) hides no
    # cancel: such maps recorded none.
    if not any(s.shard_id >= first for s in m.shards) and len(m.overwrites) < OVERWRITES_KEPT:
        return where
    if store.exists(ingest_overwrite_record(plan.table_path, plan.job_id)):
        return _COMMITTED
    raise OverwriteTooOld(
        f"table {plan.table_path!r}: shard map {m.id} no longer records whether overwrite job "
        f"{plan.job_id} committed (it keeps the last {OVERWRITES_KEPT} overwrite outcomes, and "
        "its targets are gone from it); nothing was changed. Do not plan it again blindly: "
        "read the table to decide"
    )


def _shape_problem(m: ShardMap, plan: IngestPlan) -> str | None:
    """Why ``plan``'s targets cannot replace the shards of ``m``, or None."""
    first = min(t.shard_id for t in plan.shards)
    if m.pending:
        op = m.pending[0]
        return (
            f"table {plan.table_path!r}: a {op.kind} ({op.op_id}) holds shards "
            f"{list(op.sources)} in shard map {m.id}; the overwrite was not applied"
        )
    if m.split_points != plan.shard_map.split_points or any(s.shard_id >= first for s in m.shards):
        return (
            f"table {plan.table_path!r}: shard map {m.id} is not the one overwrite job "
            f"{plan.job_id} planned on (map {plan.replaces}): a split, merge or overwrite "
            "committed meanwhile; the overwrite was not applied, plan it again"
        )
    return None


# ---- checks and statistics -------------------------------------------------------------------
def _check_plan(plan: IngestPlan) -> IngestPlan:
    check_instance("plan", plan, IngestPlan)
    if plan.replaces is None:
        raise InvalidArgument("plan is not an overwrite plan (plan_overwrite makes one)")
    return plan


def _check_staged(
    plan: IngestPlan, staged: Mapping[int, Sequence[tuple[str, int]]]
) -> list[list[tuple[str, int]]]:
    if not isinstance(staged, Mapping):
        raise InvalidArgument(f"staged must be a mapping of shard index, got {type(staged)}")
    out: list[list[tuple[str, int]]] = [[] for _ in plan.shards]
    for i, ssts in staged.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(out):
            raise InvalidArgument(f"staged: shard index {i!r} out of range 0..{len(out) - 1}")
        for entry in ssts:
            if not (
                isinstance(entry, tuple)
                and len(entry) == 2
                and isinstance(entry[0], str)
                and isinstance(entry[1], int)
                and not isinstance(entry[1], bool)
            ):
                raise InvalidArgument(f"staged: entries are (path, seq), got {entry!r}")
            out[i].append(entry)
    return out


def _context(store: ObjectStore, plan: IngestPlan, options: DbOptions) -> RescaleContext:
    maps = ShardMapStore(store, plan.table_path)
    return RescaleContext(
        plan.table_path, store, TableOptions(writer=options), maps, plan.shard_map
    )
