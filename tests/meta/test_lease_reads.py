"""Failure modes of the boundary lease's moving parts (slatedb_core.meta.lease,
slatedb_core.meta.boundary; docs/gc-and-boundaries.md "The boundary lease"): a background read
that could not be started, and boundary reads of one process whose answers arrive out of order."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.meta import boundary as boundaries
from slatedb_core.meta.boundary import lease_clock
from slatedb_core.meta.lease import LeasedBoundary
from slatedb_core.sst import SstOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.wal import WalLog, WalWriter
from slatedb_core.wal.writer import wal_boundary

OPTS = SstOptions()


LEASE_S = 0.5


PATH = "db/gc/wal.boundary"


@pytest.fixture(autouse=True)
def _lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(boundaries, "DEFAULT_LEASE_S", LEASE_S)


def _no_thread_for_the_next_read(monkeypatch: pytest.MonkeyPatch) -> list[threading.Thread]:
    """The next boundary-read thread fails to start, as ``Thread.start`` does when the process
    is out of threads (RuntimeError "can't start new thread"); later ones start."""
    real_start = threading.Thread.start
    refused: list[threading.Thread] = []

    def start(self: threading.Thread) -> None:
        if self.name == "boundary-lease-read" and not refused:
            refused.append(self)
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return refused


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_read_thread_that_could_not_start_leaves_no_check_waiting_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen failing on 7c5d0ce: the read stayed in the list, never done, so the next prepare
    started none and every check after it waited for it for ever.

    Found by the review of the boundary lease (was test_review_lease.py)."""
    store = open_store("memory:///")
    lease = LeasedBoundary(wal_boundary(WalLog(store, "db")))
    refused = _no_thread_for_the_next_read(monkeypatch)
    try:
        lease.prepare()
    except RuntimeError:
        pass  # 7c5d0ce let it out; the check below is what must not hang
    assert refused
    lease.prepare()
    checker, out = _in_thread(lambda: lease.check(1, "db/wal/1.sst", lease_clock()))
    checker.join(5)
    assert not checker.is_alive(), "the boundary check waits for a read that never ran"
    assert out == [None]


def test_a_writer_whose_read_thread_could_not_start_still_writes_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The create goes ahead and is checked by a read made after it (SlateDB RFC 0026); the
    next write starts a background read again. Seen failing on 7c5d0ce: the RuntimeError came
    out of the first write (whose create had not been made), and the read it left behind would
    have held every later write.

    Found by the review of the boundary lease (was test_review_lease.py)."""
    store = open_store("memory:///")
    writer = WalWriter(WalLog(store, "db"), epoch=1, next_id=1, options=OPTS)
    _no_thread_for_the_next_read(monkeypatch)

    def two_writes() -> list[int]:
        return [writer.write(batch_from_lists([b"k%d" % i], [i + 1], [0], [b"v"])) for i in (0, 1)]

    t, out = _in_thread(two_writes)
    t.join(5)
    assert not t.is_alive(), "a write hangs on a read that never ran"
    assert out == [[1, 2]]
    assert writer.lease.checks_after_create >= 1
    assert WalLog(store, "db").list_ids() == [1, 2]


def test_answers_arriving_out_of_order_are_not_a_boundary_moving_backwards() -> None:
    """Two reads of one boundary object in flight (a writer with max_parallel_writes > 1:
    checks after creates and the background read): the answer served first may be taken in
    last. Seen failing on 7c5d0ce: CorruptionError 'boundary moved backwards from 9 to 5'.

    Found by the review of the boundary lease (was test_review_lease.py)."""
    inner = open_store("memory:///")
    gc = wal_boundary(WalLog(inner, "db"))
    gc.advance(5)
    store = FaultyStore(inner)
    ours = wal_boundary(WalLog(store, "db"))
    late = store.pause("answered before the advance", "get", PATH, when="after")
    slow, out = _in_thread(ours.read)
    assert late.wait_reached()
    gc.advance(9)
    assert ours.read() == 9
    late.release()
    slow.join(5)
    assert out == [9]  # the newer value it already knew, never the older answer
    assert ours.cached == 9
    assert ours.read() == 9


def test_an_answer_below_what_was_known_when_it_was_asked_is_still_corruption() -> None:
    """Found by the review of the boundary lease (was test_review_lease.py)."""
    store = open_store("memory:///")
    ours = wal_boundary(WalLog(store, "db"))
    ours.advance(9)
    store.put(PATH, b"5 500")
    with pytest.raises(CorruptionError, match="backwards"):
        ours.read()
