"""Prometheus metrics of a fleet of databases and of this process's engine, read at scrape time
(issue 40, item 11; docs/operations.md "Prometheus and Grafana").

:class:`FleetCollector` scans the fleet when Prometheus scrapes (through a
:class:`~slatedb_core.fleet.FleetScanner`, so a quiet database costs one LIST), at most once per
``min_interval_s``: a faster scrape, or several Prometheus servers, get the last scan's figures.
Nothing runs between scrapes, so there is no background thread to die unnoticed; a scan that
fails leaves ``slatedb_fleet_scan_ok`` at 0 and the figures of the last good one. Databases are
discovered (one LIST of the whole prefix, :func:`slatedb_core.health.list_databases`) at the first
scrape and then every ``discover_interval_s``; a database once found stays listed, so one deleted
outside ``destroy`` shows as ``state="missing"`` instead of vanishing.

What the store tells of maintenance: the newest compacted SST's creation time (its ULID) is when
a compaction last wrote output; the ``compacted`` GC boundary (ULID milliseconds) is how far the
last GC pass of compacted SSTs reached. Whether a compaction or GC *run* failed is known only to
the orchestrator that ran it (Dagster's run records), not to the store: a failure that damaged
the database shows here as ``state="damaged"``.

:class:`EngineCollector` exports :mod:`slatedb_core.store.engine_counters`: the object-store
requests and bytes, block-cache hits and misses, and the durable-put latency of every database
this process opened. Labels are database paths; the store URL appears only redacted
(:func:`~slatedb_core.store.redact.redact_url`), in ``slatedb_fleet_info``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from slatedb_core.errors import InvalidArgument, SlateDBError
from slatedb_core.fleet.scanner import FleetScanner
from slatedb_core.fleet.status import STATES, DatabaseStatus
from slatedb_core.health import list_databases
from slatedb_core.layout import COMPACTED_BOUNDARY
from slatedb_core.store.engine_counters import DURATION_BUCKETS_S, snapshot
from slatedb_core.store.objectstore import OPS, ObjectStore
from slatedb_core.store.redact import redact_url

__all__ = ["ENGINE_METRICS", "FLEET_METRICS", "EngineCollector", "FleetCollector"]

FLEET_METRICS = (
    "slatedb_fleet_info",
    "slatedb_fleet_databases",
    "slatedb_fleet_scan_ok",
    "slatedb_fleet_scan_timestamp_seconds",
    "slatedb_fleet_scan_duration_seconds",
    "slatedb_fleet_scan_requests",
    "slatedb_database_state",
    "slatedb_database_manifest_id",
    "slatedb_database_l0_ssts",
    "slatedb_database_sorted_runs",
    "slatedb_database_sst_bytes",
    "slatedb_database_wal_backlog_ssts",
    "slatedb_database_manifest_lag",
    "slatedb_database_last_compaction_timestamp_seconds",
    "slatedb_database_last_compaction_age_seconds",
    "slatedb_database_gc_compacted_boundary_timestamp_seconds",
    "slatedb_database_gc_boundary",
)
"""The names :class:`FleetCollector` exports (as Prometheus shows them)."""
ENGINE_METRICS = (
    "slatedb_store_requests_total",
    "slatedb_store_bytes_total",
    "slatedb_block_cache_hits_total",
    "slatedb_block_cache_misses_total",
    "slatedb_durable_put_seconds_bucket",
    "slatedb_durable_put_seconds_count",
    "slatedb_durable_put_seconds_sum",
)
"""The names :class:`EngineCollector` exports (as Prometheus shows them)."""


@dataclass
class _Scan:
    statuses: dict[str, DatabaseStatus] = field(default_factory=dict)
    ok: bool = False
    at_s: float = 0.0
    """Wall-clock time of the last scan (0: none yet)."""
    duration_s: float = 0.0
    requests: int = 0


class FleetCollector(Collector):
    """The fleet's figures per database (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        prefix: str = "",
        min_interval_s: float = 15.0,
        discover_interval_s: float = 300.0,
        concurrency: int = 16,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ) -> None:
        for name, value in (
            ("min_interval_s", min_interval_s),
            ("discover_interval_s", discover_interval_s),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise InvalidArgument(f"{name} must be a number >= 0, got {value!r}")
        self._store = store
        self._prefix = prefix
        self._min_interval_s = float(min_interval_s)
        self._discover_interval_s = float(discover_interval_s)
        self._scanner = FleetScanner(store, concurrency=concurrency, now=now)
        self._clock, self._now = clock, now
        self._lock = threading.Lock()
        self._known: list[str] = []
        self._discovered_at: float | None = None
        self._scanned_at: float | None = None
        self._last = _Scan()

    def refresh(self) -> _Scan:
        """The last scan, scanning first when it is older than ``min_interval_s``."""
        with self._lock:  # concurrent scrapes wait for one scan
            t = self._clock()
            if self._scanned_at is not None and t - self._scanned_at < self._min_interval_s:
                return self._last
            self._scanned_at = t
            started = time.monotonic()
            try:
                if self._discovered_at is None or t - self._discovered_at >= (
                    self._discover_interval_s
                ):
                    found = list_databases(self._store, self._prefix)
                    self._known = sorted(set(self._known) | set(found))
                    self._discovered_at = t
                statuses = self._scanner.scan(self._known)
            except SlateDBError:  # the store is unreachable: keep the last figures
                self._last = _Scan(self._last.statuses, False, self._last.at_s)
                return self._last
            self._last = _Scan(
                statuses,
                True,
                self._now(),
                time.monotonic() - started,
                self._scanner.last_scan_requests,
            )
            return self._last

    def describe(self) -> list[Metric]:
        return []  # no scan at registration (prometheus_client calls collect otherwise)

    def collect(self) -> Iterator[Metric]:
        scan = self.refresh()
        now_s = self._now()
        info = InfoMetricFamily("slatedb_fleet", "The store this exporter scans (redacted URL).")
        info.add_metric([], {"store": redact_url(self._store.url), "prefix": self._prefix})
        yield info
        yield GaugeMetricFamily(
            "slatedb_fleet_databases", "Databases known to the exporter.", len(scan.statuses)
        )
        yield GaugeMetricFamily(
            "slatedb_fleet_scan_ok", "1 when the last scan read the store.", int(scan.ok)
        )
        yield GaugeMetricFamily(
            "slatedb_fleet_scan_timestamp_seconds",
            "When the figures were read (Unix time; 0: never).",
            scan.at_s,
        )
        yield GaugeMetricFamily(
            "slatedb_fleet_scan_duration_seconds", "How long the last scan took.", scan.duration_s
        )
        yield GaugeMetricFamily(
            "slatedb_fleet_scan_requests", "Store requests the last scan made.", scan.requests
        )
        db = ["database"]
        state = GaugeMetricFamily(
            "slatedb_database_state",
            "1 for the database's state (live, destroyed, uninitialized, missing, damaged, "
            "unreachable), 0 for the others.",
            labels=[*db, "state", "error_kind"],
        )
        g = {
            name: GaugeMetricFamily(f"slatedb_database_{name}", text, labels=db)
            for name, text in (
                ("manifest_id", "The latest manifest's id."),
                ("l0_ssts", "SSTs in L0."),
                ("sorted_runs", "Sorted runs (compacted levels)."),
                ("sst_bytes", "Bytes of every SST the latest manifest lists."),
                ("wal_backlog_ssts", "WAL SSTs a recovering writer would replay."),
                ("manifest_lag", "Manifest versions between the latest and the oldest pinned."),
                (
                    "last_compaction_timestamp_seconds",
                    "Creation time (its ULID) of the newest compacted SST: when a compaction "
                    "last wrote output. Absent before the first compaction.",
                ),
                (
                    "last_compaction_age_seconds",
                    "Seconds since the newest compacted SST was created.",
                ),
                (
                    "gc_compacted_boundary_timestamp_seconds",
                    "The compacted-SST GC boundary (ULID time): how far GC has collected.",
                ),
            )
        }
        boundary = GaugeMetricFamily(
            "slatedb_database_gc_boundary",
            "A GC boundary's id (manifest, wal, compactions): what GC has collected up to.",
            labels=[*db, "namespace"],
        )
        for path, status in scan.statuses.items():
            for s in STATES:
                kind = status.error_kind or "" if s == status.state else ""
                state.add_metric([path, s, kind], int(s == status.state))
            h = status.health
            if h is not None:
                g["manifest_id"].add_metric([path], h.manifest_id)
                g["l0_ssts"].add_metric([path], h.l0_ssts)
                g["sorted_runs"].add_metric([path], h.sorted_runs)
                g["sst_bytes"].add_metric([path], h.sst_bytes)
                g["wal_backlog_ssts"].add_metric([path], h.wal_backlog)
                g["manifest_lag"].add_metric([path], h.manifest_lag)
            compacted = _last_compaction_s(status)
            if compacted is not None:
                g["last_compaction_timestamp_seconds"].add_metric([path], compacted)
                g["last_compaction_age_seconds"].add_metric([path], max(0.0, now_s - compacted))
            for ns, value in status.boundaries.items():
                if value is None:
                    continue
                if ns == COMPACTED_BOUNDARY:
                    g["gc_compacted_boundary_timestamp_seconds"].add_metric([path], value / 1000)
                else:
                    boundary.add_metric([path, ns], value)
        yield state
        yield from g.values()
        yield boundary


def _last_compaction_s(status: DatabaseStatus) -> float | None:
    """The newest compacted SST's ULID time (seconds), None without a compacted SST."""
    ms = status.last_compacted_ms
    return None if ms is None else ms / 1000


class EngineCollector(Collector):
    """This process's engine counters (:mod:`slatedb_core.store.engine_counters`)."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = snapshot()
        requests = CounterMetricFamily(
            "slatedb_store_requests", "Object-store requests by kind.", labels=["op"]
        )
        for op, n in sorted(({**dict.fromkeys(OPS, 0), **snap.requests}).items()):
            requests.add_metric([op], n)
        yield requests
        nbytes = CounterMetricFamily(
            "slatedb_store_bytes", "Object-store bytes read and written.", labels=["direction"]
        )
        for direction, n in sorted(({"read": 0, "written": 0, **snap.bytes}).items()):
            nbytes.add_metric([direction], n)
        yield nbytes
        yield CounterMetricFamily(
            "slatedb_block_cache_hits", "Block-cache hits.", value=snap.cache_hits
        )
        yield CounterMetricFamily(
            "slatedb_block_cache_misses", "Block-cache misses.", value=snap.cache_misses
        )
        buckets: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(
            (*DURATION_BUCKETS_S, float("inf")), snap.durable_put_buckets, strict=True
        ):
            total += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
        yield HistogramMetricFamily(
            "slatedb_durable_put_seconds",
            "Seconds a durable write waited for its WAL SST to land.",
            buckets=buckets,
            sum_value=snap.durable_put_sum_s,
        )
