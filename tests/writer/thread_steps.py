"""A call run in a thread of its own, its outcome recorded: the writer tests' way to watch a call
that may hang (a stalled flush, a close racing another actor)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def start_recorded(
    call: Callable[[], object],
) -> tuple[threading.Thread, list[BaseException | None]]:
    """Start ``call`` in a daemon thread; the list gets the error it raised, or None once it
    returned (empty while it runs)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:
            outcome.append(e)
        else:
            outcome.append(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome
