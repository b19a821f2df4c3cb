"""Compaction of one large database (or each shard of a table) on Spark: key-range
subcompactions as Spark tasks.

The driver takes over as the database's compactor (bumping ``compactor_epoch``), plans each
compaction the scheduler picks, cut into key ranges of about equal input bytes, and runs one
Spark task per range; each task merges its range of the sources and uploads output SSTs. The
driver then commits every output in one manifest update under its epoch. The protocol lives in
:mod:`slatedb_core.compactor.distributed`; this module only moves work to executors and back.

Failures: a task that fails is retried by Spark under new output ids (the failed attempt's
outputs are announced, never committed, and collected by the GC once the compaction's record is
closed). If another compactor takes over while the job runs, tasks stop at their next output
announcement and the commit fails: :class:`Fenced` reaches the caller and nothing is visible.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from slatedb_core import ObjectStore, Table, open_store
from slatedb_core.compactor.compactor import ConflictStreak
from slatedb_core.compactor.distributed import (
    DistributedCompactor,
    DistributedPlan,
    SubcompactionResult,
    execute_subcompaction,
)
from slatedb_core.errors import (
    CompactionContended,
    CompactionSourceChanged,
    Fenced,
    InvalidArgument,
)
from slatedb_core.options import CompactorOptions
from spark_jobs.shared_store import refuse_process_store

log = logging.getLogger(__name__)

StoreFactory = Callable[[], ObjectStore]


@dataclass
class SparkCompactionStats:
    compactor_epoch: int
    compactions: int = 0
    failed: int = 0
    """Compactions abandoned because their sources changed before the commit (re-planned)."""
    subcompactions: int = 0
    input_ssts: int = 0
    output_ssts: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    plan_s: float = 0.0
    """Driver time choosing split keys (reads the sources' SST indexes) and recording plans."""
    tasks_s: float = 0.0
    """Time in Spark jobs running subcompactions (wall clock, scheduling included)."""
    task_max_s: float = 0.0
    """Longest single subcompaction, as measured inside its task."""
    commit_s: float = 0.0
    duration_s: float = 0.0

    def summary(self) -> str:
        rate = self.bytes_in / 1e6 / self.duration_s if self.duration_s > 0 else 0.0
        abandoned = f"; {self.failed} abandoned (sources changed)" if self.failed else ""
        return (
            f"spark compaction (epoch {self.compactor_epoch}): {self.compactions} compaction(s) in "
            f"{self.subcompactions} subcompaction task(s); {self.input_ssts} -> "
            f"{self.output_ssts} SSTs, {self.rows_in} -> {self.rows_out} rows, "
            f"{self.bytes_in / 1e6:.1f} -> {self.bytes_out / 1e6:.1f} MB in "
            f"{self.duration_s:.2f}s ({rate:.1f} MB/s; planning {self.plan_s:.2f}s, tasks "
            f"{self.tasks_s:.2f}s with the longest {self.task_max_s:.2f}s, commits "
            f"{self.commit_s:.2f}s){abandoned}"
        )


@dataclass(frozen=True)
class _FencedOutcome:
    our_epoch: int
    current_epoch: int


@dataclass(frozen=True)
class _Subcompact:
    plan: DistributedPlan
    store_factory: StoreFactory

    def __call__(self, index: int) -> SubcompactionResult | _FencedOutcome:
        try:
            return execute_subcompaction(self.store_factory(), self.plan, index)
        except Fenced as e:  # deterministic: retrying the task cannot help, tell the driver
            return _FencedOutcome(e.our_epoch, e.current_epoch)


def run_subcompactions(
    spark: SparkSession, plan: DistributedPlan, store_factory: StoreFactory
) -> list[SubcompactionResult]:
    """Execute every subcompaction of ``plan`` as one Spark task; Fenced if a task was."""
    n = plan.subcompactions
    outcomes = (
        spark.sparkContext.parallelize(range(n), n).map(_Subcompact(plan, store_factory)).collect()
    )
    fenced = [o for o in outcomes if isinstance(o, _FencedOutcome)]
    if fenced:
        raise Fenced("compactor", fenced[0].our_epoch, max(f.current_epoch for f in fenced))
    return [o for o in outcomes if isinstance(o, SubcompactionResult)]


def compact(
    spark: SparkSession,
    url: str,
    path: str,
    *,
    subcompactions: int | None = None,
    options: CompactorOptions | None = None,
    max_compactions: int = 100,
    store_factory: StoreFactory | None = None,
) -> SparkCompactionStats | None:
    """Compact the database at ``path`` until the scheduler has nothing left (like
    :func:`~slatedb_core.compactor.run_compaction_once`), each compaction split into
    ``subcompactions`` Spark tasks (default: Spark's default parallelism). None if there was
    nothing to do. Raises Fenced if another compactor takes over meanwhile, and
    CompactionContended if the sources changed before every commit (the single-process
    compactor's rule, :class:`~slatedb_core.compactor.compactor.ConflictStreak`)."""
    if max_compactions < 1:
        raise InvalidArgument("max_compactions must be >= 1")
    started = time.monotonic()
    factory = store_factory or functools.partial(open_store, url)
    n = subcompactions or spark.sparkContext.defaultParallelism
    dc = DistributedCompactor(path, factory(), options)
    stats = SparkCompactionStats(compactor_epoch=dc.epoch)
    conflicts = ConflictStreak(path)
    for _ in range(max_compactions):
        t0 = time.monotonic()
        plan = dc.plan(n)
        t1 = time.monotonic()
        stats.plan_s += t1 - t0
        if plan is None:
            break
        try:
            results = run_subcompactions(spark, plan, factory)
        except Fenced:
            raise
        except Exception as e:
            dc.abort(plan, f"{type(e).__name__}: {str(e)[:500]}")
            raise
        t2 = time.monotonic()
        stats.tasks_s += t2 - t1
        stats.task_max_s = max(stats.task_max_s, *(r.duration_s for r in results))
        try:
            result = dc.commit(plan, results)
        except CompactionSourceChanged as e:  # another tool edited the tree: re-plan
            stats.commit_s += time.monotonic() - t2
            stats.failed += 1
            if conflicts.lost(e):
                break
            continue
        conflicts.won()
        stats.commit_s += time.monotonic() - t2
        stats.compactions += 1
        stats.subcompactions += plan.subcompactions
        stats.input_ssts += result.input_ssts
        stats.output_ssts += len(result.outputs)
        stats.bytes_in += result.bytes_in
        stats.bytes_out += result.bytes_out
        stats.rows_in += result.rows_in
        stats.rows_out += result.rows_out
    stats.duration_s = time.monotonic() - started
    conflicts.check(stats.compactions)
    if stats.compactions == 0:
        return None
    log.info("%s", stats.summary())
    return stats


def compact_table(
    spark: SparkSession,
    url: str,
    table_path: str,
    *,
    subcompactions: int | None = None,
    options: CompactorOptions | None = None,
    store_factory: StoreFactory | None = None,
) -> dict[int, SparkCompactionStats | None]:
    """:func:`compact` every shard of the table at ``table_path``, one after another (each is
    already spread over the executors); returns the statistics by shard index."""
    factory = store_factory or functools.partial(open_store, url)
    with Table.open(table_path, factory()) as table:
        shards = table.shards
    return {
        s.index: compact(
            spark,
            url,
            s.db_path,
            subcompactions=subcompactions,
            options=options,
            store_factory=factory,
        )
        for s in shards
    }


def main(argv: Sequence[str] | None = None, *, store_factory: StoreFactory | None = None) -> int:
    """The command line; ``store_factory`` opens the store instead of ``--url`` (embedding code:
    a store needing extra setup). Exit 0 when the pass compacted or there was nothing to compact,
    1 (the error on stderr) when it gave up or was fenced."""
    p = argparse.ArgumentParser(
        prog="python -m spark_jobs.compact",
        description="Compact one database with key-range subcompactions on Spark.",
    )
    p.add_argument("--url", required=True, help="object store URL")
    p.add_argument("--path", required=True, help="database (or, with --table, table) path")
    p.add_argument("--table", action="store_true", help="compact every shard of a table")
    p.add_argument("--subcompactions", type=int, default=None)
    p.add_argument("--max-sst-mb", type=int, default=256, help="output SST size")
    p.add_argument("--master", default=None, help="default: local[2]")
    p.add_argument(
        "--merge-operator",
        default=None,
        help="the built-in merge operator the database's writers use (add_int64, "
        "string_append); without it a compaction that meets a merge operand fails",
    )
    args = p.parse_args(argv)
    if store_factory is None:  # a factory of the caller's may share one store across tasks
        refuse_process_store(args.url, "--url")
    from spark_jobs.session import SessionOptions, get_session

    spark = get_session(
        SessionOptions(master=args.master or "local[2]", app_name="slatedb-compact")
    )
    options = CompactorOptions(
        max_sst_size_bytes=args.max_sst_mb * 1024 * 1024, merge_operator=args.merge_operator
    )
    try:
        if args.table:
            by_shard = compact_table(
                spark,
                args.url,
                args.path,
                subcompactions=args.subcompactions,
                options=options,
                store_factory=store_factory,
            )
            for index, shard_stats in sorted(by_shard.items()):
                print(f"shard {index}: {_outcome(shard_stats)}")
            return 0
        stats = compact(
            spark,
            args.url,
            args.path,
            subcompactions=args.subcompactions,
            options=options,
            store_factory=store_factory,
        )
    except (CompactionContended, Fenced) as e:  # the pass failed: say why, never "nothing"
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(_outcome(stats))
    return 0


def _outcome(stats: SparkCompactionStats | None) -> str:
    """None only when there really was nothing to compact (a lost pass raises instead)."""
    return stats.summary() if stats is not None else "nothing to compact"


if __name__ == "__main__":
    sys.exit(main())
