"""Distributed compaction: one compaction plan split into key-range subcompactions.

A large compaction is a merge of sorted inputs, so it splits cleanly by key: the entries of
``[k_i, k_{i+1})`` in the output depend only on the entries of ``[k_i, k_{i+1})`` in the sources.
Each subcompaction can run on another machine (a Spark task); only planning and the commit stay
with the one process that holds the compactor epoch::

    driver (holds the epoch)                    anywhere (executor, thread, process)
    ------------------------                    ------------------------------------
    DistributedCompactor(path, store)           bumps compactor_epoch, closes stale records
    plan(n)                                     scheduler plan + split keys from the SST indexes,
                                                record "running" in .compactions
                                       ------>  execute_subcompaction(store, plan, i):
                                                  merge the sources clipped to range i;
                                                  per output SST: announce its id in the record
                                                  (fenced on the epoch), then create it,
                                                  streamed (ObjectStore.create_streamed)
                                       <------  SubcompactionResult(outputs, counts)
    commit(plan, results)                       ONE fenced manifest update (apply_compaction with
                                                every output in key order), record "committed"

Safety comes from the single-process protocol, unchanged:

* a subcompaction announces each output id in ``.compactions`` before writing it, through a
  :class:`CompactionsStore` stamped with the driver's epoch, so the GC leaves it alone while the
  compaction runs, and a subcompaction of a replaced compactor stops with :class:`Fenced` at its
  next announcement;
* only the driver commits, in one manifest update checked against the compactor epoch: if another
  compactor took over meanwhile, :meth:`DistributedCompactor.commit` raises :class:`Fenced`,
  nothing becomes visible, and the successor closes our record as failed, after which the GC
  collects the outputs like those of any failed compaction;
* task retries and speculative copies write outputs under fresh ULIDs; only the outputs in the
  results handed to :meth:`~DistributedCompactor.commit` (one per subcompaction) are committed,
  the others are announced-but-unreferenced garbage of a finished record.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
from ulid import ULID

from slatedb_core.compactor.compactions import (
    CompactionRecord,
    CompactionsState,
    CompactionsStore,
    Status,
    now_ms,
)
from slatedb_core.compactor.executor import (
    READAHEAD_BUDGET,
    CompactionResult,
    apply_compaction,
    compaction_rows,
    plan_retention,
    source_streams,
)
from slatedb_core.compactor.output_ssts import SstParts, write_ssts
from slatedb_core.compactor.scheduler import CompactionPlan, plan_compaction
from slatedb_core.compactor.sources import source_views, view_handle
from slatedb_core.errors import CorruptionError, Fenced, InvalidArgument
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.retention import Retention
from slatedb_core.manifest.model import CompactedSst, Manifest
from slatedb_core.manifest.store import FencedManifest, ManifestStore, StoredManifest
from slatedb_core.options import CompactorOptions
from slatedb_core.sst import SstOptions
from slatedb_core.sst.create import write_new_sst_streamed
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

MAX_SUBCOMPACTIONS = 1024


@dataclass(frozen=True, slots=True)
class DistributedPlan:
    """Everything a subcompaction needs, picklable: it travels to executors as is."""

    db_path: str
    compaction_id: ULID
    compactor_epoch: int
    plan: CompactionPlan
    planned_on: StoredManifest
    """The manifest the plan was made from; sources are read through its SST entries."""
    ranges: tuple[KeyRange, ...]
    """Contiguous, in key order, covering every key: range i is subcompaction i."""
    options: CompactorOptions
    retention: Retention
    """What every subcompaction keeps (:mod:`slatedb_core.lsm.retention`), decided once by the
    driver from ``planned_on``: the same clock, snapshot barrier and merge operator for every
    task, as one SlateDB compaction has."""

    @property
    def subcompactions(self) -> int:
        return len(self.ranges)


@dataclass(frozen=True, slots=True)
class SubcompactionResult:
    index: int
    outputs: tuple[CompactedSst, ...]
    rows_in: int
    rows_out: int
    bytes_out: int
    duration_s: float


# ---- planning -------------------------------------------------------------------------------


def choose_split_keys(
    store: ObjectStore, db_path: str, manifest: Manifest, plan: CompactionPlan, parts: int
) -> list[bytes]:
    """Up to ``parts - 1`` increasing keys that cut the plan's input into about equal bytes.

    Weighs every block of every source SST (first key, byte length, from the SST index: one
    ranged GET per SST, no data blocks), clipped to the view's visible range, and takes the keys
    at the byte quantiles. Blocks are small (64 KiB by default) next to a subcompaction, so the
    cut is as even as the data allows even when every SST spans the whole key space (L0).
    """
    if parts <= 1:
        return []
    weighted: list[tuple[bytes, int]] = []
    for view in source_views(plan):
        h = view_handle(store, db_path, manifest, view)
        reader = h.reader()
        # block index keys and offsets: the SST's own size histogram (block 0's index key is
        # empty in SlateDB's index: its first key stands in)
        first_keys = reader.index_keys[:1] and [reader.first_key or b"", *reader.index_keys[1:]]
        offs = reader.block_offsets  # block_count + 1 boundaries
        for key, start, end in zip(first_keys, offs[:-1], offs[1:], strict=True):
            if h.range.contains(key) or (h.range.start is not None and key < h.range.start):
                weighted.append((max(key, h.range.start or b""), end - start))
    if not weighted:
        return []
    weighted.sort()
    total = sum(w for _, w in weighted)
    keys: list[bytes] = []
    acc = 0
    step = total / parts
    next_cut = step
    for key, w in weighted:
        if acc >= next_cut and (not keys or key > keys[-1]) and key != weighted[0][0]:
            keys.append(key)
            while next_cut <= acc:
                next_cut += step
            if len(keys) == parts - 1:
                break
        acc += w
    return keys


def ranges_from_keys(keys: Sequence[bytes]) -> tuple[KeyRange, ...]:
    bounds: list[bytes | None] = [None, *keys, None]
    return tuple(KeyRange(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1))


# ---- executing one subcompaction ---------------------------------------------------------------


def range_streams(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    plan: CompactionPlan,
    rng: KeyRange,
    budget: int = READAHEAD_BUDGET,
) -> list[Iterable[pa.RecordBatch]]:
    """One stream per source, newest first, clipped to the views' visible ranges and ``rng``,
    the sources sharing the read-ahead ``budget`` (:func:`readahead_per_source`)."""
    return source_streams(store, db_path, manifest, plan, rng=rng, budget=budget)


def _announce(records: CompactionsStore, compaction_id: ULID, sst_id: ULID) -> None:
    """Add ``sst_id`` to the running record, keeping what other subcompactions announced."""

    def add(state: CompactionsState) -> CompactionsState:
        current = state.get(compaction_id)
        if current is None:
            raise InvalidArgument(f"compaction {compaction_id} has no record in .compactions")
        return state.with_record(
            dataclasses.replace(current, outputs=(*current.outputs, sst_id), updated_at_ms=now_ms())
        )

    records.update(add)


def execute_subcompaction(
    store: ObjectStore, plan: DistributedPlan, index: int
) -> SubcompactionResult:
    """Merge the plan's sources within ``plan.ranges[index]`` into output SSTs (not committed).

    Raises :class:`Fenced` as soon as another compactor has taken over (at the first output's
    announcement), before writing anything it could not announce.
    """
    if not 0 <= index < plan.subcompactions:
        raise InvalidArgument(f"subcompaction {index} outside 0..{plan.subcompactions - 1}")
    started = time.monotonic()
    options = plan.options
    sst_options = SstOptions(*options.sst_fields())
    records = CompactionsStore(store, plan.db_path, plan.compactor_epoch)
    rows_in = [0]
    merged = compaction_rows(
        store,
        plan.db_path,
        plan.planned_on.manifest,
        plan.plan,
        plan.retention,
        rows_in,
        plan.ranges[index],
        budget=options.read_budget_bytes,
    )

    def write(parts: SstParts) -> CompactedSst:
        sst_id = ULID()
        _announce(records, plan.compaction_id, sst_id)  # before the object exists
        return write_new_sst_streamed(store, plan.db_path, parts, sst_id)

    outputs, rows_out = write_ssts(merged, options.max_sst_size_bytes, sst_options, write)
    bytes_out = sum(s.info.size_bytes for s in outputs)
    return SubcompactionResult(
        index=index,
        outputs=tuple(outputs),
        rows_in=rows_in[0],
        rows_out=rows_out,
        bytes_out=bytes_out,
        duration_s=time.monotonic() - started,
    )


# ---- the driver ------------------------------------------------------------------------------


class DistributedCompactor:
    """The driver side: holds the compactor epoch, plans, commits. Constructing it takes over
    as THE compactor of ``path`` (fencing any running one), like :class:`Compactor`."""

    def __init__(
        self, path: str, store: ObjectStore, options: CompactorOptions | None = None
    ) -> None:
        self.path = path
        self.store = store
        self.options = options or CompactorOptions()
        self.manifest = FencedManifest.init_compactor(ManifestStore(store, path))
        self.records = CompactionsStore(store, path, self.manifest.epoch)
        self.records.take_over(self.manifest.stored.manifest)

    @property
    def epoch(self) -> int:
        return self.manifest.epoch

    def plan(
        self, subcompactions: int, plan: CompactionPlan | None = None
    ) -> DistributedPlan | None:
        """The scheduler's next compaction (or ``plan``) cut into up to ``subcompactions`` key
        ranges, recorded as running; None when there is nothing to compact. Raises Fenced."""
        if not 1 <= subcompactions <= MAX_SUBCOMPACTIONS:
            raise InvalidArgument(f"subcompactions must be in 1..{MAX_SUBCOMPACTIONS}")
        stored = self.manifest.refresh()
        plan = plan or plan_compaction(stored.manifest, self.options)
        if plan is None:
            return None
        keys = choose_split_keys(self.store, self.path, stored.manifest, plan, subcompactions)
        record = CompactionRecord(
            id=ULID(),
            kind=plan.kind,
            source_view_ids=plan.source_view_ids,
            source_run_ids=plan.source_run_ids,
            destination=plan.destination,
            created_at_ms=now_ms(),
            updated_at_ms=now_ms(),
        )
        self.records.put(record)
        return DistributedPlan(
            db_path=self.path,
            compaction_id=record.id,
            compactor_epoch=self.epoch,
            plan=plan,
            planned_on=stored,
            ranges=ranges_from_keys(keys),
            options=self.options,
            retention=plan_retention(stored.manifest, plan, self.options),
        )

    def commit(
        self, plan: DistributedPlan, results: Sequence[SubcompactionResult]
    ) -> CompactionResult:
        """Commit one result per subcompaction in ONE fenced manifest update.

        Raises Fenced (another compactor took over: nothing visible, the outputs become garbage),
        CompactionSourceChanged (the sources moved: re-plan), or InvalidArgument when ``results``
        do not cover each subcompaction exactly once. Any failure but Fenced marks the record
        failed.
        """
        by_index = {r.index: r for r in results}
        if len(results) != plan.subcompactions or sorted(by_index) != list(
            range(plan.subcompactions)
        ):
            raise InvalidArgument(
                f"need one result per subcompaction 0..{plan.subcompactions - 1}, got "
                f"{sorted(r.index for r in results)}"
            )
        outputs = tuple(s for i in range(plan.subcompactions) for s in by_index[i].outputs)
        _check_sorted(outputs)
        try:
            stored = self.manifest.update_at(
                lambda m, _next: apply_compaction(m, plan.plan, outputs)
            )
        except Fenced:
            raise  # the successor owns .compactions and closes our record
        except Exception as e:
            self._finish(plan, "failed", f"{type(e).__name__}: {e}")
            raise
        self._finish(plan, "committed", None)
        manifest = plan.planned_on.manifest
        sources = {v.sst_id for v in source_views(plan.plan)}
        size_of = {s.id: s.info.estimated_size for s in manifest.ssts}
        return CompactionResult(
            compaction_id=plan.compaction_id,
            plan=plan.plan,
            outputs=outputs,
            manifest_id=stored.id,
            input_ssts=len(sources),
            bytes_in=sum(size_of.get(i, 0) for i in sources),
            rows_in=sum(r.rows_in for r in results),
            bytes_out=sum(s.info.estimated_size for s in outputs),
            rows_out=sum(r.rows_out for r in results),
            duration_s=max((r.duration_s for r in results), default=0.0),
        )

    def abort(self, plan: DistributedPlan, error: str) -> None:
        """Mark a plan that will never be committed as failed, so the GC may collect its outputs
        now instead of after the next compactor's take-over. Best effort."""
        self._finish(plan, "failed", error)

    def _finish(self, plan: DistributedPlan, status: Status, error: str | None) -> None:
        def close(state: CompactionsState) -> CompactionsState:
            current = state.get(plan.compaction_id)
            if current is None:
                return state
            return state.with_record(
                dataclasses.replace(current, status=status, updated_at_ms=now_ms(), error=error)
            )

        try:
            self.records.update(close)
        except Exception:  # the manifest is the truth; a successor closes the record
            log.warning(
                "could not mark compaction %s %s", plan.compaction_id, status, exc_info=True
            )


def _check_sorted(outputs: Sequence[CompactedSst]) -> None:
    """The outputs form one sorted run: non-overlapping, in key order."""
    last: bytes | None = None
    for s in outputs:
        first = s.info.first_key
        if first is None:
            continue
        if last is not None and first <= last:
            raise CorruptionError(
                f"compaction output {s.id}", f"first key {first!r} overlaps the previous SST"
            )
        last = s.info.last_key


__all__ = [
    "DistributedCompactor",
    "DistributedPlan",
    "SubcompactionResult",
    "choose_split_keys",
    "execute_subcompaction",
    "range_streams",
    "ranges_from_keys",
]
