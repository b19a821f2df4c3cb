"""Start ``dagster dev`` in its own process group on 127.0.0.1, wait for it, and stop every process
it started. Shared by ``devtools.screenshot`` and the end-to-end test of ``dagster dev``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[1]
DAGSTER = Path(sys.executable).with_name("dagster")

T = TypeVar("T")

LOCATIONS = """
{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }
"""


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment contains ``marker`` (our DAGSTER_HOME): catches
    children that left our process group too."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def write_dagster_home(home: Path) -> Path:
    """A DAGSTER_HOME whose ``dagster.yaml`` turns off the UI's "Join the Dagster community" dialog
    and telemetry (unless the file already says otherwise); returns the file's path.

    The dialog (dagster-webserver 1.13's "communityNux") opens a second after the first page loads
    when the page is served from 127.0.0.1 or localhost, the browser's localStorage has no
    ``communityNux`` entry, and GraphQL's ``shouldShowNux`` is true: the instance's ``nux.enabled``
    setting (default true) and no ``.nux/nux.yaml`` under DAGSTER_HOME (written when someone
    dismisses it). ``nux: {enabled: false}`` turns it off for every browser, so a fresh profile
    (a headless screenshot) does not see it either. Settings already in the file are kept."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    loaded = yaml.safe_load(path.read_text()) if path.exists() else None
    if loaded is not None and not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    config: dict[str, Any] = loaded or {}
    for section, force in (("telemetry", False), ("nux", True)):
        entry = config.get(section)
        entry = dict(entry) if isinstance(entry, dict) else {}
        if force or "enabled" not in entry:
            entry["enabled"] = False
        config[section] = entry
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_dagster_dev(
    port: int, env: Mapping[str, str], log: IO[bytes], workspace: str = "workspace.yaml"
) -> subprocess.Popen[bytes]:
    """``dagster dev -w workspace.yaml -h 127.0.0.1 -p port`` in the repository root, in a new
    session (its own process group, so one killpg reaches webserver, daemon and code servers)."""
    if not DAGSTER.exists():
        raise FileNotFoundError(
            f"{DAGSTER} not found: install the orchestration extra (pip install -e '.[orchestration]')"
        )
    return subprocess.Popen(
        [str(DAGSTER), "dev", "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=dict(env),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_process_group(proc: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    """SIGTERM the process group led by ``proc``, SIGKILL it if it is not gone in ``timeout_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=timeout_s)
    try:  # the leader may be gone while others in its group still run
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_dagster_dev(
    proc: subprocess.Popen[bytes], marker: str, timeout_s: float = 10.0
) -> list[int]:
    """Stop ``dagster dev`` and everything it started; returns the pids that ignored SIGTERM and
    had to be SIGKILLed: [] when everything shut down cleanly.

    1. SIGTERM the process group (``dagster dev`` stops its webserver, daemon and code servers),
       SIGKILL the group after ``timeout_s``.
    2. Processes that still have ``marker`` (the DAGSTER_HOME path) in their environment get
       ``timeout_s`` to go, then SIGTERM of their own and ``timeout_s`` more, then SIGKILL. Step 2's
       SIGTERM is needed: on shutdown, dagster dev's code-server manager can see its code server
       exit (it got the group's SIGTERM) and start a new one, in a session of its own, before the
       manager itself stops. That process never saw a signal, and it exits cleanly on SIGTERM.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    if not _wait_gone(marker, timeout_s):
        _signal_all(processes_with(marker), signal.SIGTERM)
        _wait_gone(marker, timeout_s)
    left = processes_with(marker)
    _signal_all(left, signal.SIGKILL)
    return left


def _wait_gone(marker: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while processes_with(marker):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def wait_for(
    predicate: Callable[[], T | None], what: str, timeout_s: float, proc: subprocess.Popen[Any]
) -> T:
    """Poll ``predicate`` until it returns something truthy; RuntimeError if ``proc`` exits first,
    TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dagster dev exited with {proc.returncode} waiting for {what}")
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what} (last error: {last})")


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    if "errors" in payload:
        raise RuntimeError(f"GraphQL errors: {payload['errors']}")
    return payload["data"]


def server_up(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/server_info", timeout=5) as response:
        return bool(response.status == 200)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Prepare a DAGSTER_HOME for dagster dev (make ui): telemetry and the "
        "'Join the Dagster community' dialog off, other settings in its dagster.yaml kept."
    )
    p.add_argument("home", type=Path, help="the DAGSTER_HOME directory (created if missing)")
    a = p.parse_args(argv)
    print(f"wrote {write_dagster_home(a.home)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
