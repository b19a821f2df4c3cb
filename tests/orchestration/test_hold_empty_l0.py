"""A compaction requested on an empty L0 (its WAL backlog over the limit) that fails with an
alert does not hold the database's compactions forever: the hold is judged on "every L0 SST it
was launched on is still in L0", which an empty launch set always meets, so neither a repair
nor time lifted it, and the schedules, which share the hold since issue 40 item 9, never
compacted that database again until someone ran a compaction by hand (issue 40 adversarial
review: a schedule hold that never lifts).

The sensor records the L0 a compaction was requested on as ``list(status.l0_sst_ids)``
(orchestration/fleet_sensor.py), an empty list here; the hold is the one function the sensor,
the schedules and the fleet view call."""

from __future__ import annotations

from orchestration.fleet_state import ALERT_HOLD_S, Memory, compaction_hold

T0 = 1_800_000_000.0


def _failed_on_empty_l0() -> Memory:
    memory = Memory()
    memory.requested_l0 = []  # requested for the WAL backlog, L0 empty
    memory.requested_at = T0 - 60
    memory.compaction = ["FAILURE", T0, "CorruptionError"]
    return memory


def test_the_hold_of_a_failure_on_an_empty_l0_ends() -> None:
    memory = _failed_on_empty_l0()
    # held at first, like any failure with an alert
    assert compaction_hold("db", (), memory, T0 + 60) is not None
    # but not for ever: after the alert hold, as a run whose L0 is not known
    assert compaction_hold("db", ("new-l0",), memory, T0 + ALERT_HOLD_S + 1) is None
    assert compaction_hold("db", (), memory, T0 + ALERT_HOLD_S + 1) is None


def test_a_failure_on_a_known_l0_still_holds_while_that_l0_stays() -> None:
    memory = _failed_on_empty_l0()
    memory.requested_l0 = ["a", "b"]
    assert compaction_hold("db", ("a", "b", "c"), memory, T0 + 10 * ALERT_HOLD_S) is not None
    assert compaction_hold("db", ("c",), memory, T0 + 60) is None  # repaired: L0 changed
