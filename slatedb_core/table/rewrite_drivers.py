"""The drivers of the rewrite paths :mod:`slatedb_core.lsm.rewrites` lists: each runs one path over
a database's stored SSTs through its public entry point, for the registry's test
(``tests/lsm/test_rewrite_registry.py``, issue 38 item 6). This module sits in the top layer that
reaches every path (the table's), so that the registry itself stays in ``lsm``."""

from __future__ import annotations

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.compactor.distributed import DistributedCompactor, execute_subcompaction
from slatedb_core.layout import join
from slatedb_core.lifecycle.clone_wal import clip
from slatedb_core.lsm.dbstate import resolve_sst_path
from slatedb_core.lsm.rewrites import RewriteInput, RewriteOutput
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.ingest import commit_shard, plan_ingest
from slatedb_core.table.overwrite import commit_overwrite, plan_overwrite
from slatedb_core.table.table import Table
from slatedb_core.wal.log import WalLog
from slatedb_core.writer.db import Db

__all__ = [
    "clone_wal_clip",
    "compaction",
    "distributed_compaction",
    "ingest_ssts",
    "l0_paths",
    "overwrite",
    "table_ingest",
]


def l0_paths(store: ObjectStore, db_path: str) -> tuple[str, ...]:
    """The database's L0 SSTs, oldest first."""
    m = ManifestStore(store, db_path).read_latest().manifest
    by_id = {s.id: s for s in m.ssts}
    return tuple(resolve_sst_path(db_path, m, by_id[v.sst_id]) for v in reversed(m.l0))


def _new_ssts(store: ObjectStore, db_path: str, before: set[str]) -> tuple[str, ...]:
    """The database's SSTs (every level) that were not in ``before``."""
    m = ManifestStore(store, db_path).read_latest().manifest
    paths = (resolve_sst_path(db_path, m, s) for s in m.ssts)
    return tuple(p for p in paths if p not in before)


def _all_ssts(store: ObjectStore, db_path: str) -> set[str]:
    return set(_new_ssts(store, db_path, set()))


def compaction(inp: RewriteInput) -> RewriteOutput:
    before = _all_ssts(inp.store, inp.db_path)
    options = CompactorOptions(l0_trigger=1, merge_operator=inp.merge_operator)
    run_compaction_once(inp.db_path, inp.store, options)
    return RewriteOutput(_new_ssts(inp.store, inp.db_path, before))


def distributed_compaction(inp: RewriteInput) -> RewriteOutput:
    """The driver and tasks of ``spark_jobs.compact``, in this process."""
    before = _all_ssts(inp.store, inp.db_path)
    options = CompactorOptions(l0_trigger=1, merge_operator=inp.merge_operator)
    driver = DistributedCompactor(inp.db_path, inp.store, options)
    plan = driver.plan(2)
    if plan is not None:
        results = [execute_subcompaction(inp.store, plan, i) for i in range(plan.subcompactions)]
        driver.commit(plan, results)
    return RewriteOutput(_new_ssts(inp.store, inp.db_path, before))


def ingest_ssts(inp: RewriteInput) -> RewriteOutput:
    dst = join(inp.scratch, "ingested")
    with Db.open(dst, inp.store, DbOptions(merge_operator=inp.merge_operator)) as db:
        db.ingest_ssts(list(l0_paths(inp.store, inp.db_path)))
    return RewriteOutput(l0_paths(inp.store, dst))


def table_ingest(inp: RewriteInput) -> RewriteOutput:
    table = join(inp.scratch, "table")
    Table.create(table, inp.store).close()
    plan = plan_ingest(table, inp.store)
    shard = plan.shards[0]
    sources = list(l0_paths(inp.store, inp.db_path))
    options = DbOptions(merge_operator=inp.merge_operator)
    commit_shard(inp.store, plan, "rewrite-registry", shard, sources, options=options)
    return RewriteOutput(l0_paths(inp.store, shard.db_path))


def overwrite(inp: RewriteInput) -> RewriteOutput:
    table = join(inp.scratch, "overwritten")
    Table.create(table, inp.store).close()
    plan = plan_overwrite(table, inp.store)
    staged = {0: [(p, 0) for p in l0_paths(inp.store, inp.db_path)]}
    options = DbOptions(merge_operator=inp.merge_operator)
    commit_overwrite(inp.store, plan, "rewrite-registry", staged, options=options)
    return RewriteOutput(l0_paths(inp.store, plan.shard_map.shards[0].db_path))


def clone_wal_clip(inp: RewriteInput) -> RewriteOutput:
    """A projected clone's WAL copy (``clone_wal.copy_wal`` clips each WAL SST this way)."""
    wal = WalLog(inp.store, inp.db_path)
    out: list[str] = []
    for wal_id in wal.list_ids():
        data = bytes(inp.store.get(wal.path(wal_id)).data)
        clipped, rows = clip(wal, wal_id, data, inp.key_range)
        if rows:
            path = join(inp.scratch, "clone-wal", f"{wal_id:020}.sst")
            inp.store.put(path, clipped)
            out.append(path)
    return RewriteOutput(tuple(out), wal=True, key_range=inp.key_range)
