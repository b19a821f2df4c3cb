"""Garbage collection: old manifests, WAL SSTs, compacted SSTs and compactions records.

Boundary-first for the sequenced namespaces (SlateDB RFC 0026), retention by the latest manifest and the
manifests its unexpired checkpoints pin (SlateDB RFC 0004). :mod:`slatedb_core.gc.collector` holds
the order of a pass; each kind of object it collects has a module of its own.
"""

from slatedb_core.compactor.compactions import in_flight_output_ids
from slatedb_core.gc.collector import Collector
from slatedb_core.gc.service import GarbageCollector, run_gc_once
from slatedb_core.gc.stats import KINDS, GcStats, Kind, KindStats

__all__ = [
    "KINDS",
    "Collector",
    "GarbageCollector",
    "GcStats",
    "Kind",
    "KindStats",
    "in_flight_output_ids",
    "run_gc_once",
]
