"""Exactly-once batches of a table ingest (the idea of Delta Lake's transaction identifiers: an
application id and a batch version).

A job planned with a txn (:func:`~slatedb_core.table.ingest.plan_ingest`) commits each shard
with it (:func:`~slatedb_core.table.ingest.commit_shard`): the shard's manifest records the
version for the app in the same fenced update as the SSTs, and a shard that already records that
version or a later one writes nothing (SKIPPED). A re-run of a batch after a partial failure, with
a new job id, therefore completes exactly the shards that are missing. The records are per shard
and are carried through splits and merges (:mod:`slatedb_core.lifecycle.clone`,
:mod:`slatedb_core.lifecycle.union`); docs/format.md, "What is ours, and where it goes", tells
where they are stored and what a SlateDB rewrite does to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.errors import DatabaseDestroyed, InvalidArgument
from slatedb_core.manifest.model import MAX_APP_ID_CHARS, MAX_APP_VERSION, AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore, check_store
from slatedb_core.table.shardmap import Shard, ShardMapStore

__all__ = [
    "AppVersion",
    "applied_message",
    "check_txn",
    "shard_app_versions",
    "table_app_versions",
]


def check_txn(app_id: object, batch_version: object) -> AppVersion | None:
    """The exactly-once batch of the options ``app_id`` and ``batch_version`` (both or
    neither), or None without them; checked before anything is written, by every entry point
    (``spark_jobs.ingest``, the data source, the CLI). InvalidArgument names the bad option."""
    if app_id is None and batch_version is None:
        return None
    if app_id is None:
        raise InvalidArgument("batch_version needs app_id: a batch version belongs to an app")
    if batch_version is None:
        raise InvalidArgument("app_id needs batch_version: the version of this batch of the app")
    if not isinstance(app_id, str):
        raise InvalidArgument(f"app_id must be a str, got {type(app_id).__name__}")
    if not 0 < len(app_id) <= MAX_APP_ID_CHARS:
        raise InvalidArgument(
            f"app_id must be 1 to {MAX_APP_ID_CHARS} characters, got {len(app_id)}"
        )
    if isinstance(batch_version, bool) or not isinstance(batch_version, int):
        raise InvalidArgument(f"batch_version must be an int, got {type(batch_version).__name__}")
    if not 0 <= batch_version <= MAX_APP_VERSION:
        raise InvalidArgument(f"batch_version must be in [0, 2**63), got {batch_version}")
    return AppVersion(app_id, batch_version)


def table_app_versions(store: ObjectStore, table_path: str, app_id: str) -> dict[int, int | None]:
    """Shard index -> the version each shard of the table's latest shard map records for
    ``app_id`` in its latest manifest (None: none, or the shard's database is gone). Read
    concurrently, without a writer: a commit in flight may land after the read."""
    store = check_store(store)
    check_txn(app_id, 0)
    return shard_app_versions(store, ShardMapStore(store, table_path).read_latest().shards, app_id)


def shard_app_versions(
    store: ObjectStore, shards: Sequence[Shard], app_id: str
) -> dict[int, int | None]:
    """:func:`table_app_versions` of the given ``shards`` (of any map version)."""

    def recorded(shard: Shard) -> int | None:
        try:
            stored = ManifestStore(store, shard.db_path).try_read_latest()
        except DatabaseDestroyed:
            return None
        return None if stored is None else stored.manifest.app_version(app_id)

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(shards)))) as pool:
        versions = list(pool.map(recorded, shards))
    return {shard.index: v for shard, v in zip(shards, versions, strict=True)}


def applied_message(txn: AppVersion, recorded: int | None) -> str:
    """Why a shard's commit of ``txn`` is SKIPPED: it records version ``recorded`` of the app."""
    return (
        f"app {txn.app_id!r} batch {txn.version} is already applied: the shard records "
        f"version {recorded}"
    )
