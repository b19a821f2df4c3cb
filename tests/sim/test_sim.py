"""The seeded simulation in the default test run, and tests that its judges can fail.

``test_default_campaign`` runs 1,000 schedules (seeds 0-999); a failure names the command that
replays its schedule. Longer campaigns: ``python -m tests.sim.run --schedules N --workers K``.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import Manifest
from slatedb_core.store.url import open_store
from tests.sim import model as m
from tests.sim.harness import run_schedule
from tests.sim.recorder import InvariantViolation, RecordingStore
from tests.sim.run import campaign, report

DEFAULT_SCHEDULES = int(os.environ.get("SIM_SCHEDULES", "1000"))
WORKERS = int(os.environ.get("SIM_WORKERS", "2"))
MANIFEST = "db/manifest/{:020d}.manifest"


@pytest.mark.timeout(900)  # ~1-2 min on 2 cores; headroom for a machine shared with other jobs
@pytest.mark.slow  # moved to the slow suite: make test stays well under 20 minutes
def test_default_campaign() -> None:
    started = time.monotonic()
    total, failures = campaign(range(DEFAULT_SCHEDULES), WORKERS)
    print("\n" + report(total, failures, time.monotonic() - started))
    assert not failures, "\n".join(failures)
    assert total.schedules == DEFAULT_SCHEDULES
    # the campaign exercised what it claims to
    assert total.faults > 0 and total.pauses > 0 and total.outcomes["fenced"] > 0
    assert total.outcomes["crash:ok"] > 0 and total.outcomes["clone:ok"] > 0


TWO_PHASE_SCHEDULES = int(os.environ.get("SIM_TWO_PHASE_SCHEDULES", "200"))


@pytest.mark.slow  # 30 s on 2 cores; CI's test-slow runs it (keeps make test under 20 min)
@pytest.mark.timeout(900)
def test_two_phase_campaign() -> None:
    """The same schedules over a store that ignores If-None-Match / If-Match, made whole by
    two-phase CAS over SQLite, with faults injected under the protocol as well."""
    started = time.monotonic()
    total, failures = campaign(range(TWO_PHASE_SCHEDULES), WORKERS, two_phase=True)
    print("\n" + report(total, failures, time.monotonic() - started))
    assert not failures, "\n".join(failures)
    assert total.schedules == TWO_PHASE_SCHEDULES
    assert total.faults > 0 and total.outcomes["fenced"] > 0 and total.outcomes["crash:ok"] > 0


def _normalised(lines: list[str]) -> list[str]:
    """Traces without the ids and clocks that differ between runs by design."""
    out = []
    for line in lines:
        line = re.sub(r"[0-9A-HJKMNP-TV-Z]{26}", "ULID", line)
        line = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", "UUID", line)
        out.append(re.sub(r"\d{10,}", "N", line))
    return out


@pytest.mark.parametrize("seed, two_phase", [(3, False), (17, False), (64, False), (17, True)])
def test_a_seed_replays_the_same_schedule(seed: int, two_phase: bool) -> None:
    runs: list[list[str]] = []
    for _ in range(2):
        trace: list[str] = []
        run_schedule(seed, trace=trace.append, two_phase=two_phase)
        runs.append(_normalised(trace))
    assert runs[0] == runs[1]
    assert len(runs[0]) > 10


# ---- the recorder's rules fire ----------------------------------------------------------------
def _recorder() -> RecordingStore:
    return RecordingStore(open_store("memory://"))


def test_recorder_flags_a_second_object_at_a_committed_id() -> None:
    rec = _recorder()
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest()))
    rec.inner.delete(MANIFEST.format(1))  # behind the recorder's back, as a buggy store would
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest()))  # a fresh nonce
    assert any("two different objects" in v for v in rec.violations)


def test_recorder_flags_deletes_ahead_of_the_boundary_and_of_the_latest() -> None:
    rec = _recorder()
    for i in (1, 2, 3):
        rec.put_if_absent(MANIFEST.format(i), encode_manifest(Manifest()))
    rec.put_if_absent("db/gc/manifest.boundary", b"1")
    rec.delete(MANIFEST.format(1))
    assert rec.violations == []
    rec.delete(MANIFEST.format(3))
    assert any("ahead of the manifest boundary" in v for v in rec.violations)
    assert any("latest manifest" in v for v in rec.violations)


def test_recorder_flags_a_boundary_moving_back_and_holes_above_it() -> None:
    rec = _recorder()
    rec.put_if_absent("db/gc/wal.boundary", b"5")
    rec.put("db/gc/wal.boundary", b"4")
    assert any("moved back" in v for v in rec.violations)
    for i in (1, 2, 4):
        rec.put_if_absent(MANIFEST.format(i), encode_manifest(Manifest()))
    assert any("ids above the boundary" in v for v in rec.check())


def test_recorder_flags_decreasing_epochs() -> None:
    rec = _recorder()
    rec.put_if_absent(MANIFEST.format(1), encode_manifest(Manifest(writer_epoch=2)))
    rec.put_if_absent(MANIFEST.format(2), encode_manifest(Manifest(writer_epoch=1)))
    assert any("epochs decreased" in v for v in rec.violations)


def test_recorder_flags_an_unconditional_write_of_a_sequenced_object() -> None:
    rec = _recorder()
    rec.put("db/wal/00000000000000000001.sst", b"w")
    assert any("unconditional put" in v for v in rec.violations)


# ---- the model's judgements fire --------------------------------------------------------------
def test_model_flags_a_lost_acknowledged_write() -> None:
    model = m.Model()
    model.issue(1, [(b"k0", m.encode(1, b"a"))])
    model.ack(1)
    model.issue(1, [(b"k0", m.encode(2, b"b"))])  # maybe: may or may not be durable
    state: dict[bytes, bytes | None] = {b"k0": m.encode(2, b"b")}
    model.check_durable(state, "t")
    state[b"k0"] = m.encode(1, b"a")
    model.check_durable(state, "t")
    with pytest.raises(InvariantViolation, match="acknowledged write lost"):
        model.check_durable({b"k0": None}, "t")


def test_model_flags_a_state_that_is_not_a_prefix() -> None:
    model = m.Model()
    model.issue(1, [(b"k0", m.encode(1, b"a"))])
    model.issue(1, [(b"k1", m.encode(2, b"b"))])
    model.ack(1)
    model.check_prefix({b"k0": m.encode(1, b"a")}, "t")  # cut after #1
    with pytest.raises(InvariantViolation, match="not a prefix"):
        model.check_prefix({b"k1": m.encode(2, b"b")}, "t")  # #2 without the acked #1


def test_bank_check_flags_a_broken_total_and_a_torn_opening() -> None:
    full = {a: m.encode(1, b"%d" % m.OPENING_BALANCE) for a in m.ACCOUNTS}
    m.check_bank(full, "t")
    m.check_bank({}, "t")
    with pytest.raises(InvariantViolation, match="bank total"):
        m.check_bank({**full, m.ACCOUNTS[0]: m.encode(2, b"0")}, "t")
    with pytest.raises(InvariantViolation, match="bank total"):
        m.check_bank({m.ACCOUNTS[0]: full[m.ACCOUNTS[0]]}, "t")
