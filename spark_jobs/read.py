"""A sharded table as a Spark DataFrame of ``(key binary, value binary)``.

Planning (driver): for each shard, the manifest it will be read at (the latest, or the one its
checkpoint pins) gives the key ranges of its SSTs without reading any data. The shard's range is
cut at the SSTs' first keys, so each Spark partition reads about one SST's worth of keys, and a
table of many SSTs is read by as many tasks.

Reading (tasks): each partition opens a :class:`DbReader` of its shard and streams
``scan_arrow(start, end)`` of its range: the merged view of every L0 SST and sorted run, newest
value per key, deletes applied. Partitions never overlap, so each key comes from exactly one task.

Consistency: ``checkpoint=None`` reads each partition at the latest state its task finds
(``FOLLOW_LATEST``: nothing is written, but partitions read at different moments and a rescale
during the read can make shards vanish). ``checkpoint="create"`` first takes a
:class:`~slatedb_core.table.TableSnapshot`: one checkpoint per shard, of one shard-map version,
expiring after ``checkpoint_lifetime``; every task then reads its shard's checkpoint, so the whole
DataFrame is one repeatable view (re-evaluating it gives the same rows) that a rescale or the GC
cannot change. A snapshot made elsewhere can be passed instead. A checkpoint holds what each
shard's manifest held (bulk ingests and flushed memtables), not writes still only in a live
writer's WAL.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession

from slatedb_core import (
    DbReader,
    DbReaderOptions,
    KeyRange,
    ObjectStore,
    ReaderMode,
    Shard,
    Table,
    TableSnapshot,
    open_store,
)
from slatedb_core.errors import CheckpointNotFound, InvalidArgument
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.projection import effective_range
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.table import TableOptions
from spark_jobs.shared_store import refuse_process_store

StoreFactory = Callable[[], ObjectStore]
KV_DDL = "key binary, value binary"
_PART_DDL = "shard int, db_path string, checkpoint string, start binary, end binary"
DEFAULT_MAX_PARTITIONS_PER_SHARD = 256


@dataclass(frozen=True, slots=True)
class ReadPartition:
    shard: int
    db_path: str
    checkpoint: uuid.UUID | None
    key_range: KeyRange


def sst_cuts(manifest: Manifest, rng: KeyRange, max_parts: int) -> list[bytes]:
    """Increasing keys strictly inside ``rng`` at which the SSTs of ``manifest`` start (each
    view's visible start when it has one: the start of its effective range, as projection
    computes it), thinned evenly to at most ``max_parts - 1``."""
    ssts = {s.id: s for s in manifest.ssts}
    views = [*manifest.l0, *(v for r in manifest.compacted for v in r.views)]
    starts: set[bytes] = set()
    for v in views:
        sst = ssts.get(v.sst_id)
        if sst is None or sst.info.first_key is None:
            continue
        first = effective_range(v, sst).start
        if first is not None and rng.contains(first) and first != rng.start:
            starts.add(first)
    cuts = sorted(starts)
    if len(cuts) >= max_parts:
        step = len(cuts) / (max_parts - 1) if max_parts > 1 else len(cuts) + 1
        cuts = [cuts[int(i * step)] for i in range(max_parts - 1)] if max_parts > 1 else []
    return cuts


def sst_sizes(manifest: Manifest) -> list[tuple[KeyRange, int]]:
    """Each SST view's effective key range and its SST's estimated size in bytes (a view of
    part of an SST counts the whole SST: its visible share is not known)."""
    ssts = {s.id: s for s in manifest.ssts}
    out: list[tuple[KeyRange, int]] = []
    for v in [*manifest.l0, *(v for r in manifest.compacted for v in r.views)]:
        sst = ssts.get(v.sst_id)
        if sst is not None and sst.info.first_key is not None:
            out.append((effective_range(v, sst), sst.info.estimated_size))
    return out


def size_cuts(
    manifest: Manifest, rng: KeyRange, target_bytes: int, max_parts: int
) -> list[KeyRange]:
    """``rng`` (clipped to the database's range) cut into ranges of about ``target_bytes`` of
    SST data each, at most ``max_parts``, in order (none if the clipped range is empty).

    The bytes of each SST (:func:`sst_sizes`) are taken as spread evenly over its keys' span,
    keys read as numbers (their 8 bytes after the prefix every bound shares), so the cuts fall
    inside SSTs as well as between them: overlapping L0 SSTs, which all start near the shard's
    first key, are cut as evenly as a sorted run's SSTs."""
    rng = rng.intersect(KeyRange.of(manifest.key_range))
    if rng.is_empty():
        return []
    spans = [(r, n) for r, n in sst_sizes(manifest) if not r.intersect(rng).is_empty()]
    starts = [b for r, _ in spans for b in (r.start, rng.start) if b is not None]
    ends = [b for r, _ in spans for b in (r.end, rng.end) if b is not None]
    if not starts or not ends:
        return [rng]
    lo, hi = min(starts), max(ends)
    prefix = _common_prefix(lo, hi)
    num = functools.partial(_key_number, prefix)
    pieces = [(num(r.start or lo), num(r.end or hi), n) for r, n in spans]

    def below(x: int) -> float:  # estimated bytes of keys below x
        return sum(
            n * min(1.0, max(0.0, (x - a) / (b - a))) if b > a else (n if x > a else 0)
            for a, b, n in pieces
        )

    a, b = num(rng.start or lo), num(rng.end or hi)
    base, total = below(a), below(b) - below(a)
    parts = min(max_parts, max(1, math.ceil(total / max(1, target_bytes))))
    cuts: list[bytes] = []
    for j in range(1, parts):
        want, x0, x1 = base + total * j / parts, a, b
        while x1 - x0 > 1:
            mid = (x0 + x1) // 2
            x0, x1 = (mid, x1) if below(mid) < want else (x0, mid)
        cut = prefix + x1.to_bytes(8, "big")
        if rng.contains(cut) and cut != rng.start and (not cuts or cut > cuts[-1]):
            cuts.append(cut)
    bounds: list[bytes | None] = [rng.start, *cuts, rng.end]
    return [KeyRange(x, y) for x, y in itertools.pairwise(bounds)]


def _common_prefix(a: bytes, b: bytes) -> bytes:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def _key_number(prefix: bytes, key: bytes) -> int:
    """``key`` (which starts with ``prefix`` or sorts outside it) as a number: its 8 bytes after
    ``prefix``, zero-padded; keys below or above every key with the prefix map to 0 or 2^64-1."""
    if not key.startswith(prefix):
        return 0 if key < prefix else (1 << 64) - 1
    return int.from_bytes(key[len(prefix) : len(prefix) + 8].ljust(8, b"\0"), "big")


def shard_manifest(store: ObjectStore, db_path: str, checkpoint: uuid.UUID | None) -> Manifest:
    """The manifest a shard is read at: the latest, or the one ``checkpoint`` pins (the latest
    when the checkpoint is not found in it: the reader then reports it missing)."""
    ms = ManifestStore(store, db_path)
    latest = ms.read_latest()
    manifest = latest.manifest
    if checkpoint is not None:
        cp = manifest.checkpoint(checkpoint)
        if cp is not None and cp.manifest_id != latest.id:
            manifest = ms.read(cp.manifest_id).manifest
    return manifest


def shard_ranges(manifest: Manifest, rng: KeyRange, max_parts: int) -> list[KeyRange]:
    """``rng`` (clipped to the database's range) cut at its SSTs' starts: the key ranges of a
    shard's partitions, in order (none if the clipped range is empty)."""
    rng = rng.intersect(KeyRange.of(manifest.key_range))
    if rng.is_empty():
        return []
    bounds: list[bytes | None] = [rng.start, *sst_cuts(manifest, rng, max_parts), rng.end]
    return [KeyRange(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def plan_partitions(
    store: ObjectStore,
    shards: tuple[Shard, ...],
    checkpoints: tuple[uuid.UUID, ...] | None,
    max_parts_per_shard: int = DEFAULT_MAX_PARTITIONS_PER_SHARD,
) -> list[ReadPartition]:
    """One partition per SST range of every shard, in key order."""
    out: list[ReadPartition] = []
    for i, shard in enumerate(shards):
        cid = None if checkpoints is None else checkpoints[i]
        manifest = shard_manifest(store, shard.db_path, cid)
        for r in shard_ranges(manifest, shard.key_range, max_parts_per_shard):
            out.append(ReadPartition(shard.index, shard.db_path, cid, r))
    return out


@dataclass(frozen=True)
class _ReadPartitions:
    store_factory: StoreFactory
    batch_size: int
    options: DbReaderOptions = field(default_factory=DbReaderOptions)
    """The shard readers' WAL store and merge operator (the mode is set per partition)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store: ObjectStore | None = None
        for b in batches:
            for p in b.to_pylist():
                store = store or self.store_factory()
                yield from self._read(store, p)

    def _read(self, store: ObjectStore, p: dict[str, object]) -> Iterator[pa.RecordBatch]:
        cp = p["checkpoint"]
        if cp is None:
            follow = dataclasses.replace(self.options, mode=ReaderMode.FOLLOW_LATEST)
            reader = DbReader.open(str(p["db_path"]), store, None, follow)
        else:
            at = dataclasses.replace(self.options, mode=ReaderMode.CHECKPOINT)
            reader = DbReader.open(str(p["db_path"]), store, uuid.UUID(str(cp)), at)
        start, end = p["start"], p["end"]
        assert start is None or isinstance(start, bytes)
        assert end is None or isinstance(end, bytes)
        with reader:
            yield from reader.scan_arrow(start, end, self.batch_size)


def read_partitions(
    spark: SparkSession,
    partitions: list[ReadPartition],
    store_factory: StoreFactory,
    batch_size: int = 65536,
    options: DbReaderOptions | None = None,
) -> DataFrame:
    """A DataFrame with one Spark partition per :class:`ReadPartition` (``options``: the shard
    readers' WAL store and merge operator)."""
    rows = [
        Row(
            shard=p.shard,
            db_path=p.db_path,
            checkpoint=None if p.checkpoint is None else str(p.checkpoint),
            start=p.key_range.start,
            end=p.key_range.end,
        )
        for p in partitions
    ]
    if not rows:
        return spark.createDataFrame([], KV_DDL)
    # parallelize(n items, n slices) puts item i alone in slice i; mapInArrow keeps partitions
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    return spark.createDataFrame(rdd, _PART_DDL).mapInArrow(
        _ReadPartitions(store_factory, batch_size, options or DbReaderOptions()), KV_DDL
    )


def read_table(
    spark: SparkSession,
    table_url: str,
    table_path: str,
    checkpoint: Literal["create"] | TableSnapshot | None = None,
    *,
    checkpoint_lifetime: timedelta = timedelta(hours=1),
    max_partitions_per_shard: int = DEFAULT_MAX_PARTITIONS_PER_SHARD,
    store_factory: StoreFactory | None = None,
    wal_url: str | None = None,
    merge_operator: str | None = None,
) -> DataFrame:
    """The table's ``(key, value)`` rows, one Spark partition per SST range (see the module doc).

    ``checkpoint``: None reads the latest state of each shard; "create" takes a snapshot (one
    checkpoint per shard, expiring after ``checkpoint_lifetime``); a TableSnapshot reads that.
    ``wal_url``: the shards' separate WAL store (SlateDB RFC 0009); ``merge_operator``: a
    built-in merge operator's name (RFC 0006) that reads fold merge operands with.
    """
    if max_partitions_per_shard < 1:
        raise InvalidArgument("max_partitions_per_shard must be >= 1")
    reader_options = DbReaderOptions(wal_url=wal_url, merge_operator=merge_operator)
    table_options = TableOptions(writer=DbOptions(wal_url=wal_url), reader=reader_options)
    factory = store_factory or functools.partial(open_store, table_url)
    store = factory()
    if isinstance(checkpoint, TableSnapshot):
        snapshot: TableSnapshot | None = checkpoint
    elif checkpoint == "create":
        with Table.open(table_path, store, table_options) as table:
            snapshot = table.snapshot(lifetime=checkpoint_lifetime)
    elif checkpoint is None:
        snapshot = None
    else:
        raise InvalidArgument(
            f"checkpoint must be None, 'create' or a TableSnapshot: {checkpoint!r}"
        )
    if snapshot is not None:
        if snapshot.table_path != table_path:
            raise InvalidArgument(f"snapshot of {snapshot.table_path!r}, not {table_path!r}")
        parts = plan_partitions(
            store, snapshot.shards, snapshot.checkpoints, max_partitions_per_shard
        )
    else:
        with Table.open(table_path, store, table_options) as table:
            shards = tuple(table.shards)
        parts = plan_partitions(store, shards, None, max_partitions_per_shard)
    return read_partitions(spark, parts, factory, options=reader_options)


__all__ = [
    "ReadPartition",
    "plan_partitions",
    "read_partitions",
    "read_table",
    "shard_manifest",
    "shard_ranges",
    "size_cuts",
    "sst_cuts",
    "sst_sizes",
]


def _named_snapshot(url: str, path: str, name: str, wal_url: str | None) -> TableSnapshot:
    """The table's snapshot named ``name`` (CheckpointNotFound, naming those there are, if none)."""
    options = TableOptions(
        writer=DbOptions(wal_url=wal_url), reader=DbReaderOptions(wal_url=wal_url)
    )
    with Table.open(path, open_store(url), options) as table:
        snap = table.named_snapshot(name)
        if snap is None:
            names = ", ".join(table.snapshot_names()) or "none"
            raise CheckpointNotFound(
                name, f"table {path!r} has no snapshot named {name!r} (its snapshots: {names})"
            )
        return snap


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spark_jobs.read",
        description="Read a table into Spark; print its row count or write it as Parquet.",
    )
    p.add_argument("--url", required=True, help="object store URL")
    p.add_argument("--path", required=True, help="table path inside the store")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--snapshot", action="store_true", help="take a snapshot (a checkpoint per shard), read it"
    )
    which.add_argument(
        "--checkpoint",
        metavar="NAME",
        default=None,
        help="read the table snapshot of this name (Table.snapshot(name=...)), not the latest",
    )
    p.add_argument("--output", default=None, help="write the rows as Parquet to this path")
    p.add_argument("--master", default=None, help="default: local[2]")
    p.add_argument(
        "--wal-url",
        default=os.environ.get("SLATEDB_WAL_URL"),
        help="the shards' separate WAL store, if any (SlateDB RFC 0009; env SLATEDB_WAL_URL)",
    )
    p.add_argument(
        "--merge-operator",
        default=os.environ.get("SLATEDB_MERGE_OPERATOR"),
        choices=sorted(BUILTIN_MERGE_OPERATORS),
        help="the merge operator the writers use (SlateDB RFC 0006; env SLATEDB_MERGE_OPERATOR)",
    )
    args = p.parse_args(argv)
    refuse_process_store(args.url, "--url")
    refuse_process_store(args.wal_url, "--wal-url")
    from spark_jobs.session import SessionOptions, get_session

    checkpoint: Literal["create"] | TableSnapshot | None = "create" if args.snapshot else None
    if args.checkpoint is not None:
        checkpoint = _named_snapshot(args.url, args.path, args.checkpoint, args.wal_url)
    spark = get_session(SessionOptions(master=args.master or "local[2]", app_name="slatedb-read"))
    df = read_table(
        spark,
        args.url,
        args.path,
        checkpoint,
        wal_url=args.wal_url,
        merge_operator=args.merge_operator,
    )
    if args.output:
        df.write.mode("overwrite").parquet(args.output)
        print(f"wrote {args.output} from {df.rdd.getNumPartitions()} partitions")
    else:
        print(f"{df.count()} rows in {df.rdd.getNumPartitions()} partitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
