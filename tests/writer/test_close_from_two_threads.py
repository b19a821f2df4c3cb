"""Two threads closing one writer while the first close's checkpoint drop is still under way.

From review55 (session 55), reading ``Db.close`` after 8ec0e51. A second ``close()`` is meant
to raise the first one's error again ("the outcome of closing does not change"). Called while
the first is still dropping the writer checkpoint, it finds the engine closed and no error
recorded yet, and returns: success, while the first close then raises that the drop failed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

QUIET = DbOptions(manifest_poll_interval=timedelta(hours=1), flush_interval=timedelta(hours=1))


@pytest.mark.xfail(
    strict=True,
    reason="review55: a close() racing a close() whose checkpoint drop fails returns success",
)
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
        second_error: BaseException | None = None
        try:
            db.close()
        except Exception as e:
            second_error = e
    finally:
        pause.release()
    first.join(15)
    assert first_outcome and first_outcome[0] is not None, "the first close did not fail"
    assert second_error is not None, "the second close reported success"
