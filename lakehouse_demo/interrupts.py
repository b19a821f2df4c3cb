"""Ctrl-C during the demo: recorded once, and raised again at the next step boundary.

Python delivers SIGINT as a KeyboardInterrupt at whatever bytecode runs next; when that is a
weak-reference or garbage-collection callback (SQLAlchemy's, inside Dagster's instance) the
exception is printed as "Exception ignored" and dropped, and the demo ran on to the end with exit
code 0 (issue 40, item 5). :func:`installed` records the signal as well as raising it;
:func:`check` (called by :mod:`lakehouse_demo.progress` at every step update) raises it again, and
the CLI reports an interrupted run even when every raise was swallowed. While Dagster executes the
job it installs its own handler and raises ``DagsterExecutionInterruptedError`` at its step
boundaries; the CLI treats that as Ctrl-C too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_requested = threading.Event()


def _on_sigint(_signo: int, _frame: FrameType | None) -> None:
    _requested.set()
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """Record SIGINT while the block runs (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested.clear()
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def requested() -> bool:
    """Whether SIGINT arrived inside :func:`installed` (until the next :func:`installed`)."""
    return _requested.is_set()


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived (a step boundary: safe to stop here)."""
    if _requested.is_set():
        raise KeyboardInterrupt
