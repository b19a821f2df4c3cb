"""Dagster's default run launcher, plus a health check of its run workers, so that a run whose
worker died (the daemon's host or container killed, an OOM kill) ends FAILED instead of staying
STARTED forever, and the instance's run retries launch it again.

Dagster's ``DefaultRunLauncher`` starts each run as a process of the code server on the daemon's
host, and reports "Started process for run (pid: N)" as the run's first engine event. It cannot be
asked whether that process is still alive, so Dagster's run monitoring skips its runs. This
launcher answers from ``/proc``: the recorded pid must exist, must not be a zombie, and must have
started no later than the run did (a pid reused by a newer process does not count). That holds
only where the monitoring daemon sees the run workers' processes: the same host, or the same
container as the daemon, which is what infra/docker-compose.yml and ``make cluster`` run.

A compaction or GC pass killed half-way is safe to fail and retry: the next pass fences the dead
one (writer and compactor epochs, RFC 0001 and docs/maintenance-assets.md), and a failed run
never reported success.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus

STARTED_PROCESS = "Started process for run"
START_SLACK_S = 2.0
"""How much later than the run's recorded start the worker process may seem to start (clock
ticks round the process start time down; the run's start is written after the process starts)."""


def run_worker_pid(instance: object, run_id: str) -> int | None:
    """The pid the run's (latest) worker reported, from its engine events."""
    logs = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)  # type: ignore[attr-defined]
    pid: int | None = None
    for entry in logs:
        event = entry.dagster_event
        if event is None or not (entry.message or "").startswith(STARTED_PROCESS):
            continue
        data = event.engine_event_data
        value = data.metadata.get("pid") if data is not None else None
        text = getattr(value, "value", None)
        if isinstance(text, str) and text.isdigit():
            pid = int(text)
    return pid


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start in clock ticks since boot) of ``pid``, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) is in parentheses and may hold spaces
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def process_start(pid: int) -> tuple[float, str] | None:
    """(start time as a Unix timestamp, state letter) of ``pid``, or None if there is none."""
    found = _stat(pid)
    if found is None:
        return None
    state, start_ticks = found
    return _boot_time() + start_ticks / os.sysconf("SC_CLK_TCK"), state


def judge_worker(
    pid: int | None, run_started_at: float | None, known_ticks: int | None = None
) -> tuple[CheckRunHealthResult, int | None]:
    """The health of the run worker ``pid``, and its start in ticks since boot when it is
    running. ``known_ticks`` (from an earlier check of the same run) identifies the process
    without the wall clock: a Unix start time moves with the clock (``btime`` follows every
    step of it), so after a step forward a live worker would seem to have started after its
    run."""
    if pid is None:
        # the worker reports its pid before the run can be STARTED: nothing to judge yet
        return CheckRunHealthResult(WorkerStatus.RUNNING, "no run worker pid reported yet"), None
    found = _stat(pid)
    if found is None:
        return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is gone"), None
    state, ticks = found
    if state in ("Z", "X"):
        return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is dead"), None
    if known_ticks is not None:
        newer = ticks != known_ticks
    else:
        started = _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
        newer = run_started_at is not None and started > run_started_at + START_SLACK_S
    if newer:
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"run worker process {pid} is gone (the pid now belongs to a newer process)",
        ), None
    return CheckRunHealthResult(WorkerStatus.RUNNING), ticks


def worker_health(pid: int | None, run_started_at: float | None) -> CheckRunHealthResult:
    return judge_worker(pid, run_started_at)[0]


SEEN_RUNS = 4096
"""How many runs' worker identities a launcher remembers (oldest forgotten first)."""


class LocalRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` whose run workers the run monitoring daemon can check
    (``run_monitoring`` in infra/dagster.yaml). The first check of a run that finds its worker
    alive remembers the worker's start (ticks since boot); later checks compare with that."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        instance = self._instance
        seen: dict[str, tuple[int, int]] = self.__dict__.setdefault("_workers_seen", {})
        record = instance.get_run_record_by_id(run.run_id)
        started_at = record.start_time if record is not None else None
        pid = run_worker_pid(instance, run.run_id)
        known = seen.get(run.run_id)
        result, ticks = judge_worker(
            pid, started_at, known[1] if known is not None and known[0] == pid else None
        )
        seen.pop(run.run_id, None)
        if pid is not None and ticks is not None:
            seen[run.run_id] = (pid, ticks)
            while len(seen) > SEEN_RUNS:
                seen.pop(next(iter(seen)))
        return result
