"""Orphans: the processes a killed cluster command left behind, in any folder (issue 40, item 7).

``cluster stop --dir D`` stops the cluster in ``D``; a ``make cluster`` or ``make cluster-test``
killed with SIGKILL (or run with another ``--dir``, or whose folder is gone) leaves processes no
folder's ``state.json`` vouches for. Every such process carries ``LAKEHOUSE_CLUSTER_DIR``
(:data:`~lakehouse_demo.cluster.processes.MARKER`); it is an orphan when its cluster has no live
supervisor:

* it carries an owner (:data:`~lakehouse_demo.cluster.processes.OWNER`, the cluster tests'
  pytest) and that owner is gone; or
* it carries none, no ``cluster start`` is running for its folder (:data:`LAUNCHER`), and it is
  neither a live service the folder's ``state.json`` records nor one of its children (same
  session, or the service among its ancestors): a ``make cluster`` left running on purpose is
  not an orphan.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lakehouse_demo.cluster.processes import (
    alive,
    ancestors,
    marked_everywhere,
    owner_alive,
)
from lakehouse_demo.cluster.settings import load_state, write_private_file

LAUNCHER = "launcher.json"
"""In a cluster's folder while ``cluster start`` runs: the launcher's pid and start time."""

Record = dict[str, object]


def record_launcher(dir: Path, record: Record) -> None:
    """Say that a ``cluster start`` (``record``: pid, start time) is working on ``dir``."""
    write_private_file(dir / LAUNCHER, json.dumps(record))


def clear_launcher(dir: Path, record: Record) -> None:
    """Remove ``dir``'s launcher record if it is ``record``'s."""
    path = dir / LAUNCHER
    try:
        if json.loads(path.read_text()) == record:
            path.unlink()
    except (OSError, ValueError):
        pass


def _launcher_running(dir: Path) -> bool:
    try:
        record = json.loads((dir / LAUNCHER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and alive(record)


def _service_pids(dir: Path) -> set[int]:
    """The live service processes ``dir``'s ``state.json`` records (none if it cannot be read)."""
    try:
        _, state = load_state(dir)
    except (OSError, ValueError, TypeError, KeyError):
        return set()
    return {int(str(r["pid"])) for r in state.values() if isinstance(r, dict) and alive(r)}


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def orphans(under: Path | None = None) -> dict[Path, list[Record]]:
    """The orphans of every cluster folder (only folders inside ``under`` when given), by folder.
    Each record: pid, start time, ``dir``, ``owner``."""
    by_dir: dict[Path, list[Record]] = {}
    for r in marked_everywhere():
        by_dir.setdefault(Path(str(r["dir"])), []).append(r)
    found: dict[Path, list[Record]] = {}
    for dir, records in sorted(by_dir.items()):
        if under is not None and not dir.is_relative_to(under):
            continue
        launcher = _launcher_running(dir)
        services = _service_pids(dir)
        left = []
        for r in records:
            pid = int(str(r["pid"]))
            owner = r.get("owner")
            if owner is not None:
                orphan = not owner_alive(str(owner))
            else:
                family = {pid, _session(pid), *ancestors(pid)}
                orphan = not launcher and not services.intersection(family)
            if orphan:
                left.append(r)
        if left:
            found[dir] = left
    return found


def describe(pid: int, width: int = 70) -> str:
    """``pid``'s command line, shortened to ``width`` characters."""
    try:
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return "?"
    cmd = cmd.strip()
    return cmd if len(cmd) <= width else cmd[: width - 3] + "..."
