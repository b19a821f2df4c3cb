"""``changes_table_to_delta`` (issue 43, item 4 over item 2's table feed; the issue 43 gaps'
item 1): a sharded table's combined change feed merged by key into a real Delta table, with the
table cursor in the Delta commit as for a database. Real Dagster, real deltalake, real tables
in a local store."""

from __future__ import annotations

import struct
from datetime import timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable

from orchestration.changes_assets import ChangesToDeltaResource, changes_table_to_delta
from orchestration.changes_delta import CURSOR_KEY, TABLE_KEY, apply_table_changes
from orchestration.partitions import TABLES
from orchestration.resources import ObjectStoreResource
from slatedb_core import DbOptions, DbReaderOptions, ObjectStore, Table, TableOptions
from slatedb_core.errors import InvalidArgument
from slatedb_core.feed import ChangeFeed
from slatedb_core.table.changes import SHARD_CONSUMER_PREFIX, TableCursor

OPTS = TableOptions(
    writer=DbOptions(flush_interval=timedelta(milliseconds=5)),
    reader=DbReaderOptions(manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None),
)


@pytest.fixture
def changes(tmp_path: Path) -> ChangesToDeltaResource:
    return ChangesToDeltaResource(
        root=str(tmp_path / "changes"), table_root=str(tmp_path / "tchanges"), consumer="to-delta"
    )


def _write(table: Table, puts: dict[bytes, bytes], deletes: tuple[bytes, ...] = ()) -> None:
    for shard in table.shards:
        mine = {k: v for k, v in puts.items() if shard.contains(k)}
        gone = [k for k in deletes if shard.contains(k)]
        if not mine and not gone:
            continue
        with table.writer(shard.index) as db:
            for k, v in mine.items():
                db.put(k, v)
            for k in gone:
                db.delete(k)
    table.refresh()


def _kv(uri: str) -> dict[bytes, bytes]:
    t = DeltaTable(uri).to_pyarrow_table()
    return dict(zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True))


def _materialize(
    instance: dg.DagsterInstance,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [changes_table_to_delta],
        partition_key="t",
        instance=instance,
        resources={"store": store_resource, "changes_delta": changes},
    )


def _meta(result: dg.ExecuteInProcessResult, key: str) -> Any:
    (mat,) = result.asset_materializations_for_node("changes_table_to_delta")
    return mat.metadata[key].value


def test_two_passes_with_writes_and_a_split_between_apply_each_change_once(
    store: ObjectStore,
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    instance.add_dynamic_partitions(TABLES, ["t"])
    with Table.create("t", store, [b"m"], OPTS) as table:
        _write(table, {b"a": b"1", b"b": b"1", b"n": b"1", b"z": b"1"})
        _write(table, {b"b": b"2"}, deletes=(b"z",))
    first = _materialize(instance, store_resource, changes)
    uri = changes.table_uri("t")
    assert _kv(uri) == {b"a": b"1", b"b": b"2", b"n": b"1"}
    assert _meta(first, "changes") == 6 and _meta(first, "deletes") == 1
    commit = DeltaTable(uri).history(1)[0]
    assert commit[TABLE_KEY] == "t" and commit[CURSOR_KEY] == _meta(first, "cursor")
    assert TableCursor.decode(commit[CURSOR_KEY]).shards  # a table cursor
    # the consumer is registered in every live shard
    with Table.open("t", store, OPTS) as table:
        for shard in table.shards:
            held = [h.name for h in ChangeFeed(shard.db_path, store).consumers()]
            assert held == [SHARD_CONSUMER_PREFIX + "to-delta"]

    with Table.open("t", store, OPTS) as table:
        _write(table, {b"a": b"2", b"g": b"1"}, deletes=(b"n",))
        table.split(0, b"f")
        _write(table, {b"a": b"3", b"y": b"1"}, deletes=(b"b",))
    second = _materialize(instance, store_resource, changes)
    assert _meta(second, "since") == commit[CURSOR_KEY]
    assert _meta(second, "changes") == 6  # only the new ones, once each through the split
    assert _kv(uri) == {b"a": b"3", b"g": b"1", b"y": b"1"}
    version = DeltaTable(uri).version()
    third = _materialize(instance, store_resource, changes)  # nothing new: nothing committed
    assert not third.asset_materializations_for_node("changes_table_to_delta")
    assert DeltaTable(uri).version() == version


def _i64(n: int) -> bytes:
    return struct.pack("<q", n)


def test_a_crash_on_either_side_of_the_delta_commit_neither_duplicates_nor_skips(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    """Merge operands make a duplicate visible (each adds once), and a skip too. A crash after
    the commit (before anything else: the metadata, the consumer's checkpoints) leaves nothing
    to re-apply; one just before it leaves everything."""
    add = "add_int64"
    opts = TableOptions(
        writer=DbOptions(flush_interval=timedelta(milliseconds=5), merge_operator=add),
        reader=DbReaderOptions(checkpoint_lifetime=None, merge_operator=add),
    )
    uri = changes.table_uri("t")

    class Crash(Exception):
        pass

    def crash(*_: object) -> None:
        raise Crash

    def merge(table: Table, key: bytes, n: int) -> None:
        with table.writer(table.shard_for(key).index) as db:
            db.merge(key, _i64(n))

    with Table.create("t", store, [b"m"], opts) as table:
        for key, n in ((b"a", 1), (b"a", 2), (b"x", 5)):
            merge(table, key, n)
        kwargs: dict[str, Any] = {"consumer": "to-delta", "merge_operator": add}
        with pytest.raises(Crash):
            apply_table_changes(table, uri, after_commit=crash, **kwargs)
        assert _kv(uri) == {b"a": _i64(3), b"x": _i64(5)}
        version = DeltaTable(uri).version()
        again = apply_table_changes(table, uri, **kwargs)  # the rerun after the crash
        assert again.version is None and again.changes == 0
        assert DeltaTable(uri).version() == version

        merge(table, b"a", 10)
        merge(table, b"y", 7)
        with pytest.raises(Crash):
            apply_table_changes(table, uri, before_commit=crash, **kwargs)
        assert DeltaTable(uri).version() == version  # nothing committed
        with pytest.raises(Crash):
            apply_table_changes(table, uri, after_commit=crash, **kwargs)
        assert DeltaTable(uri).version() == version + 1
        again = apply_table_changes(table, uri, **kwargs)
        assert again.changes == 0 and again.version is None
        assert _kv(uri) == {b"a": _i64(13), b"x": _i64(5), b"y": _i64(7)}


def test_a_database_feed_and_a_table_feed_never_share_a_delta_table(
    store: ObjectStore, changes: ChangesToDeltaResource
) -> None:
    from orchestration.changes_delta import apply_changes
    from slatedb_core import Db

    with Db.open("orders", store) as db:
        db.put(b"k", b"v")
    uri = changes.table_uri("t")
    apply_changes(store, "orders", uri, consumer="to-delta")
    with Table.create("t", store, [b"m"], OPTS) as table:
        _write(table, {b"a": b"1"})
        with pytest.raises(InvalidArgument, match=r"changes of database 'orders'.*not table 't'"):
            apply_table_changes(table, uri, consumer="to-delta")


def test_a_table_partition_with_no_table_is_skipped_not_failed(
    store_resource: ObjectStoreResource,
    changes: ChangesToDeltaResource,
    instance: dg.DagsterInstance,
) -> None:
    """As the database asset's pass over a missing database: an observation saying why."""
    instance.add_dynamic_partitions(TABLES, ["t"])
    result = _materialize(instance, store_resource, changes)
    assert result.success
    assert not result.asset_materializations_for_node("changes_table_to_delta")
    (obs,) = result.asset_observations_for_node("changes_table_to_delta")
    assert "no table" in str(obs.metadata["skipped"].value)
