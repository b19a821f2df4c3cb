"""A writer's recovery at open (SlateDB RFC 0001 "Writer Fencing", SlateDB RFC 0004 "Writers"),
step by step; :meth:`~slatedb_core.writer.engine.WriterEngine.recover` runs the steps in this
order and installs the result:

1. :func:`bump_epoch`: create the manifest if absent, then bump the writer epoch together with our
   writer checkpoint;
2. :func:`fence_older_writers`: create the fences (zero-byte WAL objects, SlateDB 0.17's) that make
   every older writer stop, ours or SlateDB's;
3. :func:`replay_wal`: replay the WAL SSTs between the replay point and our fence into a memtable,
   rows above the manifest's ``last_l0_seq`` only (SlateDB 0.17's replay does the same).
"""

from __future__ import annotations

import dataclasses
import logging

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.checkpoints import writer_checkpoint
from slatedb_core.errors import (
    CommitRetriesExhausted,
    ManifestVersionExists,
    ObjectNotFound,
    PreconditionFailed,
)
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.lsm.memtable import Memtable
from slatedb_core.lsm.memtable_fold import ReplayOperator
from slatedb_core.lsm.merge_operator import MergeOperator
from slatedb_core.lsm.row_model import has_merges
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.path_kind import refuse_table
from slatedb_core.wal import WalLog, damaged_holes, fence_wal, first_open_slot, missing_error

log = logging.getLogger(__name__)


def bump_epoch(
    manifests: ManifestStore,
    max_parallel_writes: int,
    if_manifest_id: int | None = None,
    wal: WalLog | None = None,
) -> FencedManifest:
    """Step 1: create the manifest if absent, then bump the writer epoch together with our writer
    checkpoint (SlateDB RFC 0004). The manifest's ``max_parallel_writes`` becomes max(previous
    writer's, ours) until our fence is complete (lowered to ours by our first memtable flush), so
    that a writer opening after us while we fence still covers the previous writer's window.

    ``if_manifest_id``: bump only on top of that manifest version (the bump is committed as the
    next id, create-if-absent), else PreconditionFailed having written nothing: no writer that
    opened after the caller read that version is fenced (the table layer's conditional open,
    :func:`slatedb_core.table.writers.act_as_writer`).

    ``wal``: refuse with ``WalStoreMissing`` before the bump when the database's WAL is not in
    ``wal``'s store (SlateDB RFC 0009: opened without the WAL store it was written with). The
    bump would fence the database's live writer, SlateDB's included, for a writer that cannot
    run; one LIST per open buys that."""
    own = max_parallel_writes
    # where our WAL goes, for openers without the WAL store (Manifest.separate_wal_store)
    separate = wal is not None and wal.where.separate is not None
    for _ in range(_CHECKED_BUMP_ATTEMPTS):
        found = manifests.try_read_latest()
        if if_manifest_id is not None:
            if found is None:
                refuse_table(manifests.store, manifests.db_path)
                manifests.raise_missing()  # a conditional open creates nothing
            if found.id != if_manifest_id:
                raise PreconditionFailed(
                    f"{manifests.db_path}/manifest: the latest is {found.id}, not {if_manifest_id}"
                )
        if found is not None and wal is not None:
            wal.check_before_bump(found.manifest)
        if found is None:
            # a table's root is no place for a database: say so before creating one in it
            refuse_table(manifests.store, manifests.db_path)
            if manifests.is_tombstone():
                # refuse before creating anything a reader could glimpse; a tombstone written
                # after this check still fails the create's boundary check
                manifests.raise_missing()
            try:
                manifests.create_initial(Manifest())
            except ManifestVersionExists:
                pass  # another opener created it first
            if wal is not None:
                continue  # check the manifest created (ours or another opener's) first
        checked = None if found is None else found.id  # the manifest the check saw

        def bump(m: Manifest, next_id: int, checked: int | None = checked) -> Manifest:
            if if_manifest_id is not None and next_id != if_manifest_id + 1:
                raise PreconditionFailed(
                    f"{manifests.db_path}/manifest: the latest is {next_id - 1}, "
                    f"not {if_manifest_id}"
                )
            if wal is not None and (checked is None or next_id != checked + 1):
                # another writer committed since the WAL store check: check its manifest, or
                # an opener without the WAL store would erase Manifest.separate_wal_store and
                # serve the main store's empty wal/ (issue 38 review 2, items 2 and 2b)
                raise _Unchecked
            m = writer_checkpoint(m, next_id, m.writer_epoch)
            # the WAL store's id, created before this bump names it (slatedb_core.wal.location)
            store_id = (
                wal.where.claim_store_id(wal.db_path, m) if wal is not None and separate else None
            )
            return dataclasses.replace(
                m,
                max_parallel_writes=max(m.max_parallel_writes, own),
                separate_wal_store=separate,
                wal_store_id=store_id,
            )

        try:
            return FencedManifest.init_writer(manifests, extra=bump)
        except _Unchecked:
            continue
    # the bump kept meeting manifests newer than the WAL store check
    raise CommitRetriesExhausted(f"{manifests.db_path}/manifest", _CHECKED_BUMP_ATTEMPTS)


_CHECKED_BUMP_ATTEMPTS = 20
"""Reads of the latest manifest, each checked for the WAL store, before an open gives up."""


class _Unchecked(Exception):
    """Internal: the epoch bump met a manifest the WAL store check did not see."""


def fence_older_writers(fm: FencedManifest, manifests: ManifestStore, wal: WalLog) -> int:
    """Step 2: fence older writers (SlateDB RFC 0001) with ``max_parallel_writes`` (of the
    manifest our bump committed) consecutive fences from the first open slot, which fills
    any hole an older writer may still be writing. Returns the id of our last fencing SST; raises
    ``Fenced`` if a newer writer exists."""
    m = fm.stored.manifest
    # one LIST from the replay point: also tells a WAL kept in another store (SlateDB RFC 0009)
    # from an empty one by what the manifest records (WalStoreMissing, before we write a fence
    # where SlateDB never looks); our bump hides who wrote before: bump_epoch checked that
    existing = wal.list_live(m, latest=False)
    start = first_open_slot(existing, m.replay_after_wal_id, m.next_wal_sst_id)
    # A hole outside the last writer's in-flight window is damage, not a write in flight:
    # fencing into it would hide every SST after it from our replay (review finding 7 in
    # RELIABILITY.md). The window is the manifest's max_parallel_writes (max of the last
    # writer's and ours, SlateDB RFC 0001 "Parallel Writes"; see bump_epoch).
    holes = damaged_holes(
        existing,
        m.replay_after_wal_id,
        m.next_wal_sst_id,
        m.max_parallel_writes,
        m.wal_id_last_seen,
    )
    # An opener that bumped before a newer writer and lists the WAL after that writer began
    # writing would otherwise put its fencing SSTs into the holes of the newer writer's
    # in-flight window; re-reading the manifest here makes it stop first. (It also makes an
    # opener that a newer writer fenced report Fenced, not the holes GC may have made since.)
    fm.fence.check(manifests.read_latest().manifest)
    if holes:
        raise missing_error(
            wal,
            holes,
            f"outside the in-flight window of the last writer: max_parallel_writes "
            f"{m.max_parallel_writes}, highest WAL id {existing[-1]}",
        )
    _fill_clone_gap(fm, wal, m, existing)
    fence_id = fence_wal(wal, fm.epoch, start, m.max_parallel_writes)
    # A newer writer that bumped its epoch and fenced while we were between our bump and our
    # listing sits *below* our fence SST, so fence_wal never met it; the manifest still
    # tells. Without this check we would run as a second writer (SlateDB RFC 0001's fence is only
    # sound once no newer epoch exists when our fence lands).
    fm.fence.check(manifests.read_latest().manifest)
    return fence_id


def _fill_clone_gap(fm: FencedManifest, wal: WalLog, m: Manifest, existing: list[int]) -> None:
    """A clone made before ca19948 kept its parent's ``next_wal_sst_id``: the ids between the
    WAL it copied (up to ``wal_id_last_seen``) and that id never existed in it. ``damaged_holes``
    accepts the gap and our replay steps over it, but a reader's unbroken run
    (:func:`~slatedb_core.checkpoints.checked_wal_run`), and so a checkpoint's WAL, stops there:
    every write of ours after it would go unseen until our first L0 flush. No writer ever takes
    those ids (each starts at ``next_wal_sst_id`` or above), so fences there (zero-byte WAL SSTs,
    no rows) only make the run unbroken. Only in a clone (``external_dbs``): in any other
    database a hole below ``next_wal_sst_id`` is damage and is left for readers to stop at."""
    copied_to = max(m.wal_id_last_seen, m.replay_after_wal_id)
    gap = range(copied_to + 1, m.next_wal_sst_id)
    if m.external_dbs and gap and not set(gap) & set(existing):  # the whole gap, as left
        fence_wal(wal, fm.epoch, gap[0], len(gap))


@dataclasses.dataclass(frozen=True, slots=True)
class Replayed:
    memtable: Memtable
    """The rows replayed, above ``last_l0_seq``."""
    in_l0_upto: int
    """The highest WAL id up to which every replayed SST's rows are in the manifest's SSTs
    already (at or below ``last_l0_seq``): the replay point may move there with no flush (our
    fence, when nothing was left to replay). At least ``replay_after_wal_id``; fences alone never
    move it."""


def replay_wal(
    path: str,
    wal: WalLog,
    m: Manifest,
    fence_id: int,
    merge_operator: MergeOperator | None = None,
) -> Replayed:
    """Step 3: replay every WAL SST after ``m.replay_after_wal_id`` up to our fence (listed
    again: older writers may have taken slots while we were fencing). The fence left no holes
    below it; an older writer's SST that landed after a lost one of its window is replayed
    (SlateDB RFC 0001: it may have been acknowledged). An SST missing below the fence (it vanished since
    :func:`fence_older_writers` listed the WAL) raises ``WalSstMissing`` rather than replaying
    later SSTs over older values; a clone's legal gap below ``next_wal_sst_id`` is skipped (see
    :func:`~slatedb_core.wal.writer.damaged_holes`). Fences hold no rows.

    Rows with a seq at or below ``m.last_l0_seq`` are skipped: they are in the manifest's SSTs
    already. A WAL SST after the replay point can hold such rows (SlateDB 0.17 moves
    ``replay_after_wal_id`` only to the last WAL SST a flushed memtable covers whole, while the
    memtable may hold rows of the next one), and its replay skips them too. The writer's next
    flush moves the replay point past the WAL SSTs that held nothing else
    (:attr:`Replayed.in_l0_upto`), even when nothing is left to flush.

    Rows keep their kind and timestamps (issue 38): a WAL SST with a TTL row or a merge operand
    is replayed in ROW_SCHEMA, its operands folded by ``merge_operator`` as they were written
    (:meth:`~slatedb_core.lsm.memtable.Memtable.put_rows`), so our flush writes what SlateDB's
    would. An operand the operator raises on is kept unfolded with its key's other versions
    (:class:`~slatedb_core.lsm.memtable_fold.ReplayOperator`): reads of that key fail, the open
    does not, and no acknowledged row is dropped. One with neither takes the plain path (its
    create_ts, which every WAL row has, is dropped as before, but its newest moves the
    memtable's flush tick once TTL rows are in)."""
    ids = [i for i in wal.list_ids(after=m.replay_after_wal_id) if i < fence_id]
    # with our fence as the top and a window of 1, every hole below the fence is damage
    holes = damaged_holes(
        [*ids, fence_id], m.replay_after_wal_id, m.next_wal_sst_id, 1, m.wal_id_last_seen
    )
    if holes:
        raise missing_error(wal, holes, f"below the fence of {path!r}'s writer at open")
    memtable = Memtable()
    # the operator's failure on replayed operands fails the reads of their keys, never the open
    replay_op = ReplayOperator(merge_operator) if merge_operator is not None else None
    floor = pa.scalar(m.last_l0_seq, pa.uint64())
    in_l0_upto = m.replay_after_wal_id
    for wal_id in ids:
        try:
            entries = wal.decode(
                wal_id, wal.store.get(wal.path(wal_id)).data, timestamps=True
            ).entries
        except ObjectNotFound:
            raise missing_error(wal, [(wal_id, wal_id)], "vanished during replay") from None
        if not entries.num_rows:
            continue
        if m.last_l0_seq:
            entries = entries.filter(pc.greater(entries.column("seq"), floor))
            if not entries.num_rows and memtable.is_empty():
                in_l0_upto = wal_id
        tick = None
        if entries.column("expire_ts").null_count == entries.num_rows and not has_merges(entries):
            # its rows' clock tick still counts for the flush of TTL rows replayed before it
            # (SlateDB's flush expires at its memtable's last tick, RFC 0003)
            tick = pc.max(entries.column("create_ts")).as_py()
            entries = entries.select(ENTRY_SCHEMA.names)
        for batch in entries.to_batches():
            if batch.num_rows:
                memtable.put_rows(batch, replay_op)
        if tick is not None:
            memtable.note_tick(tick)
    if memtable.is_empty() and in_l0_upto > m.replay_after_wal_id:
        in_l0_upto = fence_id  # every row below our fence is in L0: the fences after them too
    return Replayed(memtable, in_l0_upto)
