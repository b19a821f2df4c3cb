"""The processes ``make cluster`` starts: each in its own session (so stopping one stops its
children too: Spark executors and their Python workers, Dagster's code servers and run workers),
its output appended to one log file, and identified afterwards by pid *and* start time, so that
``make cluster-stop`` never signals a process it did not start (a pid can be reused).

Every way out (issue 40, item 7): each service carries ``LAKEHOUSE_CLUSTER_DIR=<the cluster's
folder>`` in its environment, and so does everything it starts (Spark executors and their Python
workers, PostgreSQL's backends, Dagster's code servers and run workers), so that what a killed
launcher never recorded in ``state.json`` is still found (:func:`marked`) and stopped
(:func:`stop_marked`) by ``cluster stop``. SIGTERM, SIGINT and SIGHUP become :class:`Stopped` while
``cluster start`` runs (:func:`signals_raise`), so an interrupted start stops what it started.
Services are not tied to the launcher's life (``PR_SET_PDEATHSIG``): ``make cluster`` returns
with them running, by design."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from slatedb_core.errors import SlateDBError


class ClusterError(SlateDBError):
    """A service did not start, or did not become ready in time (the message names its log)."""


MARKER = "LAKEHOUSE_CLUSTER_DIR"
"""The environment variable naming the cluster folder a process belongs to."""
OWNER = "LAKEHOUSE_CLUSTER_OWNER"
"""Optional, beside :data:`MARKER`: ``<pid>:<start time>`` of the process a cluster's life is tied
to (the cluster tests' pytest). Once that process is gone, the cluster's processes are orphans
that ``cluster stop --orphans`` stops (lakehouse_demo/cluster/orphans.py)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal (SIGTERM, SIGINT, SIGHUP) arrived; a BaseException, like KeyboardInterrupt,
    so that no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_deferred: list[int] = []
_defer_depth = 0


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    if _defer_depth:
        _deferred.append(signum)
        return
    raise Stopped(signum)


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP raise :class:`Stopped` (in the main thread) while inside."""
    old = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """A stop signal arriving inside is raised on the way out (a process started and not yet
    recorded, a clean-up half done). Not the signal mask: children would inherit it."""
    global _defer_depth
    _defer_depth += 1
    try:
        yield
    finally:
        _defer_depth -= 1
        if not _defer_depth and _deferred:
            signum = _deferred[0]
            _deferred.clear()
            raise Stopped(signum)


def _stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start in clock ticks since boot), or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], float(fields[19])


def start_time(pid: int) -> float | None:
    """The process's start (clock ticks since boot), or None when there is no such process or it
    is a zombie."""
    found = _stat(pid)
    if found is None or found[0] in ("Z", "X"):
        return None
    return found[1]


def alive(record: Mapping[str, object]) -> bool:
    """Whether the process a state record names is still the one that was started."""
    pid, started = record.get("pid"), record.get("start_time")
    return isinstance(pid, int) and start_time(pid) == started


def open_log(log: Path) -> int:
    """``log`` opened for appending, private to the user (0600, created so)."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return fd


def spawn(cmd: Sequence[str], *, log: Path, env: Mapping[str, str], cwd: Path) -> dict[str, object]:
    """Start ``cmd`` in a new session with umask 077 (what it creates is private to the user,
    issue 39 item 6), output appended to ``log`` (0600); returns its state record."""
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with os.fdopen(open_log(log), "ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            umask=0o077,
        )
    return {"pid": proc.pid, "start_time": start_time(proc.pid), "log": str(log)}


def stop(record: Mapping[str, object], *, timeout_s: float = 20.0) -> bool:
    """Signal the record's process group (SIGTERM, or the record's ``stop_signal``), SIGKILL what
    is left after ``timeout_s``. False when the process was not running (or is no longer the one
    that was started). A record with ``group: false`` (PostgreSQL's postmaster) is signalled
    alone and waited for: it stops its own children."""
    pid = record.get("pid")
    group = record.get("group", True)
    if not alive(record):
        # the leader died (kill -9) but what it started may live on in its group (a daemon's
        # code servers and run workers): the group is still ours while no process holds its
        # pid, since Linux does not hand out a pid that is a live group's id
        if not (
            group
            and isinstance(pid, int)
            and _leader_gone(pid, record.get("start_time"))
            and _group_alive(pid)
        ):
            return False
    assert isinstance(pid, int)
    sig = signal.Signals[str(record.get("stop_signal", "SIGTERM"))]
    kill = os.killpg if group else os.kill
    try:
        kill(pid, sig)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not (_group_alive(pid) if group else alive(record)):
            return True
        time.sleep(0.2)
    try:
        kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def _leader_gone(pid: int, started: object) -> bool:
    """No process holds ``pid`` but our dead leader (a zombie, not yet reaped)."""
    found = _stat(pid)
    return found is None or (found[0] in ("Z", "X") and found[1] == started)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # a group whose members are all zombies is gone for our purposes
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def ancestors(pid: int) -> list[int]:
    """``pid``'s parent, grandparent, ... up to init."""
    out = []
    parent = _ppid(pid)
    while parent and parent not in out:
        out.append(parent)
        parent = _ppid(parent)
    return out


def _our_uids() -> set[int]:
    """Whose processes a cluster of ours can hold: ours and, as root, PostgreSQL's user (it
    refuses to run as root; services.py runs it as ``postgres``)."""
    uids = {os.geteuid()}
    if os.geteuid() == 0:
        try:
            uids.add(pwd.getpwnam("postgres").pw_uid)
        except KeyError:
            pass
    return uids


def owner_token(pid: int) -> str:
    """:data:`OWNER`'s value for process ``pid``: its pid and start time."""
    return f"{pid}:{start_time(pid)!r}"


def owner_alive(token: str) -> bool:
    """Whether the process an :data:`OWNER` value names is still the one it named."""
    pid, _, started = token.partition(":")
    try:
        return alive({"pid": int(pid), "start_time": float(started)})
    except ValueError:
        return False  # not a token of ours: nothing vouches for the cluster


def marked_everywhere() -> list[dict[str, object]]:
    """Records (pid, start time, ``dir``: the :data:`MARKER` value, ``owner``: the :data:`OWNER`
    value or None) of the live processes of our user(s) that carry the marker, whatever their
    folder; never this process nor its ancestors (the shell and make that run ``cluster stop``)."""
    skip = {os.getpid(), *ancestors(os.getpid())}
    uids = _our_uids()
    marker, owner = f"{MARKER}=".encode(), f"{OWNER}=".encode()
    found: list[dict[str, object]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            if entry.stat().st_uid not in uids:
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        vars = {v.split(b"=", 1)[0] + b"=": v for v in environ.split(b"\0") if b"=" in v}
        if marker not in vars:
            continue
        pid = int(entry.name)
        started = start_time(pid)
        if started is not None:
            found.append(
                {
                    "pid": pid,
                    "start_time": started,
                    "dir": os.fsdecode(vars[marker][len(marker) :]),
                    "owner": os.fsdecode(vars[owner][len(owner) :]) if owner in vars else None,
                }
            )
    return found


def marked(dir: Path) -> list[dict[str, object]]:
    """Records (pid, start time) of the live processes of our user(s) whose environment says
    they belong to the cluster in ``dir``; never this process nor its ancestors (the shell and
    make that run ``cluster stop``)."""
    return [
        {"pid": r["pid"], "start_time": r["start_time"]}
        for r in marked_everywhere()
        if r["dir"] == str(dir)
    ]


def stop_marked(
    records: Sequence[Mapping[str, object]],
    *,
    gentle: Mapping[int, str] | None = None,
    timeout_s: float = 20.0,
) -> int:
    """Stop these processes (SIGTERM, or ``gentle[pid]``'s signal: SIGINT for a postmaster),
    SIGKILL what is left after ``timeout_s``; how many were running."""
    gentle = gentle or {}
    live = [r for r in records if alive(r)]
    for r in live:
        pid = r["pid"]
        assert isinstance(pid, int)
        try:
            os.kill(pid, signal.Signals[gentle.get(pid, "SIGTERM")])
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while any(alive(r) for r in live) and time.monotonic() < deadline:
        time.sleep(0.2)
    for r in live:
        if alive(r):
            pid = r["pid"]
            assert isinstance(pid, int)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return len(live)


def http_ok(url: str, *, timeout_s: float = 2.0) -> bytes | None:
    """The body of a 200 answer from ``url``, or None."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body if resp.status == 200 else None
    except (OSError, urllib.error.URLError):
        return None


def wait_until(
    what: str,
    ready: Callable[[], bool],
    *,
    record: Mapping[str, object] | None,
    timeout_s: float,
    log: Path | None,
) -> None:
    """Poll ``ready`` until it holds; fail early if the process exited, with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        if record is not None and not alive(record):
            raise ClusterError(f"{what} exited during start-up; see {log}:\n{tail(log)}")
        time.sleep(0.5)
    raise ClusterError(f"{what} not ready after {timeout_s:.0f} s; see {log}:\n{tail(log)}")


def tail(log: Path | None, n: int = 1500) -> str:
    if log is None or not log.exists():
        return ""
    return log.read_bytes()[-n:].decode("utf-8", "replace")
