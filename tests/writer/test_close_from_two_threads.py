"""Two threads closing one writer while the first close's checkpoint drop is still under way.

From review55 (session 55), reading ``Db.close`` after 8ec0e51. A second ``close()`` is meant
to raise the first one's error again ("the outcome of closing does not change"). Called while
the first was still dropping the writer checkpoint, it found the engine closed and no error
recorded yet, and returned: success, while the first close then raised that the drop failed.
Each close now waits for the first one's outcome."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))


def test_a_close_racing_a_failing_close_does_not_report_success(tmp_path: Path) -> None:
    inner = open_store(f"file://{tmp_path}/lake")
    faulty = FaultyStore(inner)
    db = Db.open("db", faulty, QUIET)
    db.put(b"acked", b"v")
    pause = faulty.pause("drop", "put_if_absent", "db/manifest/*")
    faulty.fail_next("put_if_absent", "db/manifest/*", times=1000)
    try:
        first, first_outcome = start_recorded(db.close)
        assert pause.wait_reached(10), "the first close dropped no checkpoint"
        second, second_outcome = start_recorded(db.close)
        second.join(0.3)  # the old code returned at once here
    finally:
        pause.release()
    first.join(15)
    second.join(15)
    assert first_outcome and first_outcome[0] is not None, "the first close did not fail"
    assert second_outcome, "the second close still waits"
    assert second_outcome[0] is first_outcome[0], "the second close reported another outcome"
    faulty.clear_rules()
    with Db.open("db", inner, QUIET) as again:
        assert again.get(b"acked") == b"v"


def test_closing_twice_from_one_thread_still_returns_at_once(tmp_path: Path) -> None:
    db = Db.open("db", open_store(f"file://{tmp_path}/lake"), QUIET)
    db.close()
    started = time.monotonic()
    db.close()
    assert time.monotonic() - started < 1
