"""The peak resident memory of the Python workers of this driver's local Spark session, read from
``/proc`` (Linux): what a benchmark or a test measures to see a task's memory (issue 42, goal 3).

Spark forks each Python worker from a daemon (``pyspark.daemon``, here
:mod:`spark_jobs.worker_daemon`), both descendants of the JVM that this driver process started. A
worker is a process under this driver whose parent is a Python process too (the daemon). The
kernel keeps each process's peak resident set (``VmHWM`` in ``/proc/<pid>/status``); writing ``5``
to ``/proc/<pid>/clear_refs`` resets it to the current RSS. :class:`WorkerPeak` resets every
worker's peak when entered and reads them when left, so a reused worker's earlier tasks do not
count, and a worker forked meanwhile is counted from its fork (its peak includes the pages it
shares with the daemon: pyarrow, pandas and slatedb_core, imported once there). A worker that
exits before the end is covered by sampling the peaks every ``interval_s`` (with
``spark.python.worker.reuse=false`` each task runs in a worker of its own, forked for it: the
cleanest per-task figure, no memory a reused worker kept from an earlier task).

Only for sessions whose executors run on this machine (``local[...]``); elsewhere it finds no
workers and reports 0.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from types import TracebackType

__all__ = ["WorkerPeak", "worker_pids"]


def _status(pid: int) -> tuple[int, str]:
    """(parent pid, command name) of ``pid``; (-1, "") when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return -1, ""
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    return int(raw[raw.rindex(")") + 2 :].split()[1]), name


def worker_pids(root: int | None = None) -> list[int]:
    """The Python workers under ``root`` (default: this process) that run tasks: Python
    processes whose parent is a Python process below ``root``, other than a data source's
    planning workers."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid, name = _status(int(entry))
            if ppid >= 0:
                parents[int(entry)], names[int(entry)] = ppid, name
    below: set[int] = set()
    frontier = [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        pid = frontier.pop()
        for child in children.get(pid, []):
            if child not in below:
                below.add(child)
                frontier.append(child)
    return sorted(
        pid
        for pid in below
        if names[pid].startswith("python")
        and parents[pid] in below
        and names.get(parents[pid], "").startswith("python")
        and not _planner(parents[pid])
    )


def _planner(daemon: int) -> bool:
    """Whether ``daemon`` forks the planning workers of Python data sources (started as
    ``pyspark.daemon pyspark.sql.worker.<step>``: creating the source, planning a read or a
    write, pushing filters), which run no task: their imports are not a task's memory."""
    try:
        with open(f"/proc/{daemon}/cmdline", "rb") as f:
            return b"pyspark.sql.worker." in f.read()
    except OSError:
        return False


def _field_kib(pid: int, name: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(name):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


@dataclass
class WorkerPeak:
    """``with WorkerPeak() as peak: ...`` then ``peak.max_bytes``: the largest peak RSS of any one
    Python worker of the session while the block ran (see the module doc)."""

    interval_s: float = 0.02
    peaks: dict[int, int] = field(default_factory=dict)
    """Bytes by worker pid."""
    starts: dict[int, int] = field(default_factory=dict)
    """Each worker's RSS when the block began (one forked meanwhile: its daemon's then)."""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def max_bytes(self) -> int:
        return max(self.peaks.values(), default=0)

    @property
    def growth_bytes(self) -> int:
        """The most any one worker grew above its RSS at the start: what the block's tasks
        took (a reused worker's memory kept from earlier tasks is not counted, and may hide
        some of what they took: see the module doc)."""
        return max((p - self.starts.get(pid, p) for pid, p in self.peaks.items()), default=0)

    def _note(self, pid: int, size: int) -> None:
        if pid not in self.starts:
            parent, _ = _status(pid)
            self.starts[pid] = _field_kib(parent, "VmRSS:") * 1024 if parent > 0 else size
        if size > self.peaks.get(pid, 0):
            self.peaks[pid] = size

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            for pid in worker_pids():
                self._note(pid, _field_kib(pid, "VmHWM:") * 1024)

    def __enter__(self) -> WorkerPeak:
        for pid in worker_pids():
            _reset(pid)
            self.starts[pid] = _field_kib(pid, "VmRSS:") * 1024
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for pid in worker_pids():
            self._note(pid, _field_kib(pid, "VmHWM:") * 1024)
