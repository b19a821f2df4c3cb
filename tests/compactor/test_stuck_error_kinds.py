"""Which errors of real failing background passes make a :class:`Compactor` stuck.

From review54 (session 54) of c63afbd. ``stuck()`` decided on a list of classes, any
``StoreError`` counting as an outage a later pass mends; but a store error carries its kind
(slatedb_core/errors.py, "Branch on the kind, not on lists of classes"): a request the store
refused for good (access denied: ``ErrorKind.INVALID``; a planted link: ``ErrorKind.DATA``) fails
every later pass the same way, so the writer stalled on L0 hung forever behind one warning, the
very stall c63afbd set out to end. And two outage passes followed by one pass on a bug counted
as "three passes in a row on what retrying does not mend" (``STUCK_AFTER``'s own words), failing
the writer on the first such pass.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slatedb_core.compactor.compactor import STUCK_AFTER, Compactor
from slatedb_core.errors import (
    ErrorKind,
    InjectedFault,
    LinkInStore,
    PreconditionFailed,
    StoreError,
)
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db

T = TypeVar("T")
FAST = timedelta(milliseconds=10)


class PassFaults(FaultyStore):
    """Every read of a compacted SST raises ``errors(pass number)``; the pass numbered ``last``
    also stops the compactor, so its loop ends right after counting it."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.errors: Callable[[int], BaseException] | None = None
        self.compactor: Compactor | None = None
        self.last = 0

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        c = self.compactor
        if self.errors is not None and c is not None and op == "get" and "/compacted/" in path:
            n = c.failed_passes  # the pass under way: only the loop's thread changes it
            if n + 1 >= self.last:
                c._stop.set()
            raise self.errors(n)
        return super()._run(op, path, call)


def failed_passes(tmp_path: Path, errors: Callable[[int], BaseException], passes: int) -> Compactor:
    """A compactor of a database with two L0 SSTs whose first ``passes`` background passes
    failed, pass ``n`` on ``errors(n)``; its loop has ended."""
    inner = open_store(f"file://{tmp_path}/lake")
    with Db.open("db", inner, DbOptions(manifest_poll_interval=timedelta(hours=1))) as db:
        for i in range(2):
            db.put(b"k%d" % i, b"v")
            db.flush_memtable()
    store = PassFaults(inner)
    store.errors, store.last = errors, passes
    c = Compactor("db", store, CompactorOptions(poll_interval=FAST, l0_trigger=2))
    store.compactor = c
    c.start()
    assert c._thread is not None
    c._thread.join(30)
    assert not c.running and c.failed_passes == passes
    return c


@pytest.mark.parametrize(
    "err",
    [
        StoreError("get db/compacted/x.sst: access denied", path="x", retryable=False),
        LinkInStore("db/compacted/x.sst", "'compacted' is a symbolic link"),
    ],
    ids=["access denied", "link in store"],
)
def test_a_store_refusing_for_good_makes_it_stuck(tmp_path: Path, err: StoreError) -> None:
    assert err.kind is not ErrorKind.TRANSIENT
    c = failed_passes(tmp_path, lambda n: err, STUCK_AFTER)
    assert c.stuck() is err


def test_a_conflict_is_retried(tmp_path: Path) -> None:
    err = PreconditionFailed("db/compactions/x")
    c = failed_passes(tmp_path, lambda n: err, STUCK_AFTER + 2)
    assert c.stuck() is None


def test_outages_before_one_failing_pass_are_not_three_failing_passes(tmp_path: Path) -> None:
    bug = RuntimeError("a bug")

    def errors(n: int) -> BaseException:
        return bug if n == STUCK_AFTER - 1 else InjectedFault("outage")

    c = failed_passes(tmp_path, errors, STUCK_AFTER)
    assert c.last_error is bug
    assert c.stuck() is None


def test_three_failing_passes_after_outages_are_stuck(tmp_path: Path) -> None:
    bug = RuntimeError("a bug")

    def errors(n: int) -> BaseException:
        return InjectedFault("outage") if n < 2 else bug

    c = failed_passes(tmp_path, errors, 2 + STUCK_AFTER)
    assert c.stuck() is bug
