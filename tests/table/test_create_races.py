"""Two ``Table.create`` at one path at once (issue 37, item 7e): exactly one wins and the other
gets ``ObjectAlreadyExists``; the loser never adopts the winner's layout, and every shard of the
committed map is a database created with that shard's key range.

Why it holds (``Table.create``): shard database i is created by create-if-absent with its range,
and one found there is accepted only with the same range; two layouts that differ first at shard
i both need database i, so exactly one of them creates it and the other stops there. Two creates
of one layout share every database; the create-if-absent of map version 1 then picks one."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from datetime import timedelta

import pytest

from slatedb_core.errors import ObjectAlreadyExists
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from slatedb_core.table.shardmap import ShardMapStore
from slatedb_core.testing import FaultyStore

from .conftest import OPTS, memory


def _created(store: ObjectStore, points: Sequence[bytes]) -> None:
    """The table at ``t`` has ``points``, and each shard's database was made for its range."""
    with Table.open("t", store, OPTS) as t:
        assert t.shard_map.split_points == tuple(points)
        assert t.shard_map.id == 1
        for s in t.shards:
            rng = ManifestStore(store, s.db_path).read_latest().manifest.key_range
            assert (KeyRange() if rng is None else KeyRange.of(rng)) == s.key_range, s


class _Create(threading.Thread):
    def __init__(self, store: ObjectStore, points: Sequence[bytes]) -> None:
        super().__init__(daemon=True)
        self.store, self.points = store, list(points)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            Table.create("t", self.store, self.points, OPTS).close()
        except BaseException as e:  # the test looks at it
            self.error = e


def test_a_create_that_loses_a_shard_database_to_another_layout_is_refused(
    mem: ObjectStore,
) -> None:
    faulty = FaultyStore(mem)
    stalled = faulty.pause("db2", "put_if_absent", "t/shards/0000000002/manifest/*")
    a = _Create(faulty, [b"m"])  # stalls before creating its shard 2 ([m, end))
    a.start()
    assert stalled.wait_reached()
    Table.create("t", mem, [b"m", b"t"], OPTS).close()  # its shard 2 is [m, t)
    stalled.release()
    a.join(10)
    assert isinstance(a.error, ObjectAlreadyExists), a.error
    _created(mem, [b"m", b"t"])


def test_a_create_that_finds_another_layouts_shard_database_is_refused_before_its_map(
    mem: ObjectStore,
) -> None:
    faulty = FaultyStore(mem)
    stalled = faulty.pause("map", "put_if_absent", "t/shardmap/*")
    a = _Create(faulty, [b"m"])  # every shard database created, map not yet
    a.start()
    assert stalled.wait_reached()
    with pytest.raises(ObjectAlreadyExists):
        Table.create("t", mem, [b"m", b"t"], OPTS)
    stalled.release()
    a.join(10)
    assert a.error is None, a.error
    _created(mem, [b"m"])
    with pytest.raises(ObjectAlreadyExists):  # and after the map, by its first check
        Table.create("t", mem, [b"m", b"t"], OPTS)


def test_two_creates_of_one_layout_share_the_databases_and_one_commits_the_map(
    mem: ObjectStore,
) -> None:
    faulty = FaultyStore(mem)
    stalled = faulty.pause("map", "put_if_absent", "t/shardmap/*")
    a = _Create(faulty, [b"m"])
    a.start()
    assert stalled.wait_reached()
    Table.create("t", mem, [b"m"], OPTS).close()
    stalled.release()
    a.join(10)
    assert isinstance(a.error, ObjectAlreadyExists), a.error
    _created(mem, [b"m"])


def test_a_create_stalled_until_the_first_map_was_collected_is_refused_as_existing(
    mem: ObjectStore,
) -> None:
    """A create that stalls before committing map version 1 while another create commits it,
    the table moves on and the map's GC deletes version 1: its late create of version 1 lands
    behind the GC boundary. It is refused as ``ObjectAlreadyExists`` (before:
    ``ObjectVersionBehindBoundary``, which says nothing about a table being there), and the
    table is left as it was."""
    faulty = FaultyStore(mem)
    stalled = faulty.pause("map", "put_if_absent", "t/shardmap/*")
    late = _Create(faulty, [b"m"])
    late.start()
    assert stalled.wait_reached()
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.split(1, b"t")
        assert t.maps.collect(timedelta(0)) >= 1  # version 1 is gone
        assert t.maps.seq.list()[0].id > 1
    stalled.release()
    late.join(10)
    assert isinstance(late.error, ObjectAlreadyExists), repr(late.error)
    assert ShardMapStore(mem, "t").seq.list()[0].id > 1  # its void version 1 was deleted
    with Table.open("t", mem, OPTS) as t:
        assert t.shard_map.split_points == (b"m", b"t")


LAYOUTS: list[list[bytes]] = [[], [b"m"], [b"m", b"t"], [b"c", b"m"], [b"t"], [b"c", b"m", b"t"]]


def test_racing_creates_of_different_layouts_leave_exactly_one_table() -> None:
    rng = random.Random(37)
    for _ in range(12):
        store = memory()
        layouts = rng.sample(LAYOUTS, 3)
        creates = [_Create(store, p) for p in layouts]
        for c in creates:
            c.start()
        for c in creates:
            c.join(30)
        won = [c for c in creates if c.error is None]
        assert len(won) == 1, [(c.points, c.error) for c in creates]
        assert all(isinstance(c.error, ObjectAlreadyExists) for c in creates if c is not won[0])
        _created(store, won[0].points)
