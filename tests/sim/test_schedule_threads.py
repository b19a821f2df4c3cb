"""A schedule replays because the schedule, not the OS scheduler, orders every store request.

Issue 41, item 2: ``test_a_seed_replays_the_same_schedule[3-False]`` failed now and then under
load, on the inheritance chain and on the composed writer alike. The cause was a thread the
schedule does not drive: the WAL writer's boundary lease read (``boundary-lease-read``,
:mod:`slatedb_core.meta.lease`) ran beside the WAL create, so the two requests drew from the
FaultyStore's seeded RNG in whichever order the OS picked, and whether a read was fresh enough
to vouch for a create depended on the wall clock (a 50 ms lease under pytest). These tests fail
whenever any request of a schedule comes from such a thread, however lightly loaded the machine.
"""

from __future__ import annotations

import pytest

from tests.sim.harness import Simulation


def _driven(thread: str) -> bool:
    """The main thread runs the steps; ``sim-*`` threads are stalled operations it parks and
    releases one at a time (tests/sim/actors.py)."""
    return thread == "MainThread" or thread.startswith("sim-")


@pytest.mark.parametrize("seed", [3, 17, 64])
def test_every_store_request_comes_from_a_thread_the_schedule_drives(seed: int) -> None:
    sim = Simulation(seed)
    sim.run()
    seen = [(t, p) for _, t, p in sim.rec.creates + sim.rec.boundary_reads]
    assert seen, "the schedule made no creates or boundary reads: nothing was checked"
    assert [(t, p) for t, p in seen if not _driven(t)] == []
