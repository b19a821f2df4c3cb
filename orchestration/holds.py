"""Which databases a schedule may launch a maintenance run for: the fleet sensor's hold after a
failure with an alert, applied to the schedules by the same rule.

The hold is :func:`orchestration.fleet_state.hold` over what fleet_sensor remembers of each
database: its last completed tick's memory (:func:`orchestration.fleet_memory.latest`), with the
runs that finished since folded in from the instance's run history exactly as a sensor tick
folds them. So a compaction that failed with Fenced, CorruptionError or BoundaryMissing holds
back the schedule's compactions as it holds back the sensor's (until the L0 it failed on changes
or a run launched by hand succeeds), whether the sensor, a schedule or an operator launched the
failing run, and whether or not the sensor is running (a run from the Launchpad carries no
L0 tag: it holds for ``ALERT_HOLD_S`` or until a run by hand succeeds). GC, checkpoint refresh and export runs
that failed with an alert are held for ``ALERT_HOLD_S`` or until a run by hand succeeds.

Launchers routed through it: fleet_sensor (compaction, checkpoint refresh) and the compaction,
gc, checkpoint and export schedules. ``rescaling_schedule`` works on table partitions, which
this per-database memory does not cover; ``health_check_job`` only reads and is launched by hand.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import dagster as dg

from orchestration import fleet_memory
from orchestration.fleet_sensor import fold_maintenance_runs
from orchestration.fleet_state import Memory, hold
from slatedb_core import DatabaseStatus


def held_back(
    instance: dg.DagsterInstance,
    kind: str,
    statuses: Mapping[str, DatabaseStatus],
    now: float | None = None,
) -> dict[str, str]:
    """Database -> why its ``kind`` run (compaction, gc, checkpoint, export) is held back and
    what lifts the hold, for the databases in ``statuses`` that are held. Reads only: the
    sensor's memory is not written."""
    now = time.time() if now is None else now
    memory = fleet_memory.latest(instance)
    fold_maintenance_runs(instance, memory, now)
    out: dict[str, str] = {}
    for db, status in statuses.items():
        why = hold(kind, status, memory.dbs.get(db) or Memory(), now)
        if why is not None:
            out[db] = why
    return out
