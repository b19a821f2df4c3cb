"""SlateDB RFC 0001's "Parallel Writes": its 2-writer and 3-writer tables step by step, acknowledgements
as each SST lands, fencing that fills a dead writer's holes, readers waiting for a gap to fill.

The seed numbers WAL SSTs from 0; ours start at 1 (id 0 is "no WAL SST" in the manifest), so the
seed's SST k is our id k + 1 throughout. Each writer talks to the store through its own
FaultyStore, whose pause points hold a writer just before its create of one id: releasing the
pauses in the seed's order replays the seed's timeline exactly.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import timedelta

import pytest

from slatedb_core.errors import Fenced, InvalidArgument
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.manifest.model import MAX_PARALLEL_WRITES
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore, PausePoint
from slatedb_core.wal import WalLog, WalWindow, WalWriter, fence_wal, first_open_slot
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks
from tests.wal.fence_steps import Recorder, epochs, is_fence, set_writer_epoch

pytestmark = pytest.mark.timeout(120)

OPTS = SstOptions()
WAIT = 10.0


def wal_path(wal_id: int) -> str:
    return f"db/wal/{wal_id:020d}.sst"


class Opener:
    """A new writer's fencing (``fence_wal`` with ``count`` consecutive SSTs) in a thread, held
    before each of its creates so that a test can release them one at a time."""

    def __init__(self, store: ObjectStore, epoch: int, start: int, ids: range, count: int) -> None:
        self.faulty = Recorder(store, epoch)
        self.pauses = {
            i: self.faulty.pause(f"e{epoch}-{i}", "put_if_absent", wal_path(i)) for i in ids
        }
        self.result: int | BaseException | None = None
        self._done = threading.Event()

        def run() -> None:
            try:
                self.result = fence_wal(WalLog(self.faulty, "db"), epoch, start, count)
            except BaseException as e:
                self.result = e
            finally:
                self._done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.pauses[start].wait_reached(WAIT)

    def step(self, wal_id: int) -> None:
        """Let the create of ``wal_id`` happen; return once the opener is held before its next
        create, or has finished."""
        self.pauses[wal_id].release()
        later = [p for i, p in self.pauses.items() if i > wal_id]
        for _ in range(int(WAIT / 0.01)):
            if self._done.is_set() or any(p.reached and not p.released for p in later):
                return
            self._done.wait(0.01)
        raise AssertionError(f"opener did not move past id {wal_id}")

    def finished(self) -> int | BaseException | None:
        assert self._done.wait(WAIT)
        return self.result


class OldWriter:
    """A writer with a window of ``size`` parallel WAL writes (the real WalWindow), whose creates
    of the ``held`` ids wait for the test."""

    def __init__(
        self, store: ObjectStore, epoch: int, next_id: int, size: int, held: tuple[int, ...]
    ) -> None:
        self.faulty = Recorder(store, epoch)
        self.pauses: dict[int, PausePoint] = {
            i: self.faulty.pause(f"e{epoch}-{i}", "put_if_absent", wal_path(i)) for i in held
        }
        writer = WalWriter(WalLog(self.faulty, "db"), epoch, next_id, OPTS)
        self.window = WalWindow(writer, size)
        self.outcome: dict[int, BaseException | None] = {}
        self._events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _done(self, wal_id: int, err: BaseException | None) -> None:
        with self._lock:
            self.outcome[wal_id] = err
            self._events.setdefault(wal_id, threading.Event()).set()

    def put(self, key: bytes, seq: int) -> int:
        """One "put" in its own WAL SST; returns its id (its acknowledgement is ``outcome``)."""
        assert self.window.wait_for_room(WAIT)
        data = self.window.writer.encode(batch_from_lists([key], [seq], [0], [b"v"]))
        wal_id = self.window.submit(data, self._done)
        with self._lock:
            self._events.setdefault(wal_id, threading.Event())
        return wal_id

    def wait(self, wal_id: int) -> BaseException | None:
        with self._lock:
            event = self._events.setdefault(wal_id, threading.Event())
        assert event.wait(WAIT), f"WAL write {wal_id} did not finish"
        return self.outcome[wal_id]

    def release(self, wal_id: int) -> BaseException | None:
        self.pauses[wal_id].release()
        return self.wait(wal_id)


def test_seed_two_writer_table(store: ObjectStore) -> None:
    """max_parallel_writes = 2 (SlateDB RFC 0001, Writers / Parallel Writes), ids shifted by one."""
    set_writer_epoch(store, 1)
    w1 = OldWriter(store, epoch=1, next_id=1, size=2, held=(3, 4))
    try:
        # time 0, 1: writer 1 writes SSTs 0 and 1
        assert w1.wait(w1.put(b"s0", 1)) is None
        assert w1.wait(w1.put(b"s1", 2)) is None
        # writer 1 issues SSTs 2 and 3 in parallel; both are still in flight
        assert (w1.put(b"s2", 3), w1.put(b"s3", 4)) == (3, 4)
        assert w1.pauses[3].wait_reached(WAIT) and w1.pauses[4].wait_reached(WAIT)
        assert w1.window.wait_for_room(0.05) is False  # a window of 2: nothing more goes out
        # writer 2 bumps the epoch, lists the WAL ({0, 1}) and fences from the first open
        # position, SST 2
        set_writer_epoch(store, 2)
        start = first_open_slot(WalLog(store, "db").list_ids(), 0, 1)
        assert start == 3
        w2 = Opener(store, epoch=2, start=start, ids=range(3, 7), count=2)
        w2.step(3)  # time 2: SST 2, epoch 2
        assert epochs(store, w1.faulty, w2.faulty) == {1: 1, 2: 1, 3: 2}
        assert w1.release(4) is None  # time 3: SST 3, epoch 1, acknowledged as it lands
        assert epochs(store, w1.faulty, w2.faulty) == {1: 1, 2: 1, 3: 2, 4: 1}
        err = w1.release(3)  # time 4: writer 1's SST 2 fails: writer 2 took it; writer 1 halts
        assert isinstance(err, Fenced) and (err.our_epoch, err.current_epoch) == (1, 2)
        with pytest.raises(Fenced):
            w1.window.wait_for_room(WAIT)
        w2.step(4)  # time 5: writer 2's SST 3 fails (older epoch): it begins again at 4
        assert epochs(store, w1.faulty, w2.faulty) == {1: 1, 2: 1, 3: 2, 4: 1}
        w2.step(5)  # time 6: SST 4, epoch 2
        # one in a row is not enough
        assert epochs(store, w1.faulty, w2.faulty)[5] == 2 and w2.thread.is_alive()
        w2.step(6)  # time 7: SST 5, epoch 2: two in a row, writer 1 is fenced
        assert w2.finished() == 6
        assert epochs(store, w1.faulty, w2.faulty) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 2, 6: 2}
        assert all(is_fence(store, i) for i in (3, 5, 6))
        # a.await() -> failed, b.await() -> succeeded: SST 2's put Fenced, SST 3's acknowledged
        assert {i: e is None for i, e in w1.outcome.items()} == {
            1: True,
            2: True,
            3: False,
            4: True,
        }
        # readers and the compactor treat SST 3 as valid: it holds data and is replayed
        assert WalLog(store, "db").read(4).entries.column("key").to_pylist() == [b"s3"]
        assert WalLog(store, "db").read(3).is_fence
    finally:
        w1.faulty.release_all()
        w1.window.close()


def test_seed_three_writer_table(store: ObjectStore) -> None:
    """Writer 1 is the old writer (window of 2); writers 2 and 3 race to fence it.

    Writers 2 and 3 both bumped the epoch before fencing, so the manifest holds 3 from time 2 on.
    In the RFC's table writer 2 compares its epoch with the *slot's* and goes on fencing until
    time 10; WAL objects carry no epoch here (SlateDB 0.17's), so a writer that loses a slot
    reads the manifest, as SlateDB 0.17's writer does: writer 2 learns of writer 3 at its first
    lost race (time 5) and stops there, earlier than the RFC's, which only shortens the time two
    openers race. Writer 3 then fences SSTs 4 and 5 (our 5, 6) without meeting writer 2."""
    set_writer_epoch(store, 1)
    w1 = OldWriter(store, epoch=1, next_id=1, size=2, held=(3, 4))
    w3: Opener | None = None
    w2: Opener | None = None
    try:
        assert w1.wait(w1.put(b"s0", 1)) is None  # time 0
        assert w1.wait(w1.put(b"s1", 2)) is None  # time 1
        assert (w1.put(b"s2", 3), w1.put(b"s3", 4)) == (3, 4)
        assert w1.pauses[3].wait_reached(WAIT) and w1.pauses[4].wait_reached(WAIT)
        set_writer_epoch(store, 2)  # writer 2's bump
        set_writer_epoch(store, 3)  # writer 3's bump
        w3 = Opener(store, epoch=3, start=3, ids=range(3, 8), count=2)
        w3.step(3)  # time 2: SST 2, epoch 3, success
        assert epochs(store, w1.faulty, w3.faulty) == {1: 1, 2: 1, 3: 3}
        assert w1.release(4) is None  # time 3: SST 3, epoch 1, success
        err = w1.release(3)  # time 4: failure (writer 3 won at time 2), writer 1 halts
        assert isinstance(err, Fenced) and err.current_epoch == 3
        # writer 2 listed {0, 1, 2} after time 2: its first open position is SST 3
        w2 = Opener(store, epoch=2, start=4, ids=range(4, 7), count=2)
        w2.step(4)  # time 5: failure (writer 1 won at time 3); the manifest holds 3: fenced
        halted = w2.finished()
        assert isinstance(halted, Fenced) and (halted.our_epoch, halted.current_epoch) == (2, 3)
        w3.step(4)  # time 6: failure (writer 1 won at time 3), older: writer 3 begins again
        assert epochs(store, w1.faulty, w2.faulty, w3.faulty) == {1: 1, 2: 1, 3: 3, 4: 1}
        w3.step(5)  # SST 4, epoch 3, success
        assert w3.thread.is_alive()
        w3.step(6)  # SST 5, epoch 3, success: writers 1 and 2 are fenced
        assert w3.finished() == 6
        assert epochs(store, w1.faulty, w2.faulty, w3.faulty) == {
            1: 1,
            2: 1,
            3: 3,
            4: 1,
            5: 3,
            6: 3,
        }
        # "readers will consider all SSTs valid [...], though only SSTs 0, 1, and 3 will have
        # key-value pairs"
        wal = WalLog(store, "db")
        with_data = [i for i in wal.list_ids() if not wal.read(i).is_fence]
        assert with_data == [1, 2, 4]
        assert {i: e is None for i, e in w1.outcome.items()} == {
            1: True,
            2: True,
            3: False,
            4: True,
        }
    finally:
        w1.faulty.release_all()
        for opener in (w2, w3):
            if opener is not None:
                opener.faulty.release_all()
        w1.window.close()


PARALLEL = DbOptions(
    max_parallel_writes=2,
    flush_interval=timedelta(seconds=30),  # only durable puts wake the WAL flusher
    manifest_poll_interval=timedelta(minutes=5),
)


def _in_thread(fn: Callable[[], None]) -> tuple[threading.Thread, list[BaseException | None]]:
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            out.append(None)
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_db_acknowledges_each_put_as_its_sst_lands_and_the_next_writer_fences_the_hole(
    store: ObjectStore,
) -> None:
    """The seed's ``a.await() -> failed, b.await() -> succeeded`` through Db, with a reader
    that waits for the gap to fill."""
    faulty = Recorder(store, 1)
    w1 = Db.open("db", faulty, PARALLEL)
    try:
        # a fresh database: two fences (max(1 in the manifest, our 2)), ids 1 and 2
        assert epochs(store, faulty) == {1: 1, 2: 1}
        assert is_fence(store, 1) and is_fence(store, 2)
        assert w1.manifest.manifest.max_parallel_writes == 2
        held = faulty.pause("a", "put_if_absent", wal_path(3))
        a, a_out = _in_thread(lambda: w1.put(b"a", b"1"))
        assert held.wait_reached(WAIT)  # SST 3 (a) in flight
        w1.put(b"b", b"2")  # SST 4 lands and b is acknowledged while a is still in flight
        assert a.is_alive() and epochs(store, faulty) == {1: 1, 2: 1, 4: 1}
        follower = DbReaderOptions(
            manifest_poll_interval=timedelta(minutes=5),
            checkpoint_lifetime=None,
            mode=ReaderMode.FOLLOW_LATEST,
        )
        with DbReader.open("db", store, options=follower) as reader:
            assert reader.get(b"b") is None  # SST 4 waits for the gap at SST 3
            # a new writer fences from the first open slot: 3 (fills the hole), 4 is the old
            # writer's (the run restarts), then 5 and 6
            second = Recorder(store, 2)
            w2 = Db.open("db", second, DbOptions(manifest_poll_interval=timedelta(minutes=5)))
            try:
                assert epochs(store, faulty, second) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 2, 6: 2}
                assert w2.get(b"b") == b"2" and w2.get(b"a") is None  # b replayed, a lost
                held.release()
                a.join(WAIT)
                assert len(a_out) == 1 and isinstance(a_out[0], Fenced)  # a.await() failed
                with pytest.raises(Fenced):
                    w1.put(b"c", b"3")
                reader.refresh()
                assert reader.get(b"b") == b"2" and reader.get(b"a") is None
                # its first memtable flush records its own window (1) and the contiguous prefix
                w2.put(b"d", b"4")
                w2.flush_memtable()
                m = w2.manifest.manifest
                assert (m.max_parallel_writes, m.replay_after_wal_id, m.next_wal_sst_id) == (
                    1,
                    7,
                    8,
                )
            finally:
                w2.close()
    finally:
        faulty.release_all()
        w1._simulate_crash()


def test_concurrent_durable_puts_with_four_writes_in_flight_survive_a_reopen(
    store: ObjectStore,
) -> None:
    opts = dataclasses.replace(
        PARALLEL, max_parallel_writes=4, flush_interval=timedelta(milliseconds=20)
    )
    acked: list[bytes] = []
    lock = threading.Lock()
    hooks = WriterHooks()  # the seam that hands out the WAL flusher, to watch its window
    db = Db.open("db", store, opts, hooks=hooks)
    assert hooks.steps is not None
    window = hooks.steps.flusher.window
    in_flight_seen = 0

    def putter(t: int) -> None:
        nonlocal in_flight_seen
        for i in range(25):
            key = f"t{t}-{i:03d}".encode()
            db.put(key, key)
            with lock:
                acked.append(key)
                assert window is not None
                in_flight_seen = max(in_flight_seen, window.in_flight())

    threads = [threading.Thread(target=putter, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(acked) == 200
    ids = WalLog(store, "db").list_ids()
    assert ids == list(range(1, ids[-1] + 1))  # every landed write: no hole once all are acked
    db._simulate_crash()  # nothing flushed to L0: the reopen replays the WAL
    with Db.open("db", store, DbOptions()) as db2:
        assert db2.get_many(acked) == acked
        # the old writer's window was 4: four consecutive fencing SSTs after its last SST
        fences = WalLog(store, "db").list_ids()[len(ids) :]
        assert fences == [ids[-1] + 1 + k for k in range(4)]
        assert all(WalLog(store, "db").read(i).is_fence for i in fences)


def test_writer_killed_with_holes_in_flight_is_recovered_by_the_next_writer(
    store: ObjectStore,
) -> None:
    """The dead writer's window holds a hole (a create that never landed) below an SST that did;
    the next writer fills the hole, replays the landed SST, and a late create finds its slot
    taken."""
    faulty = Recorder(store, 1)
    opts = dataclasses.replace(PARALLEL, max_parallel_writes=4)
    w1 = Db.open("db", faulty, opts)  # fences 1..4
    w1.put(b"x", b"0")  # 5
    held = faulty.pause("hole", "put_if_absent", wal_path(6))
    lost, _ = _in_thread(lambda: w1.put(b"lost", b"1"))  # 6, held
    assert held.wait_reached(WAIT)
    w1.put(b"y", b"2")  # 7
    w1.put(b"z", b"3")  # 8
    assert sorted(epochs(store, faulty)) == [1, 2, 3, 4, 5, 7, 8]
    w1._simulate_crash()  # the create of 6 is still in flight, as in a killed process
    second = Recorder(store, 2)
    w2 = Db.open("db", second, DbOptions(max_parallel_writes=2))
    try:
        # fences: 6 (the hole), then 9..12: the old window was 4, so four in a row
        assert epochs(store, faulty, second) == {
            **{i: 1 for i in (1, 2, 3, 4, 5, 7, 8)},
            6: 2,
            9: 2,
            10: 2,
            11: 2,
            12: 2,
        }
        assert w2.get_many([b"x", b"y", b"z", b"lost"]) == [b"0", b"2", b"3", None]
        assert w2.manifest.manifest.max_parallel_writes == 4  # until its fence is in a flush
        held.release()  # the late create meets the fence
        lost.join(WAIT)
        assert epochs(store, faulty, second)[6] == 2 and is_fence(store, 6)
        w2.put(b"after", b"4")
    finally:
        faulty.release_all()
        w2.close()
    with Db.open("db", store, DbOptions()) as w3:
        assert w3.get_many([b"x", b"y", b"z", b"after", b"lost"]) == [b"0", b"2", b"3", b"4", None]


def test_replay_point_never_passes_a_hole(store: ObjectStore) -> None:
    """A memtable flush while an earlier WAL write is still in flight waits for it: the replay
    point moves only over the contiguous prefix."""
    faulty = FaultyStore(store)
    w1 = Db.open("db", faulty, PARALLEL)  # fences 1, 2
    held = faulty.pause("slow", "put_if_absent", wal_path(3))
    slow, slow_out = _in_thread(lambda: w1.put(b"slow", b"1"))
    assert held.wait_reached(WAIT)
    w1.put(b"fast", b"2")  # 4 lands
    flush, flush_out = _in_thread(w1.flush_memtable)
    flush.join(0.5)
    assert flush.is_alive()  # waiting for SST 3
    assert w1.manifest.manifest.replay_after_wal_id == 0
    held.release()
    slow.join(WAIT)
    flush.join(WAIT)
    assert slow_out == [None] and flush_out == [None]
    assert w1.manifest.manifest.replay_after_wal_id >= 4
    w1.close()


def test_first_open_slot_is_the_lowest_hole() -> None:
    assert first_open_slot([], 0, 1) == 1
    assert first_open_slot([1, 2, 4, 5], 0, 1) == 3
    assert first_open_slot([5, 6, 8], 4, 1) == 7
    assert first_open_slot([5, 6, 8], 4, 10) == 10  # below next_wal_sst_id: all exist or collected
    assert first_open_slot([11, 12], 10, 1) == 13


def test_options_bound_max_parallel_writes() -> None:
    assert DbOptions().max_parallel_writes == 1
    for bad in (0, MAX_PARALLEL_WRITES + 1):
        with pytest.raises(InvalidArgument, match="max_parallel_writes"):
            DbOptions(max_parallel_writes=bad)


def test_a_failing_wal_create_is_retried_at_its_id_and_later_ones_are_acked(
    store: ObjectStore,
) -> None:
    """SST 3's create fails 8 times in a row (the create itself tries 5 times): its put gets
    the store error (maybe durable), SST 4 lands and is acknowledged meanwhile, the window
    retries 3 at the same id until it lands, and no hole is left."""
    from slatedb_core.errors import StoreError

    faulty = Recorder(store, 1)
    w1 = Db.open("db", faulty, PARALLEL)  # fences 1, 2
    faulty.fail_next("put_if_absent", wal_path(3), times=8)
    with pytest.raises(StoreError):
        w1.put(b"a", b"1")  # SST 3: reported failed, still being retried
    w1.put(b"b", b"2")  # SST 4, acknowledged
    w1.flush()  # returns once 3 has landed too
    assert sorted(epochs(store, faulty)) == [1, 2, 3, 4]
    assert WalLog(store, "db").read(3).entries.column("key").to_pylist() == [b"a"]
    w1.close()
    with Db.open("db", store, DbOptions()) as w2:
        assert w2.get_many([b"a", b"b"]) == [b"1", b"2"]


def test_an_opener_that_dies_mid_fence_leaves_the_old_window_in_the_manifest(
    store: ObjectStore,
) -> None:
    """Writer 2 (window 1) bumps its epoch over writer 1 (window 4) and stalls after one of its
    four fencing SSTs: the manifest says 4 (the maximum), so writer 3 (window 1) still fences
    with 4 consecutive SSTs, which is what writer 1's window needs."""
    first = Recorder(store, 1)
    w1 = Db.open("db", first, dataclasses.replace(PARALLEL, max_parallel_writes=4))  # 1..4
    w1.put(b"x", b"1")  # 5
    faulty = Recorder(store, 2)
    stalled = faulty.pause("w2", "put_if_absent", wal_path(7))
    box: list[Db | BaseException] = []

    def open_w2() -> None:
        try:
            box.append(Db.open("db", faulty, DbOptions(max_parallel_writes=1)))
        except BaseException as e:
            box.append(e)

    t = threading.Thread(target=open_w2, daemon=True)
    t.start()
    try:
        assert stalled.wait_reached(WAIT)  # writer 2 fenced 6 and waits before 7
        third = Recorder(store, 3)
        m = Db.open("db", third, DbOptions(max_parallel_writes=1))
        try:
            assert epochs(store, first, faulty, third) == {
                1: 1,
                2: 1,
                3: 1,
                4: 1,
                5: 1,
                6: 2,
                7: 3,
                8: 3,
                9: 3,
                10: 3,
            }
            assert m.get(b"x") == b"1"
            m.put(b"y", b"2")
            m.flush_memtable()  # its fence is complete: the manifest carries its own window
            assert m.manifest.manifest.max_parallel_writes == 1
        finally:
            m.close()
        stalled.release()
        t.join(WAIT)
        assert len(box) == 1 and isinstance(box[0], Fenced)
        with pytest.raises(Fenced):
            w1.put(b"z", b"3")
    finally:
        faulty.release_all()
        w1._simulate_crash()
