"""``changes_table_retained``, the check of ``changes_table_to_delta`` (issue 43, item 4): the
database check ``changes_consumer_retained``'s severities per table partition. ERROR once the
changes after the Delta table's table cursor were collected on a shard; WARN when the table's
consumer holds no live checkpoint on some live shard, keeps too many WAL SSTs there, or its
hold expires soon; the metadata names the shards at fault. Real Dagster, real deltalake, real
tables in a local store."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from orchestration.changes_assets import (
    ChangesToDeltaResource,
    changes_table_retained,
    changes_table_to_delta,
)
from orchestration.partitions import TABLES
from orchestration.resources import ObjectStoreResource
from slatedb_core import (
    ChangeFeed,
    ChangesOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ObjectStore,
    Table,
    TableOptions,
    run_gc_once,
)

OPTS = TableOptions(
    writer=DbOptions(flush_interval=timedelta(milliseconds=5)),
    reader=DbReaderOptions(manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None),
)


@pytest.fixture
def changes(tmp_path: Path) -> ChangesToDeltaResource:
    return ChangesToDeltaResource(
        root=str(tmp_path / "changes"), table_root=str(tmp_path / "tchanges"), consumer="to-delta"
    )


def _with(changes: ChangesToDeltaResource, **config: Any) -> ChangesToDeltaResource:
    """``changes`` with other settings (a resource's config is set when it is made)."""
    return ChangesToDeltaResource(
        **{**changes.model_dump(exclude_unset=True), **config},
    )


def _write(table: Table, puts: dict[bytes, bytes], *, flush: bool = False) -> None:
    for shard in table.shards:
        mine = {k: v for k, v in puts.items() if shard.contains(k)}
        if not mine:
            continue
        with table.writer(shard.index) as db:
            for k, v in mine.items():
                db.put(k, v)
                if flush:
                    db.flush_memtable()
    table.refresh()


def _two_shards(instance: dg.DagsterInstance, store: ObjectStore) -> list[str]:
    """Table ``t`` (partition ``t``) of two shards split at ``m``, a key written to each;
    its shard databases' paths."""
    instance.add_dynamic_partitions(TABLES, ["t"])
    with Table.create("t", store, [b"m"], OPTS) as table:
        _write(table, {b"a": b"1", b"n": b"1"})
        return [s.db_path for s in table.shards]


def _defs(store_resource: ObjectStoreResource, changes: ChangesToDeltaResource) -> dg.Definitions:
    return dg.Definitions(
        assets=[changes_table_to_delta],
        asset_checks=[changes_table_retained],
        jobs=[
            dg.define_asset_job(
                "check_only", selection=dg.AssetSelection.checks(changes_table_retained)
            )
        ],
        resources={"store": store_resource, "changes_delta": changes},
    )


def _pass(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    *,
    checked: bool = True,
) -> dg.AssetCheckEvaluation:
    """A pass of ``changes_table_to_delta`` with its check, as the job runs them (a pass that
    commits nothing records an observation: then the check does not run, ``checked=False``)."""
    result = dg.materialize(
        [changes_table_to_delta, changes_table_retained],
        partition_key="t",
        instance=instance,
        resources={"store": store_resource, "changes_delta": changes},
    )
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == int(checked)
    return evaluations[0] if checked else None  # type: ignore[return-value]


def _check_only(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
) -> dg.AssetCheckEvaluation:
    """The check alone for partition ``t``, as the UI's "Execute" runs it."""
    result = (
        _defs(store_resource, changes)
        .resolve_job_def("check_only")
        .execute_in_process(tags={"dagster/partition": "t"}, instance=instance)
    )
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def _at_fault(evaluation: dg.AssetCheckEvaluation) -> list[str]:
    return list(evaluation.metadata["shards_at_fault"].value)  # type: ignore[arg-type]


def test_the_deployment_job_runs_the_check_and_a_healthy_table_passes(
    store: ObjectStore, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """``changes_table_to_delta_job`` as build_definitions registers it runs the check after
    the pass; a table whose consumer holds every shard passes, before and after new writes."""
    from orchestration.definitions import build_definitions
    from orchestration.settings import Settings

    _two_shards(instance, store)
    defs = build_definitions(Settings(store={"url": (tmp_path / "store").as_uri()}))
    resource = ChangesToDeltaResource(table_root=str(tmp_path / "tchanges"))
    result = defs.resolve_job_def("changes_table_to_delta_job").execute_in_process(
        partition_key="t", instance=instance, resources={"changes_delta": resource}
    )
    assert result.success
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.passed, evaluation.description
    assert evaluation.metadata["shards"].value == 2 and _at_fault(evaluation) == []
    with Table.open("t", store, OPTS) as table:
        _write(table, {b"b": b"2", b"z": b"2"})  # new changes the Delta table lacks
    again = _check_only(instance, ObjectStoreResource(url=(tmp_path / "store").as_uri()), resource)
    assert again.passed, again.description


def test_a_table_not_yet_passed_over_passes_and_a_missing_table_warns(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    instance.add_dynamic_partitions(TABLES, ["t"])
    missing = _check_only(instance, store_resource, changes)
    assert not missing.passed and missing.severity == dg.AssetCheckSeverity.WARN
    assert "no table" in (missing.description or "")
    with Table.create("t", store, [b"m"], OPTS) as table:
        _write(table, {b"a": b"1"})
    fresh = _check_only(instance, store_resource, changes)
    assert fresh.passed and "not started" in (fresh.description or "")


def test_a_released_shard_hold_warns_and_names_the_shard(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    shards = _two_shards(instance, store)
    assert _pass(instance, store_resource, changes).passed
    # one shard's hold released behind the consumer's back (an operator's --release)
    ChangeFeed(shards[1], store, ChangesOptions(consumer="table:to-delta")).release()
    evaluation = _check_only(instance, store_resource, changes)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "not registered" in (evaluation.description or "")
    assert _at_fault(evaluation) == [shards[1]]
    with Table.open("t", store, OPTS) as table:
        _write(table, {b"z": b"2"})
    assert _pass(instance, store_resource, changes).passed  # the next pass registers it again


def test_too_many_wal_ssts_behind_on_one_shard_warns(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    shards = _two_shards(instance, store)
    _pass(instance, store_resource, changes)
    with Table.open("t", store, OPTS) as table:  # shard 0's writer moves on: WAL SSTs in L0
        _write(table, {f"b{i}".encode(): b"x" for i in range(4)}, flush=True)
    strict = _with(changes, wal_behind_max=1)
    evaluation = _check_only(instance, store_resource, strict)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "WAL SSTs" in (evaluation.description or "")
    assert _at_fault(evaluation) == [shards[0]]
    # a pass catches up, and moves the holds to its cursor once its Delta commit is made (as
    # the database pass does), so its own check passes
    assert _pass(instance, store_resource, strict).passed
    assert _check_only(instance, store_resource, strict).passed


def test_an_expiring_hold_warns(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    _two_shards(instance, store)
    hourly = _with(changes, consumer_lifetime="1h", expiry_warn="2h")
    evaluation = _pass(instance, store_resource, hourly)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "expires in" in (evaluation.description or "")
    assert len(_at_fault(evaluation)) == 2
    calm = _with(hourly, expiry_warn="10m")
    assert _check_only(instance, store_resource, calm).passed


def test_an_expired_hold_warns_then_collected_changes_are_an_error(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    shards = _two_shards(instance, store)
    short = _with(changes, consumer_lifetime="1s")
    _pass(instance, store_resource, short)
    with Table.open("t", store, OPTS) as table:  # only shard 1 moves on
        _write(table, {f"p{i}".encode(): b"x" for i in range(3)}, flush=True)
    time.sleep(2.1)  # the holds (whole seconds) expire: nothing keeps the changes
    expired = _check_only(instance, store_resource, short)
    assert not expired.passed and expired.severity == dg.AssetCheckSeverity.WARN
    assert "expired" in (expired.description or "")  # not collected yet
    assert _at_fault(expired) == shards
    for path in shards:
        run_gc_once(path, store, GarbageCollectorOptions(min_age=timedelta(0)))
    evaluation = _check_only(instance, store_resource, short)
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "collected" in (evaluation.description or "")
    assert shards[1] in (evaluation.description or "") and _at_fault(evaluation) == [shards[1]]


def test_a_split_after_the_last_pass_still_passes(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    """The split's targets inherit the consumer's hold (carry_consumers): the check run before
    the next pass finds every live shard held and the changes after the cursor readable, even
    once the GC collected a target's manifest 1 (the carried hold pins where its changes
    start, as for the pass)."""
    _two_shards(instance, store)
    assert _pass(instance, store_resource, changes).passed
    with Table.open("t", store, OPTS) as table:
        _write(table, {b"b": b"2"})
        table.split(0, b"f")
        _write(table, {b"c": b"3", b"g": b"3"}, flush=True)
        assert len(table.shards) == 3
        for shard in table.shards:  # the targets' manifest 1 collected: the carried hold stays
            run_gc_once(shard.db_path, store, GarbageCollectorOptions(min_age=timedelta(0)))
    evaluation = _check_only(instance, store_resource, changes)
    assert evaluation.passed, evaluation.description
    assert evaluation.metadata["shards"].value == 3
    assert _pass(instance, store_resource, changes).passed
