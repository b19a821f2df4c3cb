"""Create-or-open of a table racing another create (follow-up of issue 37 item 7e, commit
3c1a6b3): ``Table.open_or_create``, the one create-then-open of the table API, used by the
Spark writer (``spark_jobs.datasource_write._open_or_create``) and the demo.

A create that loses to another layout gets ``ObjectAlreadyExists`` as soon as it meets one of
the winner's shard databases, before the winner has committed its shard map; opening then found
no map and raised ``DatabaseNotFound``, so a second write racing the first one's create failed.
Now the open is retried for a bounded time; if the map still does not appear (the other create
crashed), ``TableCreateIncomplete`` says what to do: re-run that create, which adopts its
databases ("a crashed create is adopted by the same create", tests/table/test_table.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

import slatedb_core.table.table as table_module
from slatedb_core.errors import DatabaseNotFound, InjectedFault, TableCreateIncomplete
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.testing import FaultRule, FaultyStore
from spark_jobs.datasource_options import WriteOptions
from spark_jobs.datasource_write import _open_or_create

from .conftest import OPTS


def _write_options(split_points: tuple[bytes, ...] | None) -> WriteOptions:
    return WriteOptions(
        url="memory://unused",
        path="t",
        key="k",
        value="v",
        value_format="json",
        payload=(),
        payload_schema=None,
        tombstone=None,
        split_points=split_points,
        app_id=None,
        batch_version=None,
        mode="append",
        run_bytes=1 << 20,
        checkpoint_location=None,
    )


class _Run(threading.Thread):
    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # the test looks at it
            self.error = e


def test_a_write_that_loses_the_create_to_an_uncommitted_map_waits_for_it(
    mem: ObjectStore,
) -> None:
    """The Spark writer's create-or-open: a second write (no split points: one shard) meets
    the first write's shard database 1 ([-inf, m)) while the first has not committed its map;
    its open finds no map, and it must wait for the map rather than fail."""
    winner_store, loser_store = FaultyStore(mem), FaultyStore(mem)
    map_put = winner_store.pause("map", "put_if_absent", "t/shardmap/*")
    winner = _Run(lambda: Table.create("t", winner_store, [b"m"], OPTS).close())
    winner.start()
    assert map_put.wait_reached()
    db1 = loser_store.pause("db1", "put_if_absent", "t/shards/0000000001/manifest/*")
    loser = _Run(lambda: _open_or_create(_write_options(None), loser_store))
    loser.start()
    assert db1.wait_reached()  # its open and its create's first look found no map
    reopen = loser_store.pause("reopen", "list", "t/shardmap*", when="after")
    db1.release()  # -> ObjectAlreadyExists (another range), then the open after it
    assert reopen.wait_reached()  # that open has listed the maps: none yet
    map_put.release()
    winner.join(10)
    assert winner.error is None, winner.error
    reopen.release()
    loser.join(10)
    assert loser.error is None, repr(loser.error)
    assert isinstance(loser.result, tuple)
    table, created = loser.result
    with table:
        assert created is False
        assert table.shard_map.split_points == (b"m",)


def _crashed_create(mem: ObjectStore, points: list[bytes]) -> None:
    """A create that made its shard databases and died before its shard map."""
    faulty = FaultyStore(mem)
    faulty.add_rule(FaultRule("put_if_absent", "t/shardmap/*", fail_before=1.0))
    with pytest.raises(InjectedFault):
        Table.create("t", faulty, points, OPTS)
    with pytest.raises(DatabaseNotFound):
        Table.open("t", mem, OPTS)


def test_open_or_create_behind_a_crashed_create_gives_up_in_time_saying_what_to_do(
    mem: ObjectStore,
) -> None:
    _crashed_create(mem, [b"m"])
    started = time.monotonic()
    with pytest.raises(TableCreateIncomplete, match="run that create again") as e:
        Table.open_or_create("t", mem, [], OPTS, wait=timedelta(milliseconds=300))
    took = time.monotonic() - started
    assert 0.3 <= took < 2, took
    assert isinstance(e.value, DatabaseNotFound)  # there is no table there
    Table.create("t", mem, [b"m"], OPTS).close()  # the crashed create, run again, adopts
    table, created = Table.open_or_create("t", mem, [], OPTS, wait=timedelta(0))
    with table:
        assert created is False
        assert table.shard_map.split_points == (b"m",)


def test_the_spark_writer_behind_a_crashed_create_raises_the_typed_error(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _crashed_create(mem, [b"m"])
    monkeypatch.setattr(table_module, "CREATE_WAIT", timedelta(milliseconds=100))
    with pytest.raises(TableCreateIncomplete):
        _open_or_create(_write_options(None), mem)


def test_open_or_create_creates_a_missing_table_and_opens_an_existing_one(
    mem: ObjectStore,
) -> None:
    table, created = Table.open_or_create("t", mem, [b"m"], OPTS)
    with table:
        assert created is True
        assert table.shard_map.split_points == (b"m",)
    table, created = Table.open_or_create("t", mem, [b"c"], OPTS)
    with table:  # an existing table is opened as it is, whatever split points were asked
        assert created is False
        assert table.shard_map.split_points == (b"m",)
