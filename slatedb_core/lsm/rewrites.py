"""Every path that rewrites stored rows into new SSTs, and every other module that writes SSTs
(issue 38, item 6: a registry, so that a new path cannot skip the row model).

A *rewrite path* reads rows an engine stored (SSTs, WAL SSTs: SlateDB's or ours) and writes them
into new SSTs. Each must carry the whole row (:mod:`slatedb_core.lsm.row_model`: seq, kind with
merge operands, value, ``expire_ts``, ``create_ts``) and take every decision to drop a version,
an expired row or an operand through ONE function, :func:`slatedb_core.lsm.retention.retain`
(SlateDB's ``retention_iterator.rs`` and ``merge_operator.rs``). :data:`REWRITE_PATHS` lists them:
name, the modules that write their SSTs, the public entry point, what the output must keep, and
a *driver* (:mod:`slatedb_core.table.rewrite_drivers`) that runs the path over a database's
stored SSTs through that entry point, for
``tests/lsm/test_rewrite_registry.py`` to run EVERY registered path over SSTs SlateDB 0.17 wrote
with TTL rows, merge operands and versions a live snapshot reads.

An *SST writer* (:data:`SST_WRITERS`) writes rows that are new, from the API (the WAL, the L0
flush of the memtable, staged ingest rows, bulk ingest): not a rewrite of stored rows, but it
writes SSTs, so it is listed too, with where its rows come from.

The same test fails when a module under ``slatedb_core`` (or ``spark_jobs``) calls an SST encoder
(:data:`ENCODERS`) and is in neither list: register a new path here, with a driver, before it
ships.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from slatedb_core.keys import KeyRange
from slatedb_core.lsm.merge_operator import MergeOperator
from slatedb_core.store.objectstore import ObjectStore

__all__ = [
    "ENCODERS",
    "LAST_L0_TICK",
    "NOW",
    "REWRITE_PATHS",
    "SST_WRITERS",
    "RewriteInput",
    "RewriteOutput",
    "RewritePath",
    "SstWriter",
    "driver_of",
    "registered_modules",
]

ENCODERS = frozenset(
    {
        "encode_sst",
        "encode_sst_into",
        "encode_fixed_sst_into",
        "SstStreamEncoder",
        "write_new_sst",
        "write_ssts",
        "encode_wal_sst",
    }
)
"""The functions and classes that make SST bytes or write SST objects (``slatedb_core.sst``,
``compactor/output_ssts.py``, ``wal/log.py``): a module using one writes SSTs."""


NOW = "now"
LAST_L0_TICK = "last_l0_clock_tick"


@dataclass(frozen=True)
class RewriteInput:
    """What a driver runs its path over."""

    store: ObjectStore
    db_path: str
    """A database whose L0 SSTs and WAL SSTs hold the rows (any engine wrote them). Paths that
    rewrite in place (compactions) change it."""
    scratch: str
    """A prefix no database uses: where a path that writes into another database creates it."""
    merge_operator: str | MergeOperator | None
    """The operator the database's writers use (SlateDB RFC 0006)."""
    key_range: KeyRange
    """The range a path that cuts by key (a projected clone) keeps."""


@dataclass(frozen=True)
class RewriteOutput:
    ssts: tuple[str, ...]
    """The SST objects the path wrote (paths in the store), WAL SSTs when ``wal``."""
    wal: bool = False
    key_range: KeyRange | None = None
    """The keys the output covers (None: every key of the input)."""


@dataclass(frozen=True)
class RewritePath:
    """One path rewriting stored rows into new SSTs."""

    name: str
    modules: tuple[str, ...]
    """The modules whose code writes the path's SSTs (or hands its rows to the one that does)."""
    entry: str
    """The public entry point the driver calls."""
    driver: str
    """``module:function`` of the driver (:func:`driver_of`)."""
    keeps_snapshot_versions: bool
    """The output keeps the versions a live snapshot of the database reads (a path rewriting
    the database in place); False where the rows land, newly sequenced, in a database no
    snapshot reads them in (ingests)."""
    clock: str | None
    """The clock by which rows whose ``expire_ts`` has passed are rewritten as SlateDB's
    compaction does (a value becomes a tombstone, an operand is skipped): :data:`NOW` (the
    rewrite's wall clock) or :data:`LAST_L0_TICK` (the manifest's ``last_l0_clock_tick``,
    SlateDB's compaction clock); None: every row is carried as it was written (a WAL copy:
    SlateDB applies a TTL when it rewrites rows, not when it replays the WAL)."""
    decides_in: str | None
    """The module whose code calls :func:`~slatedb_core.lsm.retention.retain` for the path: one
    of :attr:`modules` or a module they import, directly or not (None: the path drops no
    version, expired row or operand)."""


@dataclass(frozen=True)
class SstWriter:
    """A module writing SSTs of new rows (not a rewrite of stored ones)."""

    module: str
    rows: str
    """Where its rows come from, and which code carries their timestamps and operands."""


_DRIVERS = "slatedb_core.table.rewrite_drivers:"
"""The drivers sit in the top layer that reaches every path (docs/contributing.md, "Shape"),
named here by string so that this module stays below the paths it lists."""

REWRITE_PATHS: tuple[RewritePath, ...] = (
    RewritePath(
        "compaction",
        (
            "slatedb_core.compactor.executor",
            "slatedb_core.compactor.output_ssts",
        ),
        "slatedb_core.compactor.compactor.run_compaction_once",
        _DRIVERS + "compaction",
        keeps_snapshot_versions=True,
        clock=LAST_L0_TICK,
        decides_in="slatedb_core.lsm.versions_merge",
    ),
    RewritePath(
        "distributed compaction",
        ("slatedb_core.compactor.distributed", "spark_jobs.compact"),
        "slatedb_core.compactor.distributed.DistributedCompactor (spark_jobs.compact's tasks)",
        _DRIVERS + "distributed_compaction",
        keeps_snapshot_versions=True,
        clock=LAST_L0_TICK,
        decides_in="slatedb_core.lsm.versions_merge",
    ),
    RewritePath(
        "ingest re-encode",
        ("slatedb_core.writer.ingest",),
        "slatedb_core.writer.db.Db.ingest_ssts",
        _DRIVERS + "ingest_ssts",
        keeps_snapshot_versions=False,
        clock=NOW,
        decides_in="slatedb_core.writer.ingest",
    ),
    RewritePath(
        "table ingest commit",
        ("slatedb_core.table.ingest",),
        "slatedb_core.table.ingest.commit_shard",
        _DRIVERS + "table_ingest",
        keeps_snapshot_versions=False,
        clock=NOW,
        decides_in="slatedb_core.writer.ingest",
    ),
    RewritePath(
        "overwrite commit",
        ("slatedb_core.table.overwrite",),
        "slatedb_core.table.overwrite.commit_overwrite",
        _DRIVERS + "overwrite",
        keeps_snapshot_versions=False,
        clock=NOW,
        decides_in="slatedb_core.writer.ingest",
    ),
    RewritePath(
        "clone WAL clip",
        ("slatedb_core.lifecycle.clone_wal",),
        "slatedb_core.lifecycle.clone_wal.clip (a projected clone's WAL copy)",
        _DRIVERS + "clone_wal_clip",
        keeps_snapshot_versions=True,
        clock=None,
        decides_in=None,
    ),
)
"""Every rewrite path (module doc). Clones and unions otherwise share SSTs by reference
(SlateDB RFC 0004): no row is rewritten."""

SST_WRITERS: tuple[SstWriter, ...] = (
    SstWriter(
        "slatedb_core.wal.log",
        "our writes, as the WAL buffer holds them (encode_wal_sst: every row's timestamps)",
    ),
    SstWriter("slatedb_core.wal.writer", "our writes (WriteBatch, put_arrow) to the WAL"),
    SstWriter(
        "slatedb_core.writer.engine",
        "the memtable's rows at an L0 flush (writer/l0_flush.py applies SlateDB's flush rules)",
    ),
    SstWriter("slatedb_core.writer.l0_flush", "the memtable's rows at an L0 flush"),
    SstWriter(
        "slatedb_core.table.staged",
        "a table ingest's input rows (ttl column: expire_ts via writer.ttl.timestamp_columns)",
    ),
    SstWriter(
        "slatedb_core.writer.ingest",
        "bulk_ingest's Arrow rows (its ingest_ssts re-encode is a rewrite path)",
    ),
)
"""Modules writing SSTs of new rows (module doc)."""


def driver_of(path: RewritePath) -> Callable[[RewriteInput], RewriteOutput]:
    """The function running ``path`` over a :class:`RewriteInput`."""
    module, _, name = path.driver.partition(":")
    found: Callable[[RewriteInput], RewriteOutput] = getattr(importlib.import_module(module), name)
    return found


def registered_modules() -> frozenset[str]:
    """Every module either list names."""
    return frozenset(
        {m for p in REWRITE_PATHS for m in p.modules} | {w.module for w in SST_WRITERS}
    )
