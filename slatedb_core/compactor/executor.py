"""Running one compaction plan: stream-merge the sources, write the output SSTs, commit once.

Steps, and why in this order::

    record "running" in .compactions      (GC must learn about outputs before they exist)
    merge sources, newest first           (streamed: a few batches per source in memory),
      every version with its timestamps,  keeping what SlateDB's compactor keeps
      (lsm.versions_merge, lsm.retention: TTL expiry at last_l0_clock_tick, the versions
      live snapshots read, merge operands folded; one policy per compaction)
      blocks encoded as rows arrive; every ~max_sst_size_bytes of output (compactor.output_ssts):
        announce the SST id in .compactions, then create compacted/{ulid}.sst, streamed in
        8 MiB parts as they are encoded (ObjectStore.create_streamed)
    ONE fenced manifest update            (apply_compaction, re-applied on conflict)
    record "committed" (or "failed")

The manifest change is a pure function re-applied to whatever the latest manifest is when a
commit conflicts (the writer keeps adding L0 views meanwhile). It refuses, with
:class:`CompactionSourceChanged`, any manifest in which the sources are not exactly as planned:
committing then would drop or duplicate data. The outputs of a refused or failed compaction are
unreferenced and no longer "running", so the GC collects them.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
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
from slatedb_core.compactor.output_ssts import SstParts, write_ssts
from slatedb_core.compactor.scheduler import CompactionPlan, next_run_id
from slatedb_core.compactor.sources import plan_sources, source_views
from slatedb_core.errors import (
    CompactionCancelled,
    CompactionSourceChanged,
    Fenced,
)
from slatedb_core.keys import KeyRange
from slatedb_core.lsm.merge_operator import resolve_merge_operator
from slatedb_core.lsm.retention import Retention, compaction_retention
from slatedb_core.lsm.versions_merge import merge_versions
from slatedb_core.manifest.model import CompactedSst, Manifest, SortedRun, SstView
from slatedb_core.manifest.store import FencedManifest, StoredManifest
from slatedb_core.options import CompactorOptions
from slatedb_core.sst import SstOptions
from slatedb_core.sst.create import write_new_sst_streamed
from slatedb_core.sst.reader import READAHEAD_MAX
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)

# A merge holds about one GET's worth of decoded rows per source (bench/results/memory.txt,
# bench/results/db_ingest_memory.txt): the sources of one compaction share
# CompactorOptions.read_budget_bytes, each between READAHEAD_FLOOR (smaller GETs cost many more
# requests on S3 for little memory) and the reader's READAHEAD_MAX (few sources). A compaction
# reads its views whole, so every GET is of that size: the reader's default ramp from
# READAHEAD_START (for scans that may stop early) would add ~5 GETs per source.
READAHEAD_BUDGET = CompactorOptions().read_budget_bytes
READAHEAD_FLOOR = 1024 * 1024


ALL_KEYS = KeyRange(None, None)


def readahead_per_source(sources: int, budget: int = READAHEAD_BUDGET) -> int:
    """The bytes per GET of each of ``sources`` streams merged at once."""
    return max(READAHEAD_FLOOR, min(READAHEAD_MAX, budget // max(1, sources)))


@dataclass(frozen=True, slots=True)
class CompactionResult:
    compaction_id: ULID
    plan: CompactionPlan
    outputs: tuple[CompactedSst, ...]
    manifest_id: int
    input_ssts: int
    bytes_in: int
    rows_in: int
    bytes_out: int
    rows_out: int
    duration_s: float


# ---- the manifest change ------------------------------------------------------------------------


def _changed(plan: CompactionPlan, why: str) -> CompactionSourceChanged:
    return CompactionSourceChanged(f"{plan.kind} compaction into run {plan.destination}: {why}")


def apply_compaction(
    m: Manifest, plan: CompactionPlan, outputs: Sequence[CompactedSst]
) -> Manifest:
    """``m`` with the plan's sources replaced by a run of ``outputs``; pure, for update_at.

    Raises CompactionSourceChanged when ``m`` does not hold the sources exactly as planned, or
    when tombstones were dropped and an older run has appeared below the output.
    """
    if any(m.sst(s.id) is not None for s in outputs):
        # an earlier attempt of this compaction landed: a commit GC passed before its boundary
        # check is re-applied when the evidence is gone (ManifestStore), and must not fail
        return m
    destination = max(plan.destination, next_run_id(m))
    views = tuple(SstView(view_id=s.id, sst_id=s.id) for s in outputs)
    new_run = (SortedRun(destination, views),) if views else ()
    l0 = m.l0
    if plan.kind == "l0":
        k = len(plan.source_views)
        if k == 0 or len(l0) < k or l0[len(l0) - k :] != plan.source_views:
            raise _changed(plan, "its L0 views are no longer the oldest views of l0")
        if plan.drop_tombstones and m.compacted:
            raise _changed(plan, "tombstones were dropped but sorted runs now exist below")
        l0 = l0[: len(l0) - k]
        compacted = (*new_run, *m.compacted)
    else:
        ids = [r.id for r in m.compacted]
        k = len(plan.source_runs)
        pos = ids.index(plan.source_runs[0].id) if k and plan.source_runs[0].id in ids else -1
        if pos < 0 or m.compacted[pos : pos + k] != plan.source_runs:
            raise _changed(plan, "its sorted runs are gone, changed or no longer adjacent")
        if plan.drop_tombstones and pos + k != len(m.compacted):
            raise _changed(plan, "tombstones were dropped but an older run now exists below")
        compacted = (*m.compacted[:pos], *new_run, *m.compacted[pos + k :])
    referenced = {v.sst_id for v in l0} | {v.sst_id for r in compacted for v in r.views}
    ssts = tuple(s for s in (*m.ssts, *outputs) if s.id in referenced)
    physical = {s.id for s in ssts} | {s.original_id for s in ssts if s.original_id is not None}
    external = tuple(
        dataclasses.replace(e, sst_ids=tuple(i for i in e.sst_ids if i in physical))
        for e in m.external_dbs
    )
    new = dataclasses.replace(m, l0=l0, compacted=compacted, ssts=ssts, external_dbs=external)
    if plan.kind == "l0":
        newest = plan.source_views[0]
        new = dataclasses.replace(new, last_compacted_l0_view_id=newest.view_id)
    return new


# ---- reading the sources and what the compaction writes --------------------------------------


def _source_ssts(plan: CompactionPlan) -> list[SstView]:
    return source_views(plan)


def source_streams(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    plan: CompactionPlan,
    *,
    readahead: int | None = None,
    rng: KeyRange = ALL_KEYS,
    budget: int = READAHEAD_BUDGET,
) -> list[Iterable[pa.RecordBatch]]:
    """One stream per source, newest first, each clipped to its views' visible ranges and
    ``rng``, holding every version with its timestamps (:mod:`slatedb_core.compactor.sources`),
    each reading ``readahead`` bytes per GET (by default :func:`readahead_per_source` of the
    number of streams and ``budget``, ``CompactorOptions.read_budget_bytes``).

    Readers use no block cache: a compaction reads every block once, and caching them would only
    evict the point-lookup working set of a writer sharing the process.
    """
    n = len(plan.source_views) if plan.kind == "l0" else len(plan.source_runs)
    ra = readahead_per_source(n, budget) if readahead is None else readahead
    return plan_sources(store, db_path, manifest, plan, rng, ra)


def compaction_rows(
    store: ObjectStore,
    db_path: str,
    manifest: Manifest,
    plan: CompactionPlan,
    policy: Retention,
    rows_in: list[int],
    rng: KeyRange = ALL_KEYS,
    *,
    budget: int = READAHEAD_BUDGET,
) -> Iterator[pa.RecordBatch]:
    """The rows a compaction of ``plan`` (within ``rng``) writes: every version of the sources
    merged (:func:`~slatedb_core.lsm.versions_merge.merge_versions`), then what SlateDB's
    compactor keeps of them (:func:`~slatedb_core.lsm.retention.retain`: TTL expiry, the
    versions live snapshots read, merge operands folded). THE path of every compaction, single
    process and distributed; ``rows_in`` counts the rows read; ``budget``: the read-ahead the
    sources share (``CompactorOptions.read_budget_bytes``)."""
    streams = [
        counted(s, rows_in)
        for s in source_streams(store, db_path, manifest, plan, rng=rng, budget=budget)
    ]
    return merge_versions(streams, policy)


def plan_retention(
    manifest: Manifest, plan: CompactionPlan, options: CompactorOptions
) -> Retention:
    """The retention policy of ``plan`` made from ``manifest``: SlateDB's compaction clock
    (``last_l0_clock_tick``), its live snapshots (``recent_snapshot_min_seq``), tombstones
    dropped only into the last run, the options' merge operator."""
    return compaction_retention(
        manifest,
        drop_tombstones=plan.drop_tombstones,
        merge_operator=resolve_merge_operator(options.merge_operator),
    )


def counted(batches: Iterable[pa.RecordBatch], rows: list[int]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        rows[0] += b.num_rows
        yield b


# ---- the executor ---------------------------------------------------------------------------------


class CompactionExecutor:
    """Runs plans for one compactor session (one epoch)."""

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        manifest: FencedManifest,
        records: CompactionsStore,
        options: CompactorOptions,
        *,
        cancel: threading.Event | None = None,
    ) -> None:
        self.store = store
        self.db_path = db_path
        self.manifest = manifest
        self.records = records
        self.options = options
        self.cancel = cancel
        self.sst_options = SstOptions(*options.sst_fields())
        self._unclosed: list[tuple[CompactionRecord, Status, str | None]] = []

    def execute(self, plan: CompactionPlan, planned_on: StoredManifest) -> CompactionResult:
        """Run ``plan`` (made from ``planned_on``) to its commit; see the module doc.

        Fenced propagates untouched (a newer compactor owns .compactions and closes our record);
        any other failure marks the record failed before it propagates.
        """
        started = time.monotonic()
        self._retry_unclosed()
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
        try:
            result = self._run(plan, planned_on, record, started)
        except Fenced:
            raise
        except BaseException as e:
            self._finish(record, "failed", f"{type(e).__name__}: {e}")
            raise
        self._finish(record, "committed", None)
        return result

    def _finish(self, record: CompactionRecord, status: Status, error: str | None) -> None:
        """Close the record, best effort: the manifest is the truth. A record left "running" only
        keeps the GC away from outputs a bit longer; it is retried before our next compaction,
        and a successor compactor closes it by looking at the manifest."""

        def close(state: CompactionsState) -> CompactionsState:
            current = state.get(record.id) or record
            return state.with_record(
                dataclasses.replace(current, status=status, updated_at_ms=now_ms(), error=error)
            )

        try:
            self.records.update(close)
        except Exception:
            log.warning("could not mark compaction %s %s", record.id, status, exc_info=True)
            self._unclosed.append((record, status, error))

    def _retry_unclosed(self) -> None:
        pending, self._unclosed = self._unclosed, []
        for record, status, error in pending:
            self._finish(record, status, error)

    def _run(
        self,
        plan: CompactionPlan,
        planned_on: StoredManifest,
        record: CompactionRecord,
        started: float,
    ) -> CompactionResult:
        manifest = planned_on.manifest
        rows_in = [0]
        policy = plan_retention(manifest, plan, self.options)
        merged = compaction_rows(
            self.store,
            self.db_path,
            manifest,
            plan,
            policy,
            rows_in,
            budget=self.options.read_budget_bytes,
        )

        def write(parts: SstParts) -> CompactedSst:
            nonlocal record
            self._check_cancelled(record)
            sst_id = ULID()
            record = dataclasses.replace(
                record, outputs=(*record.outputs, sst_id), updated_at_ms=now_ms()
            )
            self.records.put(record)  # announce before the object exists
            return write_new_sst_streamed(self.store, self.db_path, parts, sst_id)

        outputs, rows_out = write_ssts(
            merged, self.options.max_sst_size_bytes, self.sst_options, write
        )
        final = tuple(outputs)
        self._check_cancelled(record)
        stored = self.manifest.update_at(lambda m, _next: apply_compaction(m, plan, final))
        sources = {v.sst_id for v in _source_ssts(plan)}
        size_of = {s.id: s.info.estimated_size for s in manifest.ssts}
        return CompactionResult(
            compaction_id=record.id,
            plan=plan,
            outputs=final,
            manifest_id=stored.id,
            input_ssts=len(sources),
            bytes_in=sum(size_of.get(i, 0) for i in sources),
            rows_in=rows_in[0],
            bytes_out=sum(s.info.estimated_size for s in final),
            rows_out=rows_out,
            duration_s=time.monotonic() - started,
        )

    def _check_cancelled(self, record: CompactionRecord) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise CompactionCancelled(f"compaction {record.id} stopped before its commit")
