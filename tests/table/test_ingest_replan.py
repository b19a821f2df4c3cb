"""A job whose plan record was collected stays expired when its id is planned again (issue 37,
adversarial review of 104a7be, hole B).

104a7be refuses the commits of a job without a txn once the table GC collected its plan record
(and its done markers with it). But ``plan_ingest(job_id=...)`` wrote the record again for a
job id given twice, and the COLLECTED plan's attempts (a Spark stage re-run staging its rows
afresh, a zombie copy) then found "its" record and committed the shard a second time, over a
delete acknowledged since. The record now carries a token its plan holds; an attempt commits
only while the record is its own plan's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import IngestJobExpired
from slatedb_core.layout import ingest_plan_record
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import SKIPPED, WRITTEN, plan_ingest
from tests.table.conftest import OPTS
from tests.table.ingest_steps import stage_and_commit

ROW = {b"a": b"1"}


def _get(store: ObjectStore) -> bytes | None:
    with Table.open("t", store, OPTS) as t:
        return t.get(b"a")


def test_a_collected_plan_stays_expired_when_its_job_id_is_planned_again(
    mem: ObjectStore,
) -> None:
    Table.create("t", mem, []).close()
    old = plan_ingest("t", mem, job_id="nightly")
    assert stage_and_commit(mem, old, ROW) == WRITTEN
    with Table.open("t", mem, OPTS) as t:
        with t.writer(0) as db:
            db.delete(b"a")  # acknowledged after the job's commit
        t.collect_garbage(min_age=timedelta(0), ingest_min_age=timedelta(0))
    plan_ingest("t", mem, job_id="nightly")  # the id planned again: a new job
    try:
        status = stage_and_commit(mem, old, ROW, attempt=1)  # an attempt of the collected plan
    except IngestJobExpired:
        status = "expired"
    assert status in ("expired", SKIPPED)
    assert _get(mem) is None


def test_planning_a_live_job_again_keeps_it_one_job(mem: ObjectStore) -> None:
    """Planned twice while its record is there: the same job, one commit per shard."""
    Table.create("t", mem, []).close()
    first = plan_ingest("t", mem, job_id="j")
    again = plan_ingest("t", mem, job_id="j")
    assert stage_and_commit(mem, first, ROW) == WRITTEN
    with Table.open("t", mem, OPTS) as t, t.writer(0) as db:
        db.delete(b"a")
    stage_and_commit(mem, again, ROW, attempt=1)  # reports the first plan's commit, writes nothing
    assert _get(mem) is None


def test_a_job_id_whose_collected_job_left_markers_is_refused_not_skipped(
    mem: ObjectStore,
) -> None:
    """Review of 548d195 with real Spark failures: a job id planned again after its plan record
    was collected is a new job, but a done marker the collected job left (a GC that deleted the
    record, which goes first, and stopped before the markers; or the marker a late retry writes)
    made the new job's commit report SKIPPED, "an earlier attempt of this job committed it": its
    rows were lost under a success. Planning such an id is refused now, before anything is
    written, until the GC has collected the old job whole."""
    Table.create("t", mem, []).close()
    old = plan_ingest("t", mem, job_id="nightly")
    assert stage_and_commit(mem, old, ROW) == WRITTEN
    mem.delete(ingest_plan_record("t", "nightly"))  # the GC's first deletion, then a stop
    before = sorted(o.path for o in mem.list(""))
    with pytest.raises(IngestJobExpired, match="new job id"):
        plan_ingest("t", mem, job_id="nightly")
    assert sorted(o.path for o in mem.list("")) == before
    with Table.open("t", mem, OPTS) as t:  # once the GC finished, the id is free again
        t.collect_garbage(min_age=timedelta(0), ingest_min_age=timedelta(0))
    fresh = plan_ingest("t", mem, job_id="nightly")
    assert stage_and_commit(mem, fresh, {b"a": b"3"}, run="run2") == WRITTEN
    assert _get(mem) == b"3"
