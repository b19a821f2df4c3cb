"""Group commit of concurrent durable puts (slatedb_core/wal/flusher.py; docs/gc-and-boundaries.md,
"What a durable put costs"): writers acknowledged by one WAL SST come back together, and the
flusher gathers them into the next one instead of sealing at the first. Every acknowledged put
is durable: a reopened writer replays all of them."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.wal import WalLog
from slatedb_core.wal.flusher import MIN_GRACE_S, GroupCommit
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks
from slatedb_core.writer.poll_schedule import PollSchedule

pytestmark = pytest.mark.timeout(120)

WRITERS = 8
PUTS = 30  # per writer


def _slow_store() -> FaultyStore:
    """A memory store whose WAL creates and boundary reads take 30 ms, as on remote S3."""
    inner = open_store("memory://group-commit")
    return FaultyStore(
        inner,
        rules=[
            FaultRule(op="put_if_absent", path_glob="db/wal/*", latency_s=0.03),
            FaultRule(path_glob="db/gc/*", latency_s=0.03),
        ],
    )


def test_concurrent_durable_puts_share_wal_ssts_and_all_survive_a_reopen() -> None:
    store = _slow_store()
    db = Db.open("db", store, DbOptions(flush_interval=timedelta(seconds=1)))
    first = WalLog(store, "db").list_ids()[-1]  # the opener's fence
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(PUTS):
                db.put(f"w{w}-{i:03d}".encode(), f"v{w}-{i}".encode())
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ssts = [i for i in WalLog(store, "db").list_ids() if i > first]
    db.close()
    puts = WRITERS * PUTS
    # Without gathering, the first put back after an acknowledgement sealed a generation alone
    # and the 8 writers split over two or more SSTs per round (4 puts per SST on average,
    # measured); gathered, a round is one SST, with slack for a straggler now and then.
    assert len(ssts) <= puts / 6, f"{puts} durable puts took {len(ssts)} WAL SSTs"
    reopened = Db.open("db", store.inner)
    try:
        for w in range(WRITERS):
            for i in range(PUTS):
                assert reopened.get(f"w{w}-{i:03d}".encode()) == f"v{w}-{i}".encode()
    finally:
        reopened.close()


def test_a_lone_durable_writer_is_not_delayed_by_the_gathering() -> None:
    """One writer: each put is its own group, sealed at once (no grace wait per put)."""
    store = _slow_store()
    hooks = WriterHooks()  # the seam that hands out the WAL flusher
    db = Db.open("db", store, DbOptions(flush_interval=timedelta(seconds=1)), hooks=hooks)
    assert hooks.steps is not None
    try:
        first = WalLog(store, "db").list_ids()[-1]
        for i in range(10):
            db.put(f"k{i}".encode(), b"v")
        assert WalLog(store, "db").list_ids()[-1] == first + 10
        assert hooks.steps.flusher.group_commit.expected(time.monotonic()) == 1
    finally:
        db.close()


def test_the_manifest_poll_backs_off_while_nothing_changes_and_returns_on_a_new_manifest() -> None:
    s = PollSchedule(timedelta(seconds=1), None)
    waits = [s.next_wait(3) for _ in range(7)]
    assert waits == [1, 2, 4, 8, 16, 16, 16]
    assert s.next_wait(4) == 1  # a newer manifest (ours or another process's)
    assert s.next_wait(4) == 2
    capped = PollSchedule(timedelta(seconds=1), timedelta(seconds=3))
    assert [capped.next_wait(0) for _ in range(4)] == [1, 2, 3, 3]


def test_the_expected_group_is_every_recent_writer_not_waiting_on_a_sealed_generation() -> None:
    g = GroupCommit(flush_interval_s=0.1)
    assert g.grace_s() == MIN_GRACE_S  # nothing measured yet
    for t in range(8):
        g.arrive(t, 0.0, gen=1, current=1)
    assert g.complete(0.0)
    g.sealed(1)  # generation 1 is being written: its 8 writers cannot join generation 2
    assert (g.waiting, g.expected(0.01)) == (0, 1)
    g.durable(1)
    # the SST landed: 4 writers come back at once, 4 a moment later (the other 4 have not even
    # left their wait yet). The group is not complete with the first 4: that is how 8 writers
    # would stay split in two, each half sealing as the other's write lands.
    for t in range(4):
        g.leave(1, current=2)
        g.arrive(t, 0.02, gen=2, current=2)
    assert g.expected(0.02) == 8 and not g.complete(0.02)
    for t in range(4, 8):
        g.leave(1, current=2)
        g.arrive(t, 0.021, gen=2, current=2)
    assert g.complete(0.021)
    g.sealed(2)
    g.durable(2)
    for _ in range(8):
        g.leave(2, current=3)
    # writers that stopped drop out after a few WAL writes (at least 50 ms)
    g.arrive(0, 0.2, gen=3, current=3)
    assert g.expected(0.2) == 1 and g.complete(0.2)
    g.wrote(0.05)
    assert g.grace_s() == pytest.approx(0.005)
    assert g.horizon_s() == pytest.approx(0.165)
    g.wrote(10.0)
    assert g.grace_s() == 0.1 and g.horizon_s() == 1.0  # at most flush_interval; a second
