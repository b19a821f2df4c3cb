"""Which failing passes make a compactor :meth:`~Compactor.stuck` (a writer stalled on its full L0
fails with the error) and which it goes on retrying.

Added with the stall fix of session 54 (tests/writer/test_dead_background_threads.py has the
writer's side)."""

from __future__ import annotations

import pytest

from slatedb_core.compactor.compactor import STUCK_AFTER, Compactor
from slatedb_core.errors import (
    CommitRetriesExhausted,
    CompactionContended,
    CompactionSourceChanged,
    CorruptionError,
    InjectedFault,
    MergeOperatorFailed,
    StoreError,
)
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db


def failing(err: BaseException, passes: int) -> Compactor:
    """A compactor of a new database whose last ``passes`` background passes failed on ``err``."""
    store = open_store("memory://")
    Db.open("db", store).close()
    c = Compactor("db", store)
    c.last_error, c.failed_passes, c.unmended_passes = err, passes, passes
    return c


@pytest.mark.parametrize(
    "err",
    [
        StoreError("outage", path="db/compacted/x.sst"),
        InjectedFault("outage"),
        CompactionContended("db", 5, "sources changed"),
        CompactionSourceChanged("sources changed"),
        CommitRetriesExhausted("manifest", 10),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_a_later_pass_may_mend_is_retried(err: BaseException) -> None:
    assert failing(err, STUCK_AFTER + 10).stuck() is None


@pytest.mark.parametrize(
    "err",
    [
        CorruptionError("db/compacted/x.sst", "bad block"),
        MergeOperatorFailed(b"k", ValueError("bad operand")),
        RuntimeError("a bug"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_retrying_does_not_mend_makes_it_stuck(err: BaseException) -> None:
    assert failing(err, STUCK_AFTER - 1).stuck() is None
    assert failing(err, STUCK_AFTER).stuck() is err


def test_a_pass_that_works_clears_it() -> None:
    c = failing(RuntimeError("a bug"), STUCK_AFTER)
    c.last_error, c.failed_passes, c.unmended_passes = None, 0, 0
    assert c.stuck() is None
