"""Progress of the demo on the terminal (rich).

The Dagster assets of :mod:`lakehouse_demo.pipeline` run in-process, so they report to the one
:class:`DemoProgress` installed by the CLI through the module-level functions below. When the
assets run elsewhere (``dagster dev``: no progress installed) every call is a no-op.

When the console is not a terminal (a pipe, a log file, CI) there is no live display: each step
prints one plain line when it finishes (issue 40, item 5: redraws made such logs unreadable).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from lakehouse_demo import interrupts

_lock = threading.Lock()
_current: DemoProgress | None = None


class DemoProgress:
    """One line per step: a spinner or a bar, the step's note, its elapsed time (on a terminal);
    elsewhere one plain line per finished step."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        """False: no redraws; :meth:`finish` prints the step's line."""
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[step]:<26}"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._started: dict[str, float] = {}
        self._finished: set[str] = set()

    def __enter__(self) -> DemoProgress:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    def running(self) -> list[str]:
        """The steps started and not finished (the one an interrupt stopped)."""
        return [s for s in self._started if s not in self._finished]

    def start(self, step: str, total: int | None = None, note: str = "") -> None:
        self._started[step] = time.monotonic()
        self._finished.discard(step)
        if step in self._tasks:
            self.progress.reset(self._tasks[step], total=total, note=note)
            return
        self._tasks[step] = self.progress.add_task("", total=total, step=step, note=note)

    def advance(self, step: str, n: float = 1, note: str | None = None) -> None:
        task = self._tasks.get(step)
        if task is None:
            return
        if note is None:
            self.progress.advance(task, n)
        else:
            self.progress.update(task, advance=n, note=note)

    def finish(self, step: str, note: str) -> None:
        self._finished.add(step)
        if not self.live:
            took = time.monotonic() - self._started.get(step, time.monotonic())
            self.console.print(f"{step:<26} {took:6.1f}s  {note}", markup=False, highlight=False)
            return
        task = self._tasks.get(step)
        if task is None:
            return
        t = self.progress.tasks[self._index(task)]
        total = t.total if t.total is not None else max(t.completed, 1)
        self.progress.update(task, total=total, completed=total, note=f"[green]{note}")
        self.progress.stop_task(task)

    def _index(self, task: TaskID) -> int:
        return next(i for i, t in enumerate(self.progress.tasks) if t.id == task)


def install(p: DemoProgress | None) -> None:
    global _current
    with _lock:
        _current = p


@contextmanager
def installed(p: DemoProgress) -> Iterator[DemoProgress]:
    install(p)
    try:
        with p:
            yield p
    finally:
        install(None)


def start(step: str, total: int | None = None, note: str = "") -> None:
    interrupts.check()  # a Ctrl-C swallowed elsewhere stops the run here
    p = _current
    if p is not None:
        p.start(step, total, note)


def advance(step: str, n: float = 1, note: str | None = None) -> None:
    interrupts.check()  # a Ctrl-C swallowed elsewhere stops the run here
    p = _current
    if p is not None:
        p.advance(step, n, note)


def finish(step: str, note: str) -> None:
    interrupts.check()  # a Ctrl-C swallowed elsewhere stops the run here
    p = _current
    if p is not None:
        p.finish(step, note)


def running() -> list[str]:
    """The installed progress's unfinished steps (none when no progress is installed)."""
    p = _current
    return p.running() if p is not None else []


def log(message: str) -> None:
    p = _current
    if p is not None:
        p.console.log(message)
