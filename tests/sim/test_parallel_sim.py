"""The simulation's support for parallel WAL writes: the recorder's relaxed WAL-hole rule stays
strict outside a window of ``max_parallel_writes``, and a schedule with a window replays."""

from __future__ import annotations

import random

import pytest

from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.sst import SstOptions
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog, WalWriter
from slatedb_core.wal.log import FENCE
from tests.sim.actors import SimWindow
from tests.sim.harness import Simulation
from tests.sim.recorder import RecordingStore

MANIFEST = "db/manifest/{:020d}.manifest"
WAL = "db/wal/{:020d}.sst"


def _wal_sst() -> bytes:
    return FENCE  # SlateDB 0.17's fence: a zero-byte WAL object


def _with_wal(window: int, ids: list[int]) -> list[str]:
    rec = RecordingStore(open_store("memory://"))
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest(max_parallel_writes=window)))
    for i in ids:
        rec.put_if_absent(WAL.format(i), _wal_sst())
    return rec.check()


def test_recorder_allows_holes_only_within_the_parallel_window() -> None:
    # one write in flight: no hole at all
    assert _with_wal(1, [1, 2, 3]) == []
    assert any("holes beyond a window of 1" in v for v in _with_wal(1, [1, 2, 4]))
    # a window of 4 after the contiguous run 1..2: ids 3..6 may be in flight or lost
    assert _with_wal(4, [1, 2, 4, 6]) == []
    assert any("holes beyond a window of 4" in v for v in _with_wal(4, [1, 2, 4, 7]))
    # two holes far apart cannot both be one window's
    assert any("holes" in v for v in _with_wal(2, [1, 3, 4, 6]))


def test_sim_window_lands_creates_in_a_seeded_order() -> None:
    store = open_store("memory://")
    orders: list[list[int]] = []
    for _ in range(2):
        wal = WalLog(store, f"db{len(orders)}")
        window = SimWindow(WalWriter(wal, 1, 1, SstOptions()), 4, random.Random("x"))
        landed: list[int] = []

        def done(wal_id: int, err: BaseException | None, landed: list[int] = landed) -> None:
            assert err is None
            landed.append(wal_id)

        for _ in range(4):
            window.wait_for_room()
            window.submit(window.writer.encode(batch_from_lists([b"k"], [1], [0], [b"v"])), done)
        assert len(window.queue) == 4 and not landed  # nothing lands until the schedule says so
        window.wait_for_room()  # full: lands creates in flight until id 1 (the window's base) has
        assert landed[-1] == 1 and len(window.queue) == 4 - len(landed)
        while window.queue:
            window.run_one()
        orders.append(landed)
    assert orders[0] == orders[1] and sorted(orders[0]) == [1, 2, 3, 4]
    assert orders[0] != [1, 2, 3, 4]  # out of order for this seed


@pytest.mark.parametrize("seed", [58, 313])
def test_schedules_that_caught_a_fence_of_one_sst_run_clean(seed: int) -> None:
    """With the new writer fencing from the top of the WAL with one SST (the sequential
    protocol) these two schedules left a dead writer's hole below the fence forever."""
    sim = Simulation(seed)
    assert sim.options.max_parallel_writes == 2
    sim.run()
