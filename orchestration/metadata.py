"""How the maintenance assets describe a pass to an operator (docs/maintenance-assets.md): units in the
key names (``*_bytes`` and ``*_ms`` integers, so Dagster still plots them) and in a one-line
``summary``; times as ``MetadataValue.timestamp``; a boundary that is not set says why; GC per
kind as one table.

Also the asset attributes they share: groups, owners, tags and freshness policies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from slatedb_core import CompactionStats, GcStats
from slatedb_core.errors import DatabaseNotFound
from slatedb_core.gc import KINDS
from slatedb_core.health import DatabaseHealth, inspect_database
from slatedb_core.manifest.store import StoredManifest
from slatedb_core.store.objectstore import ObjectStore

MAINTENANCE = "slatedb_maintenance"
LAYOUT = "slatedb_layout"
EXPORT = "slatedb_export"

DEFAULT_OWNERS: tuple[str, ...] = ("team:data-platform",)
"""Owners of every asset unless the deployment names others (:func:`with_owners`)."""

KIND_TAG = "slatedb/kind"
"""Asset tag: which kind of maintenance (compaction, gc, checkpoints, export, rescaling)."""
SCOPE_TAG = "slatedb/partition"
"""Asset tag: what one partition is (database or table)."""

SUMMARY = "summary"
"""Metadata key of the one-line account of a pass, on every materialization and observation."""
SKIPPED = "skipped"
"""Metadata key (observations only) saying why a pass did nothing."""

NOT_SET = {
    "manifest": "not set yet: no GC pass has deleted a manifest",
    "wal": "not set yet: no GC pass has deleted a WAL SST",
    "compactions": "not set yet: no GC pass has deleted a compactions record",
    "compacted": "not set yet: no GC pass has deleted a compacted SST",
}
"""Why a durable GC boundary (``gc/<namespace>.boundary``, docs/gc.md) can be absent."""


def tags(kind: str, scope: str = "database") -> dict[str, str]:
    return {KIND_TAG: kind, SCOPE_TAG: scope}


def freshness(warn: dt.timedelta, fail: dt.timedelta) -> dg.FreshnessPolicy:
    """Stale when no partition was materialized for ``fail`` (warn after ``warn``): a stopped
    schedule or sensor shows on the asset instead of everything staying green. Skipped passes
    record no materialization, so a fleet of only destroyed databases also turns stale."""
    return dg.FreshnessPolicy.time_window(fail_window=fail, warn_window=warn)


def with_owners(
    assets: Sequence[dg.AssetsDefinition | dg.AssetSpec], owners: Sequence[str]
) -> list[dg.AssetsDefinition | dg.AssetSpec]:
    """The assets with other owners (the settings file's ``owners``); unchanged for the default."""
    chosen = list(owners)
    if tuple(chosen) == DEFAULT_OWNERS:
        return list(assets)
    return list(
        dg.map_asset_specs(lambda spec: spec.replace_attributes(owners=chosen), list(assets))
    )


def integer(value: int | None, why_none: str | None = None) -> dg.MetadataValue:
    """An int; None is ``null``, or the text ``why_none`` when there is an explanation."""
    if value is None:
        return dg.MetadataValue.null() if why_none is None else dg.MetadataValue.text(why_none)
    return dg.MetadataValue.int(int(value))


def nbytes(key: str, n: int) -> dict[str, dg.MetadataValue]:
    """A byte count as two entries: ``<stem>_bytes``, the integer Dagster plots, and beside it
    ``<stem>_size``, the same for people (``1.2 MiB``), since the UI shows a bare integer
    (issue 40, item 10)."""
    assert key.endswith("_bytes"), key
    return {key: integer(n), key.removesuffix("_bytes") + "_size": text(size(n))}


def millis(seconds: float) -> dg.MetadataValue:
    """A duration for a ``*_ms`` key."""
    return dg.MetadataValue.int(round(seconds * 1000))


def timestamp(seconds: float | None, why_none: str | None = None) -> dg.MetadataValue:
    if seconds is None:
        return integer(None, why_none)
    return dg.MetadataValue.timestamp(float(seconds))


def text(value: str) -> dg.MetadataValue:
    return dg.MetadataValue.text(value)


def size(n: int) -> str:
    """Bytes for people: ``912 B``, ``1.2 KiB``, ``3.4 MiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def count(n: int, noun: str) -> str:
    """``1 compaction``, ``3 compactions``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def age(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.0 days``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def not_live(health: DatabaseHealth) -> str | None:
    """Why a pass has nothing to work on in this database, or None when it is live."""
    if health.destroyed:
        return "database destroyed"
    if not health.initialized:
        return "database not initialized"
    return None


def skipped(
    context: dg.AssetExecutionContext, why: str, extra: Mapping[str, Any] | None = None
) -> dg.AssetObservation:
    """The record of a pass that had nothing to work on: an observation, not a materialization,
    so a destroyed or missing database never shows "Materialized"."""
    db = context.partition_key
    context.log.info(f"{db}: skipped, {why}")
    return dg.AssetObservation(
        asset_key=context.asset_key,
        partition=db,
        metadata={SUMMARY: text(f"skipped: {why}"), SKIPPED: text(why), **(extra or {})},
    )


def live_database(
    context: dg.AssetExecutionContext, store: ObjectStore, db: str
) -> tuple[StoredManifest, DatabaseHealth] | dg.AssetObservation:
    """The latest manifest and health of ``db``, or the :func:`skipped` record of a pass over a
    database that is missing, destroyed or not initialized: the one check of every pass that
    works only on a live database."""
    try:
        stored, health = inspect_database(store, db)
    except DatabaseNotFound:
        return skipped(context, "database not found")
    why = not_live(health)
    if why is not None:
        return skipped(context, why)
    return stored, health


def unchanged(
    context: dg.AssetExecutionContext, metadata: Mapping[str, dg.MetadataValue]
) -> dg.AssetObservation:
    """The record of a pass that found nothing to change (nothing to compact, nothing to delete,
    checkpoints up to date): an observation with the pass's figures, not a materialization, so a
    partition's last materialization stays the last pass that changed the database (issue 40,
    item 10). Filed under the partition, so its plots stay per database."""
    db = context.partition_key
    context.log.info(f"{db}: unchanged, {metadata[SUMMARY].value}")
    return dg.AssetObservation(asset_key=context.asset_key, partition=db, metadata=dict(metadata))


def shape(prefix: str, h: DatabaseHealth) -> dict[str, dg.MetadataValue]:
    return {
        f"{prefix}l0_ssts": integer(h.l0_ssts),
        f"{prefix}sorted_runs": integer(h.sorted_runs),
        **nbytes(f"{prefix}sst_bytes", h.sst_bytes),
        f"{prefix}ssts": integer(h.ssts),
    }


def compaction_metadata(
    before: DatabaseHealth,
    after: DatabaseHealth,
    stats: CompactionStats | None,
    l0_trigger: int,
    seconds: float,
) -> dict[str, dg.MetadataValue]:
    s = stats or CompactionStats()
    if s.compactions:
        summary = (
            f"compacted L0 {before.l0_ssts} -> {after.l0_ssts}, sorted runs "
            f"{before.sorted_runs} -> {after.sorted_runs} in {count(s.compactions, 'compaction')}, "
            f"{size(before.sst_bytes)} -> {size(after.sst_bytes)}, {duration(seconds)}"
        )
        if s.failed:
            summary += f"; {count(s.failed, 'compaction')} failed"
    else:
        summary = (
            f"nothing to compact: L0 {after.l0_ssts} (trigger {l0_trigger}), "
            f"{after.sorted_runs} sorted runs, {size(after.sst_bytes)}, {duration(seconds)}"
        )
    return {
        SUMMARY: text(summary),
        **shape("before_", before),
        **shape("", after),
        "compactions": integer(s.compactions),
        "failed_compactions": integer(s.failed),
        **nbytes("input_bytes", s.bytes_in),
        **nbytes("output_bytes", s.bytes_out),
        "input_rows": integer(s.rows_in),
        "output_rows": integer(s.rows_out),
        "manifest_id": integer(after.manifest_id),
        "compactor_epoch": integer(after.compactor_epoch),
        "duration_ms": millis(seconds),
    }


def gc_kinds_table(stats: GcStats) -> dg.MetadataValue:
    """One row per GC namespace: what this pass deleted there."""
    records = [
        dg.TableRecord(
            {
                "kind": kind,
                "deleted": stats.kind(kind).deleted,
                "freed_bytes": stats.kind(kind).bytes_freed,
                "freed": size(stats.kind(kind).bytes_freed),
                "failed": stats.kind(kind).failed,
            }
        )
        for kind in KINDS
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("kind", "string"),
            dg.TableColumn("deleted", "int"),
            dg.TableColumn("freed_bytes", "int"),
            dg.TableColumn("freed", "string"),
            dg.TableColumn("failed", "int"),
        ]
    )
    return dg.MetadataValue.table(records, schema)


BOUNDARY_UNITS = {
    "manifest": "manifest id",
    "wal": "WAL SST id",
    "compactions": "compactions record id",
}
"""What the id in each durable GC boundary counts (docs/gc.md)."""


def boundaries(durable: Mapping[str, int | None]) -> dict[str, dg.MetadataValue]:
    """The durable GC boundaries with their units: ``compacted`` holds ULID milliseconds (a
    time), the others an id of their kind, as text (``manifest id 41``): a bare integer said
    neither what it counts nor that it is not a quantity to plot (issue 40, item 10)."""
    out: dict[str, dg.MetadataValue] = {}
    for ns, value in durable.items():
        if ns == "compacted":
            out["compacted_boundary"] = timestamp(
                None if value is None else value / 1000, NOT_SET[ns]
            )
        elif value is None:
            out[f"{ns}_boundary"] = integer(None, NOT_SET.get(ns))
        else:
            out[f"{ns}_boundary"] = text(f"{BOUNDARY_UNITS.get(ns, ns + ' id')} {value}")
    return out


def gc_summary(stats: GcStats) -> str:
    parts = [f"{k} {stats.kind(k).deleted}" for k in KINDS if stats.kind(k).deleted]
    what = "deleted " + ", ".join(parts) if parts else "nothing to delete"
    if stats.failed:
        what += f" ({stats.failed} deletes failed, retried next pass)"
    if stats.expired_checkpoints_removed:
        what += f"; {stats.expired_checkpoints_removed} expired checkpoints removed"
    if stats.detached:
        what += f"; detached from {', '.join(stats.detached)}"
    if stats.data_gc_skipped:
        what += f"; WAL and compacted SSTs left alone: {stats.data_gc_skipped}"
    return (
        f"{what}, {size(stats.bytes_freed)} freed, {stats.total_requests} requests, "
        f"{duration(stats.duration_s)}"
    )
