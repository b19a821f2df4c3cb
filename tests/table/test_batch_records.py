"""Exactly-once records through a merge, a split and an overwrite (issue 37, hole 1).

A batch of an app (``app_id``, ``batch_version``) commits one shard of a table; a rescale or an
overwrite then seals the other shard, whose commit is refused (``ShardMapConflict``). The re-run
the error message advises must write what is missing: a database that covers several old key
ranges records a batch as applied only where every one of them had it applied
(:func:`slatedb_core.manifest.model.combined_range_transactions`). Before the fix a merge and an
overwrite recorded the highest version of any source, so the re-run was SKIPPED everywhere and
half of the batch was lost with the job reporting success.

Driven through the real table ingest (``plan_ingest``/``stage_ssts``/``commit_shard``, the steps
of tests/table/ingest_steps.py) on a local store (see tests/table/conftest.py)."""

from __future__ import annotations

import pytest

from slatedb_core.errors import ShardMapConflict
from slatedb_core.manifest.model import AppVersion, combined_range_transactions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, table_app_versions
from slatedb_core.table.ingest import REFUSED, SKIPPED, WRITTEN
from slatedb_core.table.overwrite import overwrite_table
from tests.table.ingest_steps import (
    ALL,
    BATCH,
    MID,
    commit,
    contents,
    half_committed,
    rerun,
    rows_batch,
)


# ---- the rule ---------------------------------------------------------------------------------
def test_a_combined_range_records_the_lowest_version_and_only_apps_every_range_has() -> None:
    a = (AppVersion("both", 5), AppVersion("only-a", 1), AppVersion("z", 9))
    b = (AppVersion("both", 3), AppVersion("z", 9))
    assert combined_range_transactions([a, b]) == (AppVersion("both", 3), AppVersion("z", 9))
    assert combined_range_transactions([b, a]) == combined_range_transactions([a, b])
    assert combined_range_transactions([a]) == a
    assert combined_range_transactions([a, ()]) == ()
    assert combined_range_transactions([]) == ()


# ---- merge ------------------------------------------------------------------------------------
def test_a_merge_of_shards_a_batch_reached_one_of_is_refused_until_its_rerun(
    local: ObjectStore,
) -> None:
    """One merged database records one version per app for all its keys, so it can hold the
    half-committed batch neither as applied (shard 1's rows lost) nor as not applied (its re-run
    writes shard 0's rows a second time: tests/table/test_batch_rerun_after_merge.py). The
    merge is refused, the shards unsealed; the re-run writes shard 1; then the merge goes
    through."""
    plan, staged = half_committed(local)
    with Table.open("t", local) as t, pytest.raises(ShardMapConflict, match="refused"):
        t.merge(0)
    assert commit(local, plan, staged, 1).status == WRITTEN  # unsealed: the job finishes
    assert contents(local) == ALL
    with Table.open("t", local) as t:
        t.merge(0)
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version}
    (again,) = rerun(local, "job-3")
    assert again.status == SKIPPED
    assert contents(local) == ALL


def test_a_merge_keeps_a_batch_both_shards_had(local: ObjectStore) -> None:
    plan, staged = half_committed(local)
    assert commit(local, plan, staged, 1).status == WRITTEN
    with Table.open("t", local) as t:
        t.merge(0)
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version}
    assert [s.status for s in rerun(local, "job-2")] == [SKIPPED]
    assert contents(local) == ALL


# ---- split ------------------------------------------------------------------------------------
def test_a_rerun_after_a_split_of_the_refused_shard_writes_exactly_its_rows(
    local: ObjectStore,
) -> None:
    """A split child covers part of one old range: it keeps its source's records."""
    plan, staged = half_committed(local)
    with Table.open("t", local) as t:
        t.split(1, b"k075")
    assert commit(local, plan, staged, 1).status == REFUSED
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version, 1: None, 2: None}
    out = rerun(local, "job-2")
    assert [(s.status, s.rows) for s in out] == [(SKIPPED, 0), (WRITTEN, 25), (WRITTEN, 25)]
    assert contents(local) == ALL


def test_a_merge_and_a_split_back_keep_a_batch_both_shards_had(
    local: ObjectStore,
) -> None:
    """The split children of a merged shard inherit what the merge recorded."""
    plan, staged = half_committed(local)
    assert commit(local, plan, staged, 1).status == WRITTEN
    with Table.open("t", local) as t:
        t.merge(0)
    with Table.open("t", local) as t:
        t.split(0, MID)
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version, 1: BATCH.version}
    assert [s.status for s in rerun(local, "job-2")] == [SKIPPED, SKIPPED]
    assert contents(local) == ALL


# ---- overwrite --------------------------------------------------------------------------------
def test_an_overwrite_carries_into_each_target_only_what_its_range_had_applied(
    local: ObjectStore,
) -> None:
    """The overwrite rewrites the table with its own contents (the half the batch wrote, as a
    re-encoding would) under its own txn; the batch's re-run then writes the other half. The
    overwrite's txn is recorded on every target."""
    half_committed(local)
    nightly = AppVersion("nightly", 1)
    half = {k: v for k, v in ALL.items() if k < MID}
    out = overwrite_table("t", local, [rows_batch(half)], txn=nightly)
    assert [s.status for s in out] == [WRITTEN, WRITTEN]
    assert table_app_versions(local, "t", BATCH.app_id) == {0: BATCH.version, 1: None}
    assert table_app_versions(local, "t", nightly.app_id) == {0: 1, 1: 1}
    assert [(s.status, s.rows) for s in rerun(local, "job-2")] == [(SKIPPED, 0), (WRITTEN, 50)]
    assert contents(local) == ALL
    # the overwrite itself stays applied: its re-run is a no-op
    again = overwrite_table("t", local, [], txn=nightly)
    assert {s.status for s in again} == {SKIPPED}
    assert contents(local) == ALL
