"""``changes_to_delta`` and its check ``changes_consumer_retained`` (issue 43, item 4): a
database's change feed merged by key into a real Delta table (deltalake), materialized in-process
with real Dagster on real databases in a local store; the cursor lives in the Delta commit."""

from __future__ import annotations

import struct
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from devtools.sample_data import write_database
from orchestration.changes_assets import (
    ChangesToDeltaResource,
    changes_consumer_retained,
    changes_to_delta,
)
from orchestration.changes_delta import CURSOR_KEY, apply_changes, committed_cursor
from orchestration.resources import ObjectStoreResource, refuse_plain_secrets
from slatedb_core import Db, DbOptions, ObjectStore, run_gc_once
from slatedb_core.errors import ChangesCollected, InvalidArgument, MergeOperatorFailed
from slatedb_core.feed import ChangeFeed, ChangesOptions, Cursor
from slatedb_core.options import GarbageCollectorOptions
from tests.orchestration.conftest import add_partitions


@pytest.fixture
def changes(tmp_path: Path) -> ChangesToDeltaResource:
    return ChangesToDeltaResource(root=str(tmp_path / "changes"), consumer="to-delta")


def _kv(uri: str) -> dict[bytes, bytes]:
    t = DeltaTable(uri).to_pyarrow_table()
    return dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True))


def _materialize(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    db: str,
    *,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [changes_to_delta, changes_consumer_retained],
        partition_key=db,
        instance=instance,
        resources={"store": store_resource, "changes_delta": changes},
        raise_on_error=raise_on_error,
    )


def _check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def _check_only(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    db: str,
) -> dg.AssetCheckEvaluation:
    """The check alone, as the UI's "Execute" runs it for one partition (execute_in_process
    refuses partition_key= for a job of checks only: the partition tag is what the UI sets)."""
    defs = dg.Definitions(
        assets=[changes_to_delta],
        asset_checks=[changes_consumer_retained],
        jobs=[
            dg.define_asset_job(
                "check_only", selection=dg.AssetSelection.checks(changes_consumer_retained)
            )
        ],
        resources={"store": store_resource, "changes_delta": changes},
    )
    result = defs.resolve_job_def("check_only").execute_in_process(
        tags={"dagster/partition": db}, instance=instance
    )
    return _check(result)


def _meta(result: dg.ExecuteInProcessResult, key: str) -> Any:
    (mat,) = result.asset_materializations_for_node("changes_to_delta")
    return mat.metadata[key].value


def test_puts_and_deletes_arrive_and_a_second_pass_applies_only_new_changes(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    add_partitions(instance, "orders")
    with Db.open("orders", store) as db:
        for i in range(10):
            db.put(f"k{i}".encode(), f"v{i}".encode())
        db.delete(b"k3")
        db.put(b"k4", b"v4-new")
    first = _materialize(instance, store_resource, changes, "orders")
    uri = changes.uri("orders")
    expected = {f"k{i}".encode(): f"v{i}".encode() for i in range(10) if i != 3}
    expected[b"k4"] = b"v4-new"
    assert _kv(uri) == expected
    assert _meta(first, "changes") == 12 and _meta(first, "deletes") == 1  # k3
    cursor1 = DeltaTable(uri).history(1)[0][CURSOR_KEY]
    assert _meta(first, "cursor") == cursor1
    assert _check(first).passed

    with Db.open("orders", store) as db:
        db.delete(b"k0")
        db.put(b"k1", b"v1-new")
        db.put(b"k20", b"v20")
    second = _materialize(instance, store_resource, changes, "orders")
    assert _meta(second, "since") == cursor1
    assert _meta(second, "changes") == 3  # only the new ones (k0, k1, k20)
    assert _meta(second, "deletes") == 1 and _meta(second, "upserts") == 2
    del expected[b"k0"]
    expected[b"k1"] = b"v1-new"
    expected[b"k20"] = b"v20"
    assert _kv(uri) == expected
    version = DeltaTable(uri).version()

    third = _materialize(instance, store_resource, changes, "orders")  # nothing new
    assert not third.asset_materializations_for_node("changes_to_delta")
    assert DeltaTable(uri).version() == version
    # the consumer is registered and its checkpoint holds what the Delta table still needs
    (hold,) = ChangeFeed("orders", store).consumers()
    assert hold.name == "to-delta" and not hold.expired


def _i64(n: int) -> bytes:
    return struct.pack("<q", n)


def test_a_crash_after_the_delta_commit_neither_duplicates_nor_skips(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """The cursor is in the Delta commit itself: a pass that dies right after the commit (before
    the consumer's checkpoint moves or the materialization is recorded) leaves nothing to
    re-apply. Merge operands make a duplicate visible (each is added once)."""
    opts = DbOptions(merge_operator="add_int64")
    with Db.open("counts", store, opts) as db:
        for _ in range(3):
            db.merge(b"a", _i64(1))
        db.merge(b"b", _i64(5))
    uri = changes.uri("counts")

    class Crash(Exception):
        pass

    def crash(_: object) -> None:
        raise Crash

    kwargs: dict[str, Any] = {"consumer": "to-delta", "merge_operator": "add_int64"}
    with pytest.raises(Crash):
        apply_changes(store, "counts", uri, after_commit=crash, **kwargs)
    assert _kv(uri) == {b"a": _i64(3), b"b": _i64(5)}
    version = DeltaTable(uri).version()

    again = apply_changes(store, "counts", uri, **kwargs)  # the rerun after the crash
    assert again.version is None and again.changes == 0
    assert DeltaTable(uri).version() == version
    assert _kv(uri) == {b"a": _i64(3), b"b": _i64(5)}

    with Db.open("counts", store, opts) as db:
        db.merge(b"a", _i64(10))  # folded onto the value the Delta table holds
        db.merge(b"c", _i64(7))
    with pytest.raises(Crash):
        apply_changes(store, "counts", uri, after_commit=crash, **kwargs)
    apply_changes(store, "counts", uri, **kwargs)
    assert _kv(uri) == {b"a": _i64(13), b"b": _i64(5), b"c": _i64(7)}


def test_merge_operands_without_an_operator_are_refused_and_commit_nothing(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    add_partitions(instance, "counts")
    with Db.open("counts", store, DbOptions(merge_operator="add_int64")) as db:
        db.put(b"x", _i64(1))
    _materialize(instance, store_resource, changes, "counts")
    uri = changes.uri("counts")
    version = DeltaTable(uri).version()
    with Db.open("counts", store, DbOptions(merge_operator="add_int64")) as db:
        db.merge(b"x", _i64(1))
    result = _materialize(instance, store_resource, changes, "counts", raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "merge operator" in str(failure.event_specific_data)
    assert DeltaTable(uri).version() == version
    with pytest.raises(InvalidArgument, match="merge_operator"):
        apply_changes(store, "counts", uri, consumer="to-delta")
    with_operator = ObjectStoreResource(url=store_resource.url, merge_operator="add_int64")
    _materialize(instance, with_operator, changes, "counts")
    assert _kv(uri) == {b"x": _i64(2)}


def test_the_check_warns_when_the_consumer_falls_behind(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    add_partitions(instance, "orders")
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    _materialize(instance, store_resource, changes, "orders")
    with Db.open("orders", store) as db:  # the writer moves on: WAL SSTs flushed to L0
        for i in range(4):
            db.put(f"n{i}".encode(), b"x")
            db.flush_memtable()
    strict = ChangesToDeltaResource(
        root=changes.root, consumer="to-delta", wal_behind_max=1, expiry_warn="1s"
    )
    evaluation = _check_only(instance, store_resource, strict, "orders")
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "WAL SSTs" in (evaluation.description or "")
    # the next pass catches up, and the check passes again
    caught_up = _materialize(instance, store_resource, strict, "orders")
    assert _check(caught_up).passed


def test_the_check_is_an_error_once_the_changes_were_collected(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    add_partitions(instance, "orders")
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    short = ChangesToDeltaResource(root=changes.root, consumer="to-delta", consumer_lifetime="1s")
    _materialize(instance, store_resource, short, "orders")
    with Db.open("orders", store) as db:
        for i in range(3):
            db.put(f"n{i}".encode(), b"x")
            db.flush_memtable()
    time.sleep(2.1)  # the checkpoint (whole seconds) expires: nothing keeps its changes
    expired = _check_only(instance, store_resource, short, "orders")
    assert not expired.passed and expired.severity == dg.AssetCheckSeverity.WARN
    assert "expired" in (expired.description or "")  # not collected yet
    run_gc_once("orders", store, GarbageCollectorOptions(min_age=timedelta(0)))
    with pytest.raises(ChangesCollected):
        list(
            ChangeFeed("orders", store, ChangesOptions(bootstrap=False)).changes(
                committed_cursor(short.uri("orders"), "orders", "to-delta").cursor
            )
        )
    evaluation = _check_only(instance, store_resource, short, "orders")
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert "collected" in (evaluation.description or "")
    failed = _materialize(instance, store_resource, short, "orders", raise_on_error=False)
    assert not failed.success  # the pass refuses too: never a silent gap


def test_a_pass_over_changes_without_rows_records_its_cursor_in_delta(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """A pass whose batches only move the cursor (WAL SSTs without rows: a writer's open and
    close) still commits that cursor: the consumer's checkpoint moves only to a cursor the Delta
    table recorded, never past it (else the GC could collect what the next pass resumes from)."""
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    uri = changes.uri("orders")
    apply_changes(store, "orders", uri, consumer="to-delta")
    for _ in range(2):
        with Db.open("orders", store):
            pass  # fencing WAL SSTs, no rows
    applied = apply_changes(store, "orders", uri, consumer="to-delta")
    assert applied.changes == 0 and applied.cursor != applied.since
    recorded = committed_cursor(uri, "orders", "to-delta")
    assert recorded.cursor == applied.cursor and recorded.version == applied.version == 1
    assert _kv(uri) == {b"a": b"1"}


def test_a_delta_root_carrying_a_credential_is_refused_by_the_definitions() -> None:
    """The resource goes through refuse_plain_secrets with the others (definitions.py): a root
    URL with a key in it never reaches Dagster's config."""
    from orchestration.definitions import defs

    assert isinstance((defs.resources or {})["changes_delta"], ChangesToDeltaResource)
    leaky = ChangesToDeltaResource(root="s3://AKIAEXAMPLE:notarealsecret@bucket/changes")
    with pytest.raises(InvalidArgument, match="root holds a credential") as e:
        refuse_plain_secrets({"changes_delta": leaky})
    assert "notarealsecret" not in str(e.value)


def test_a_concurrent_pass_of_the_same_consumer_fails_its_commit(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """Two passes that read the same cursor: the second to commit fails (its Delta commit is
    built on the version it read the cursor from, with the consumer's application transaction)
    instead of applying the same operands twice."""
    from deltalake.exceptions import CommitFailedError

    opts = DbOptions(merge_operator="add_int64")
    kwargs: dict[str, Any] = {"consumer": "to-delta", "merge_operator": "add_int64"}
    uri = changes.uri("counts")
    with Db.open("counts", store, opts) as db:
        db.merge(b"a", _i64(1))
    apply_changes(store, "counts", uri, **kwargs)
    with Db.open("counts", store, opts) as db:
        db.merge(b"a", _i64(10))

    def other_pass() -> None:
        apply_changes(store, "counts", uri, **kwargs)

    with pytest.raises(CommitFailedError):
        apply_changes(store, "counts", uri, before_commit=other_pass, **kwargs)
    assert _kv(uri) == {b"a": _i64(11)}
    assert apply_changes(store, "counts", uri, **kwargs).version is None  # nothing left


def test_a_new_consumer_starts_from_a_snapshot_and_resumes_inside_it(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """A database whose WAL is already in L0 bootstraps the feed from a snapshot
    (docs/changes.md): passes of at most ``max_rows`` changes record snapshot cursors, resume
    inside the snapshot, then follow the WAL."""
    n = write_database(store, "orders", prefix="o-", l0_ssts=2, rows_per_sst=50, wal_rows=0)
    uri = changes.uri("orders")
    kwargs: dict[str, Any] = {"consumer": "to-delta", "options": ChangesOptions(batch_rows=16)}
    first = apply_changes(store, "orders", uri, max_rows=20, **kwargs)
    assert first.snapshot_rows == first.changes and 20 <= first.changes < n
    assert first.cursor is not None and Cursor.decode(first.cursor).in_snapshot
    while True:
        step = apply_changes(store, "orders", uri, max_rows=20, **kwargs)
        if step.version is None:
            break
    assert len(_kv(uri)) == n
    with Db.open("orders", store) as db:
        db.delete(b"o-00000000")
        db.put(b"new", b"1")
    last = apply_changes(store, "orders", uri, **kwargs)
    assert last.snapshot_rows == 0 and last.deletes == 1 and last.upserts == 1
    kv = _kv(uri)
    assert len(kv) == n and b"o-00000000" not in kv and kv[b"new"] == b"1"


def test_the_check_warns_before_the_consumer_checkpoint_expires(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    add_partitions(instance, "orders")
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    hourly = ChangesToDeltaResource(
        root=changes.root, consumer="to-delta", consumer_lifetime="1h", expiry_warn="2h"
    )
    result = _materialize(instance, store_resource, hourly, "orders")
    evaluation = _check(result)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert "expires in" in (evaluation.description or "")
    calm = ChangesToDeltaResource(
        root=changes.root, consumer="to-delta", consumer_lifetime="1h", expiry_warn="10m"
    )
    assert _check_only(instance, store_resource, calm, "orders").passed


def test_a_table_with_rows_but_no_recorded_cursor_is_refused(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """Rows no commit of this feed recorded (another writer's table, or one whose log lost our
    commits to log cleanup) are never merged into from the start: keys deleted since would stay.
    An empty table made in advance is fine."""
    from deltalake import write_deltalake

    from orchestration.changes_delta import DELTA_SCHEMA

    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    empty, full = changes.uri("empty"), changes.uri("full")
    write_deltalake(empty, DELTA_SCHEMA.empty_table())
    first = apply_changes(store, "orders", empty, consumer="to-delta")
    assert first.upserts == 1
    for _ in range(20):  # another writer's commits after ours: the cursor is found past them
        write_deltalake(empty, DELTA_SCHEMA.empty_table(), mode="append")
    assert committed_cursor(empty, "orders", "to-delta").cursor == first.cursor
    assert apply_changes(store, "orders", empty, consumer="to-delta").version is None
    write_deltalake(full, pa.table({"key": [b"z"], "value": [b"9"]}))
    with pytest.raises(InvalidArgument, match="no cursor"):
        apply_changes(store, "orders", full, consumer="other")
    assert _kv(full) == {b"z": b"9"}
    with pytest.raises(InvalidArgument, match="receives the changes of database 'orders'"):
        apply_changes(store, "other", empty, consumer="to-delta")


def test_the_job_of_the_deployment_runs_a_pass_and_its_check(
    store: ObjectStore, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """``changes_to_delta_job`` as build_definitions registers it, with its default resource
    (the Delta root relative to the working directory, here tmp_path)."""
    from orchestration.definitions import build_definitions
    from orchestration.settings import Settings

    add_partitions(instance, "orders")
    with Db.open("orders", store) as db:
        db.put(b"a", b"1")
    defs = build_definitions(Settings(store={"url": (tmp_path / "store").as_uri()}))
    job = defs.resolve_job_def("changes_to_delta_job")
    result = job.execute_in_process(
        partition_key="orders",
        instance=instance,
        resources={"changes_delta": ChangesToDeltaResource(root=str(tmp_path / "changes"))},
    )
    assert result.success and _check(result).passed
    assert _kv(ChangesToDeltaResource(root=str(tmp_path / "changes")).uri("orders")) == {b"a": b"1"}


def test_a_merge_operator_failing_names_the_key_and_commits_nothing(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """An operator that raises fails the pass with MergeOperatorFailed naming the key (what a
    read of the database raises), not the operator's bare exception, and the Delta table is
    left as it was."""
    uri = changes.uri("notes")
    opts = DbOptions(merge_operator="string_append")
    with Db.open("notes", store, opts) as db:
        db.put(b"k", b"a")
    apply_changes(store, "notes", uri, consumer="to-delta", merge_operator="string_append")
    with Db.open("notes", store, opts) as db:
        db.merge(b"k", b"b")
    version = DeltaTable(uri).version()

    def refuses(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
        raise ValueError("no")

    with pytest.raises(MergeOperatorFailed, match="b'k'"):
        apply_changes(store, "notes", uri, consumer="to-delta", merge_operator=refuses)
    assert DeltaTable(uri).version() == version and _kv(uri) == {b"k": b"a"}
    apply_changes(store, "notes", uri, consumer="to-delta", merge_operator="string_append")
    assert _kv(uri) == {b"k": b"ab"}
