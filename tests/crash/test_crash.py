"""Crash points: every store call of every operation, the process killed before and after it.

Each crash point is its own test id, ``test_crash[<operation>-<side>-<index>-<op>-<kind>-<store>]``:
the scenario's setup is restored into a fresh store, the operation runs in a process that dies at
the point, and the recovery (``tests.crash.scenarios``) checks that the database opens, no
acknowledged write is lost, the invariants hold, the operation can be retried, and the rest of
the workload runs. ``python -m tests.crash.report`` prints the number of points per operation.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.crash.enumerate import Point, all_points, crash
from tests.crash.scenarios import SCENARIOS
from tests.crash.store import ProcessKilled

POINTS = all_points()

# On S3 (moto over HTTP, ~100x slower per request, ~2.5 s a point) only the most delicate points
# run: right after a conditional write took effect, the answer lost. make test runs the first
# two of each operation (35 points); the other 48 are in the slow suite, which CI runs too.
S3_OPS = {"put_if_absent", "put_if_match"}
S3_FAST_PER_SCENARIO = 2


def _params() -> list[object]:
    params: list[object] = []
    on_s3: dict[str, int] = {}
    for p in POINTS:
        params.append(pytest.param(p, "memory", id=f"{p.id}-memory"))
        params.append(pytest.param(p, "local", id=f"{p.id}-local"))
        if p.side == "after" and p.call.op in S3_OPS:
            seen = on_s3[p.scenario] = on_s3.get(p.scenario, 0) + 1
            marks = [pytest.mark.s3] + ([pytest.mark.slow] if seen > S3_FAST_PER_SCENARIO else [])
            params.append(pytest.param(p, "s3", id=f"{p.id}-s3", marks=marks))
    return params


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> ObjectStore:
    if kind == "memory":
        return open_store(f"memory://crash-{uuid.uuid4().hex}")
    if kind == "local":
        return open_store((tmp_path / "store").as_uri())
    moto = request.getfixturevalue("moto_s3")
    return open_store(moto.url(moto.new_bucket()))


@pytest.mark.parametrize(("point", "kind"), _params())
def test_crash(point: Point, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = _store(kind, tmp_path, request)
    crashed = crash(point, store)
    out = crashed.outcome
    at = crashed.store.crashed_at
    assert out.died, f"the crash point {point.id} was never reached: {crashed.store.calls}"
    assert at is not None and (at.op, at.kind, at.ordinal) == (
        point.call.op,
        point.call.kind,
        point.call.ordinal,
    )
    assert at.index == point.call.index or not SCENARIOS[point.scenario].ordered, (
        f"the operation's calls changed order: the crash call is #{at.index}, recorded as "
        f"#{point.call.index}: {crashed.store.calls}"
    )
    # Whatever the operation raised on its way out must be the death or a consequence of it.
    assert out.error is None or isinstance(out.error, ProcessKilled | Exception)
    after_death = crashed.store.calls_after_death
    SCENARIOS[point.scenario].recover(store, crashed.state, out)
    assert crashed.store.calls_after_death == after_death, (
        f"the dead process made calls later: {crashed.store.late_calls[after_death:]}"
    )
