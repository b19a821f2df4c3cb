"""The table-level seeded simulation (issue 37; :mod:`tests.sim.table_harness`): a campaign of
schedules in the default run, a longer one in the slow suite, and the replay of one seed.

Before the fixes of issue 37 (cd57887) the campaign found all five holes by itself; the seeds
that found them and how many schedules it took are in tests/sim/README.md ("Table-level
simulation")."""

from __future__ import annotations

import pytest

from tests.sim.table_harness import TableSimulation
from tests.sim.table_run import campaign

DEFAULT_SCHEDULES = 24
SLOW_SCHEDULES = 200


def _run(seeds: range) -> None:
    total, by, failures = campaign(seeds, workers=1)
    assert not failures, (
        f"{len(failures)} failing schedule(s) (invariant -> seeds: {by}); replay with:\n"
        + "\n".join(failures)
    )
    assert total.schedules == len(seeds)


def test_table_campaign() -> None:
    """Every invariant holds over the default campaign's schedules (seeds 0..23)."""
    _run(range(DEFAULT_SCHEDULES))


def test_table_campaign_long() -> None:
    """The slow suite's campaign: 200 more schedules (seeds 1000..1199)."""
    _run(range(1000, 1000 + SLOW_SCHEDULES))


def test_a_table_seed_replays_the_same_schedule() -> None:
    """One seed, run twice, takes the same steps (the seeded generator decides everything)."""
    traces: list[list[str]] = [[], []]
    for trace in traces:
        try:
            TableSimulation(3, trace=trace.append).run()
        except AssertionError:
            pass  # the replay is what is tested here; the campaigns judge the outcome
    steps = [[line for line in t if line.startswith("[")] for t in traces]
    assert steps[0] == steps[1] and len(steps[0]) > 10


@pytest.mark.parametrize("seed", [0])
def test_a_failing_table_seed_prints_its_replay_command(seed: int) -> None:
    """A violation's message starts with the one-line command that replays it."""
    from tests.sim.table_base import REPRO
    from tests.sim.table_model import TableViolation

    sim = TableSimulation(seed)
    sim.found.append(("stale-handle", "forced"))
    with pytest.raises(TableViolation) as e:
        sim.run()
    assert str(e.value).startswith(f"[stale-handle] {REPRO.format(seed=seed)}  # ")
