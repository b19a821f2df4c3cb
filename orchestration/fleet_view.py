"""The operator's page: ``slatedb_fleet``, one unpartitioned asset whose materializations (made by
the fleet sensor) carry a row per database and a headline naming the ones that need attention.

* ``fleet`` (a table): state, L0 against its threshold, WAL backlog, manifest lag and what pins
  it, the last compaction and GC with their result and time, the last boundary advance and the
  latest alert. Databases that need attention come first; past ``fleet_table_rows`` rows the rest
  (all healthy) are counted, not listed, so the page stays usable at 10,000 databases.
* ``headline`` (markdown) and ``databases_*`` counts, which Dagster plots over time.
* Per-database trends: ``<database>/l0_ssts``, ``<database>/manifests`` and
  ``<database>/sst_bytes`` for the databases listed in ``trend_databases`` (or the first
  ``trend_max_databases`` live ones), one plot per key in the asset's Plots tab.

See docs/operations.md for how to read it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from orchestration.fleet_state import ERROR, Finding, Memory, state_of
from orchestration.markdown import markdown_literal
from slatedb_core import DatabaseStatus
from slatedb_core.health import BOUNDARY_NAMESPACES

FLEET_KEY = dg.AssetKey("slatedb_fleet")
FLEET_GROUP = "slatedb_fleet"

fleet_asset = dg.AssetSpec(
    FLEET_KEY,
    group_name=FLEET_GROUP,
    kinds={"slatedb"},
    owners=["team:data-platform"],
    tags={"slatedb/kind": "fleet"},
    description=(
        "Health of every managed database at a glance, refreshed by fleet_sensor: state, L0 "
        "against its threshold, WAL backlog, manifest lag and what pins it, the last compaction "
        "and GC, the last GC boundary advance and the latest alert; a headline names the "
        "databases that need attention. Stale when the sensor stops (freshness policy)."
    ),
    freshness_policy=dg.FreshnessPolicy.time_window(
        fail_window=dt.timedelta(minutes=30), warn_window=dt.timedelta(minutes=10)
    ),
)


@dataclass(frozen=True, slots=True)
class FleetRow:
    database: str
    state: str
    severity: int
    """0: fine, 1: a warning, 2: an error (damaged, missing objects, boundaries)."""
    attention: str
    l0_ssts: int | None
    wal_backlog: int | None
    manifest_lag: int | None
    pinned_by: str
    last_compaction: str
    last_gc: str
    boundary_advanced: str
    latest_alert: str
    manifests: int | None
    sst_bytes: int | None


def _when(now: float, t: float | None) -> str:
    """An absolute time: a materialization is read long after it was made, when "3 min ago"
    would be wrong (the headline and skip reasons, read at once, say how long ago)."""
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M:%S UTC")


def _run(now: float, last: list[object] | None) -> str:
    if not last:
        return "never"
    status, end, alert = last[0], last[1], last[2]
    word = {"SUCCESS": "succeeded", "FAILURE": "failed", "CANCELED": "canceled"}.get(
        str(status), str(status).lower()
    )
    why = f" ({alert})" if alert else ""
    return f"{word}{why}, {_when(now, float(end) if isinstance(end, (int, float)) else None)}"


def fleet_row(
    status: DatabaseStatus,
    retired: frozenset[str],
    memory: Memory,
    checks: Sequence[Finding],
    now: float,
) -> FleetRow:
    state = state_of(status, retired)
    failing = [f for f in checks if not f.passed]
    severity = max((2 if f.severity == ERROR else 1 for f in failing), default=0)
    if state in ("missing", "unreachable", "invalid") and status.error:
        severity = 2
    attention = "; ".join(f.description.split(": ", 1)[-1] for f in failing)
    if state in ("missing", "unreachable", "invalid") and status.error:
        attention = f"{status.error_kind}: {status.error}"
    elif state == "missing" and not failing:  # never seen with a manifest (a typo, not created)
        severity, attention = 1, "no database at this path (no manifest)"
    # A run that failed with an alert (a corrupt SST only the compactor reads, a fence) is an
    # error until a later run of that kind succeeds: the checks only see what exists.
    # A compaction's stands while the L0 SSTs it was requested on are all there (as its hold).
    l0_same = memory.requested_l0 is None or set(memory.requested_l0) <= set(status.l0_sst_ids)
    alerted = [
        f"last {kind} run failed with {last[2]}"
        for kind, last, standing in (
            ("compaction", memory.compaction, l0_same),
            ("GC", memory.gc, True),
        )
        if last and last[0] == "FAILURE" and last[2] and standing
    ]
    if alerted:
        severity = 2
        attention = "; ".join([*alerted, *([attention] if attention else [])])
    h = status.health
    pinned = ""
    if status.pinned_by is not None:
        cp = status.pinned_by
        who = cp.name or f"unnamed {cp.id}"  # a reader's or clone's: its id is what to act on
        pinned = f"{who} at manifest {cp.manifest_id}"
    manifests = None
    if h is not None:
        floor = status.boundaries.get(BOUNDARY_NAMESPACES[0]) or 0
        manifests = max(1, h.manifest_id - floor)
    alert = ""
    if memory.alert:
        kind, t, msg = memory.alert[0], memory.alert[1], memory.alert[2]
        text = str(msg)
        shown = text if text.startswith(f"{kind}:") else f"{kind}: {text}"
        alert = f"{shown}, {_when(now, t)}"
    elif state == "damaged":
        alert = f"{status.error_kind}: {status.error}"
    return FleetRow(
        database=status.path,
        state=state,
        severity=severity,
        attention=attention,
        l0_ssts=None if h is None else h.l0_ssts,
        wal_backlog=None if h is None else h.wal_backlog,
        manifest_lag=None if h is None else h.manifest_lag,
        pinned_by=pinned,
        last_compaction=_run(now, memory.compaction),
        last_gc=_run(now, memory.gc),
        boundary_advanced=_when(now, memory.boundary_advanced_at),
        latest_alert=alert,
        manifests=manifests,
        sst_bytes=None if h is None else h.sst_bytes,
    )


_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("database", "string"),
        dg.TableColumn(
            "state", "string", description="live, retired, destroyed, damaged, missing, invalid"
        ),
        dg.TableColumn("needs_attention", "string", description="failing checks, worst first"),
        dg.TableColumn("l0_ssts", "string", description="L0 SSTs / l0_max_ssts"),
        dg.TableColumn("wal_backlog", "string", description="WAL SSTs to replay / wal_backlog_max"),
        dg.TableColumn("manifest_lag", "string", description="versions behind / manifest_lag_max"),
        dg.TableColumn(
            "lag_pinned_by", "string", description="checkpoint holding the oldest manifest"
        ),
        dg.TableColumn("last_compaction", "string"),
        dg.TableColumn("last_gc", "string"),
        dg.TableColumn("boundary_advanced", "string", description="last GC boundary advance"),
        dg.TableColumn("latest_alert", "string"),
    ]
)


def _of(value: int | None, limit: int) -> str:
    return "" if value is None else f"{value} / {limit}"


def headline(rows: Sequence[FleetRow], shown: int = 8) -> str:
    """The Markdown line naming the databases that need attention (``headline`` metadata and the
    materialization's description): every stored string in it (database path, state, the
    attention text quoting errors) through :func:`markdown_literal`."""
    bad = sorted((r for r in rows if r.severity), key=lambda r: (-r.severity, r.database))
    if not bad:
        return f"All {len(rows)} databases are healthy."
    parts = [
        f"{markdown_literal(r.database, code=True)} "
        f"({markdown_literal(f'{r.state}: {r.attention}')})"
        for r in bad[:shown]
    ]
    more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
    verb = "needs" if len(bad) == 1 else "need"
    return f"**{len(bad)} of {len(rows)} databases {verb} attention**: " + "; ".join(parts) + more


def fleet_metadata(
    rows: Sequence[FleetRow],
    *,
    l0_max: int,
    wal_max: int,
    lag_max: int,
    table_rows: int,
    trend_dbs: Sequence[str],
) -> dict[str, dg.MetadataValue]:
    ordered = sorted(rows, key=lambda r: (-r.severity, r.state != "live", r.database))
    listed = ordered[:table_rows]
    records = [
        dg.TableRecord(
            {
                "database": r.database,
                "state": r.state,
                "needs_attention": r.attention,
                "l0_ssts": _of(r.l0_ssts, l0_max),
                "wal_backlog": _of(r.wal_backlog, wal_max),
                "manifest_lag": _of(r.manifest_lag, lag_max),
                "lag_pinned_by": r.pinned_by,
                "last_compaction": r.last_compaction,
                "last_gc": r.last_gc,
                "boundary_advanced": r.boundary_advanced,
                "latest_alert": r.latest_alert,
            }
        )
        for r in listed
    ]
    states: dict[str, int] = {}
    for r in rows:
        states[r.state] = states.get(r.state, 0) + 1
    md: dict[str, dg.MetadataValue] = {
        "headline": dg.MetadataValue.md(headline(rows)),
        "fleet": dg.MetadataValue.table(records, _SCHEMA),
        "databases": dg.MetadataValue.int(len(rows)),
        "databases_needing_attention": dg.MetadataValue.int(sum(1 for r in rows if r.severity)),
        "databases_with_errors": dg.MetadataValue.int(sum(1 for r in rows if r.severity == 2)),
    }
    for state in (
        "live",
        "retired",
        "destroyed",
        "damaged",
        "missing",
        "uninitialized",
        "unreachable",
        "invalid",
    ):
        md[f"databases_{state}"] = dg.MetadataValue.int(states.get(state, 0))
    if len(rows) > len(listed):
        md["rows_not_listed"] = dg.MetadataValue.text(
            f"{len(rows) - len(listed)} healthy databases are counted but not listed "
            f"(fleet_table_rows = {table_rows})"
        )
    by_name = {r.database: r for r in rows}
    for db in trend_dbs:
        trend = by_name.get(db)
        if trend is None or trend.l0_ssts is None:
            continue
        md[f"{db}/l0_ssts"] = dg.MetadataValue.int(trend.l0_ssts)
        md[f"{db}/manifests"] = dg.MetadataValue.int(trend.manifests or 0)
        md[f"{db}/sst_bytes"] = dg.MetadataValue.int(trend.sst_bytes or 0)
    return md


def trend_databases(rows: Sequence[FleetRow], listed: Sequence[str], limit: int) -> list[str]:
    """The databases with per-database trend keys: the configured list, else the first ``limit``
    live ones by name (a stable set, so each plot keeps its line)."""
    if listed:
        return list(listed)
    return sorted(r.database for r in rows if r.state == "live")[:limit]


def digest(rows: Sequence[FleetRow]) -> str:
    """What the view shows, without the relative times, to materialize only on change."""
    h = hashlib.sha1()
    for r in sorted(rows, key=lambda r: r.database):
        h.update(
            repr(
                (
                    r.database,
                    r.state,
                    r.severity,
                    r.attention,
                    r.l0_ssts,
                    r.wal_backlog,
                    r.manifest_lag,
                    r.pinned_by,
                    r.last_compaction,
                    r.last_gc,
                    r.latest_alert,
                    r.boundary_advanced,
                    r.manifests,
                    r.sst_bytes,
                )
            ).encode()
        )
    return h.hexdigest()[:16]
