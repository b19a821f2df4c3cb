"""A compaction pass that loses every race to a source change is an error, never "nothing to do".

Issue 38 (follow-up, item A): when every compaction a pass tried found its sources changed before
its commit (MAX_CONSECUTIVE_CONFLICTS in a row, none committed), ``run_compaction_once`` returned
None and ``slatedb compact`` printed "nothing to compact" with exit 0. Every driver now shares one
rule (:class:`~slatedb_core.compactor.compactor.ConflictStreak`) and raises
:class:`CompactionContended`; the Spark driver's tests are in tests/spark/test_compact_contention.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from slatedb_core.cli.maintenance import compact_cmd
from slatedb_core.cli.output import Ctx
from slatedb_core.compactor import Compactor, read_latest_state, run_compaction_once
from slatedb_core.compactor.compactor import MAX_CONSECUTIVE_CONFLICTS
from slatedb_core.errors import CompactionContended, CompactionSourceChanged
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore

from . import read_back, seed_l0s
from .contention import SourceEditingStore

OPTS = CompactorOptions(l0_trigger=2, poll_interval=timedelta(milliseconds=20))


def test_a_pass_that_loses_every_race_raises_compaction_contended(store: ObjectStore) -> None:
    model = seed_l0s(store)
    racer = SourceEditingStore(store, "db")
    with pytest.raises(CompactionContended) as raised:
        run_compaction_once("db", racer, OPTS)
    e = raised.value
    assert e.attempts == MAX_CONSECUTIVE_CONFLICTS == racer.edits
    assert e.db_path == "db"
    assert isinstance(e.__cause__, CompactionSourceChanged)
    text = str(e)
    assert "nothing was compacted" in text and "retry later" in text
    assert "stop the other" in text
    m = ManifestStore(store, "db").read_latest().manifest
    assert m.compacted == () and len(m.l0) == 3  # nothing of ours was committed
    state = read_latest_state(store, "db")
    assert state is not None
    assert [c.status for c in state[1].compactions] == ["failed"] * MAX_CONSECUTIVE_CONFLICTS
    assert read_back(store)[0] == model


def test_conflicts_fewer_than_the_limit_in_a_row_still_compact(store: ObjectStore) -> None:
    model = seed_l0s(store)
    racer = SourceEditingStore(store, "db", edits=MAX_CONSECUTIVE_CONFLICTS - 1)
    stats = run_compaction_once("db", racer, OPTS)
    assert stats is not None and stats.compactions >= 1
    assert stats.failed == MAX_CONSECUTIVE_CONFLICTS - 1
    m = ManifestStore(store, "db").read_latest().manifest
    assert m.l0 == () and len(m.compacted) == 1
    assert read_back(store)[0] == model


def test_the_long_running_compactor_reports_a_lost_pass(store: ObjectStore) -> None:
    seed_l0s(store)
    racer = SourceEditingStore(store, "db")
    with Compactor("db", racer, OPTS) as c, pytest.raises(CompactionContended):
        c.run_once()
    assert c.fenced is None  # not fenced: the next pass may succeed


def _cli(store: ObjectStore) -> tuple[int, str, str]:
    ctx = Ctx("file:///unused", "db")
    ctx._store = store
    result = CliRunner().invoke(compact_cmd, [], obj=ctx)
    return result.exit_code, result.stdout, result.stderr


def test_the_compact_command_exits_nonzero_when_every_race_was_lost(store: ObjectStore) -> None:
    seed_l0s(store, flushes=CompactorOptions().l0_trigger)  # the command's default trigger
    code, out, err = _cli(SourceEditingStore(store, "db"))
    assert code == 1
    assert "nothing to compact" not in out
    assert "CompactionContended" in err and "retry later" in err
    # once the other tool stops, the same command compacts; then there is really nothing left
    code, out, _ = _cli(store)
    assert code == 0 and "compaction(s)" in out
    code, out, _ = _cli(store)
    assert code == 0 and "nothing to compact" in out
