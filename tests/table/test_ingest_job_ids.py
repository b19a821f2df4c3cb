"""Ingest job ids name one directory under ``<table>/_ingest/`` (issue 37, adversarial review of
104a7be, hole D).

Job ids were not checked: ``plan_ingest(job_id="a/b")`` put job ``a/b``'s objects inside job
``a``'s directory, and the table GC, which groups a job's objects by the first directory under
``_ingest/``, took ``a``'s plan record for ``a/b``'s: collecting ``a`` deleted ``a/b``'s done
markers while ``a/b``'s own plan record stayed, so a fresh attempt of ``a/b`` committed its shard
a second time, over a delete acknowledged since. A job id is now one path segment (any str
without ``/``, not ``.`` or ``..``), checked wherever a plan is made."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import IngestJobExpired, InvalidArgument
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN, plan_ingest
from slatedb_core.table.overwrite import plan_overwrite
from tests.table.conftest import OPTS
from tests.table.ingest_steps import stage_and_commit

ROW = {b"a": b"1"}


@pytest.mark.parametrize("job_id", ["a/b", "/a", "a/", ".", "..", 7, b"a"])
def test_a_job_id_that_is_not_one_path_segment_is_refused(mem: ObjectStore, job_id: object) -> None:
    Table.create("t", mem, []).close()
    with pytest.raises(InvalidArgument, match="job id"):
        plan_ingest("t", mem, job_id=job_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="job id"):
        plan_overwrite("t", mem, job_id=job_id)  # type: ignore[arg-type]


def test_a_nested_job_never_commits_twice_after_the_gc(mem: ObjectStore) -> None:
    Table.create("t", mem, []).close()
    try:
        nested = plan_ingest("t", mem, job_id="a/b")
    except InvalidArgument:
        return  # refused up front: nothing can nest
    assert stage_and_commit(mem, nested, ROW) == WRITTEN
    with Table.open("t", mem, OPTS) as t:
        with t.writer(0) as db:
            db.delete(b"a")
        plan_ingest("t", mem, job_id="a")
        t.collect_garbage(min_age=timedelta(0), ingest_min_age=timedelta(0))
    try:
        stage_and_commit(mem, nested, ROW, attempt=1)
    except IngestJobExpired:
        pass
    with Table.open("t", mem, OPTS) as t:
        assert t.get(b"a") is None


def test_a_job_id_past_the_limit_is_refused_before_anything_is_written(
    mem: ObjectStore,
) -> None:
    """An overwrite's job id is kept in every later shard map (its outcome record), so ids are
    bounded (MAX_JOB_ID_CHARS); a longer one is InvalidArgument at planning, the store
    untouched."""
    from slatedb_core.table.ingest import MAX_JOB_ID_CHARS

    Table.create("t", mem).close()
    before = sorted((o.path, mem.get(o.path)) for o in mem.list(""))
    with pytest.raises(InvalidArgument, match="at most"):
        plan_ingest("t", mem, job_id="j" * (MAX_JOB_ID_CHARS + 1))
    assert sorted((o.path, mem.get(o.path)) for o in mem.list("")) == before
    plan_ingest("t", mem, job_id="j" * MAX_JOB_ID_CHARS)
