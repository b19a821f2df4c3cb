"""Sharded tables: the shard map, routing, reads across shards, writers, split and merge."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import (
    CorruptionError,
    DatabaseNotFound,
    Fenced,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectVersionBehindBoundary,
    ShardMapConflict,
    SlateDBError,
)
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.envelope import seal
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Shard, ShardMap, Table
from slatedb_core.table.routing import route
from slatedb_core.table.shardmap import SHARDMAP_MAGIC, ShardMapStore
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db
from tests.table.conftest import (
    OPTS,
    fill,
    memory,
)


def rows_of(n: int, prefix: bytes = b"") -> dict[bytes, bytes]:
    rng = random.Random(n)
    keys = {
        prefix + bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(4))
        for _ in range(n)
    }
    return {k: b"v-" + k for k in sorted(keys)}


def check_layout(m: ShardMap) -> None:
    assert m.shards[0].key_range.start is None and m.shards[-1].key_range.end is None
    for i, (a, b) in enumerate(zip(m.shards, m.shards[1:], strict=False)):
        assert a.index == i and a.key_range.end == b.key_range.start
    assert len({s.db_path for s in m.shards}) == len(m.shards)


# ---- create / open ---------------------------------------------------------------------------
def test_create_makes_contiguous_shards_each_with_its_key_range(store: ObjectStore) -> None:
    with Table.create("t", store, [b"g", b"p"], OPTS) as t:
        m = t.shard_map
        assert m.id == 1 and len(t.shards) == 3
        check_layout(m)
        assert [s.key_range for s in t.shards] == [
            KeyRange(None, b"g"),
            KeyRange(b"g", b"p"),
            KeyRange(b"p", None),
        ]
        for s in t.shards:
            m0 = ManifestStore(store, s.db_path).read_latest().manifest
            assert KeyRange.of(m0.key_range) == s.key_range and m0.initialized
    with Table.open("t", store, OPTS) as again:
        assert again.shard_map.shards == m.shards and again.shard_map.id == 1


def test_create_refuses_an_existing_table_and_open_a_missing_one(mem: ObjectStore) -> None:
    Table.create("t", mem, [b"m"], OPTS).close()
    with pytest.raises(ObjectAlreadyExists):
        Table.create("t", mem, [b"x"], OPTS)
    with pytest.raises(DatabaseNotFound):
        Table.open("nope", mem, OPTS)


def test_one_shard_table_covers_every_key(mem: ObjectStore) -> None:
    with Table.create("t", mem, (), OPTS) as t:
        assert [s.key_range for s in t.shards] == [KeyRange()]
        fill(t, {b"\x00": b"0", b"\xff\xff": b"1"})
        assert list(t.scan()) == [(b"\x00", b"0"), (b"\xff\xff", b"1")]


@pytest.mark.parametrize(
    "points",
    [[b"p", b"g"], [b"g", b"g"], [b"", b"g"], ["g"], b"g", [b"a", None]],
    ids=["unsorted", "duplicate", "empty", "str", "bytes-not-sequence", "none"],
)
def test_bad_split_points_are_invalid_arguments(mem: ObjectStore, points: object) -> None:
    with pytest.raises(InvalidArgument):
        Table.create("t", mem, points, OPTS)  # type: ignore[arg-type]
    with pytest.raises(DatabaseNotFound):
        Table.open("t", mem, OPTS)


def test_a_crashed_create_is_adopted_by_the_same_create(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    faulty.fail_next("put_if_absent", "t/shardmap/*", times=20)
    with pytest.raises(SlateDBError):
        Table.create("t", faulty, [b"m"], OPTS)
    with pytest.raises(DatabaseNotFound):
        Table.open("t", mem, OPTS)
    with Table.create("t", mem, [b"m"], OPTS) as t:
        assert len(t.shards) == 2
    faulty.fail_next("put_if_absent", "u/shardmap/*", times=20)
    with pytest.raises(SlateDBError):
        Table.create("u", faulty, [b"m"], OPTS)
    with pytest.raises(ObjectAlreadyExists):  # leftover shard dbs with other ranges: not ours
        Table.create("u", mem, [b"n"], OPTS)


# ---- routing ---------------------------------------------------------------------------------
def test_boundary_keys_route_to_the_shard_they_start(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"g", b"p"], OPTS) as t:
        cases = {b"\x00": 0, b"a": 0, b"f\xff": 0, b"g": 1, b"g\x00": 1, b"o": 1, b"p": 2, b"zz": 2}
        for k, want in cases.items():
            assert t.shard_for(k).index == want, k
        assert t.route(list(cases)).to_pylist() == list(cases.values())


@pytest.mark.parametrize("n_points", [1, 5, 31, 32, 33, 200])
def test_vectorised_route_matches_scalar_routing(n_points: int) -> None:
    rng = random.Random(n_points)
    points = sorted(
        {bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3))) for _ in range(n_points)}
    )
    m = ShardMap(
        1,
        tuple(
            Shard(i, r, f"t/shards/{i}", i)
            for i, r in enumerate(
                KeyRange(a, b) for a, b in zip([None, *points], [*points, None], strict=True)
            )
        ),
        0.0,
        len(points) + 1,
    )
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    keys += points + [p + b"\x00" for p in points] + [p[:-1] for p in points if len(p) > 1]
    want = [m.shard_for(k).index for k in keys]
    assert m.route(keys).to_pylist() == want
    assert m.route(pa.array(keys, pa.large_binary())).to_pylist() == want
    chunked = pa.chunked_array(
        [pa.array(keys[:100], pa.binary()), pa.array(keys[100:], pa.binary())]
    )
    assert m.route(chunked).to_pylist() == want


def test_route_accepts_text_and_refuses_nulls_and_numbers() -> None:
    assert route([b"m"], pa.array(["a", "m", "z"])).to_pylist() == [0, 1, 1]
    assert route([b"m"], []).to_pylist() == []
    with pytest.raises(InvalidArgument):
        route([b"m"], pa.array([b"a", None]))
    with pytest.raises(InvalidArgument):
        route([b"m"], pa.array([1, 2]))


# ---- reads -----------------------------------------------------------------------------------
def test_get_scan_and_scan_arrow_cross_shards_in_key_order(store: ObjectStore) -> None:
    rows = rows_of(300)
    with Table.create("t", store, [b"g", b"p"], OPTS) as t:
        fill(t, dict(list(rows.items())[::2]), flush=True)  # half in L0
        fill(t, dict(list(rows.items())[1::2]))  # half only in the WAL
        items = sorted(rows.items())
        assert list(t.scan()) == items
        for k in list(rows)[::37]:
            assert t.get(k) == rows[k]
        assert t.get(b"zzzzz") is None
        keys = [*list(rows)[::11], b"missing", b"a"]
        assert t.get_many(keys) == [rows.get(k) for k in keys]
        for lo, hi in [(b"c", b"r"), (b"g", b"p"), (None, b"g"), (b"p", None), (b"f", b"g\x00")]:
            want = [(k, v) for k, v in items if (lo is None or k >= lo) and (hi is None or k < hi)]
            assert list(t.scan(lo, hi)) == want, (lo, hi)
            table = t.scan_arrow(lo, hi, batch_size=7).read_all()
            assert (
                list(zip(table["key"].to_pylist(), table["value"].to_pylist(), strict=True)) == want
            )
        assert list(t.scan(b"h", b"h")) == []
        with pytest.raises(InvalidArgument):
            t.scan(b"q", b"b")
        reader = t.scan_arrow()
        assert reader.schema.names == ["key", "value"]


def test_follow_latest_readers_work_without_writing(mem: ObjectStore) -> None:
    opts = dataclasses.replace(
        OPTS,
        reader=DbReaderOptions(
            mode=ReaderMode.FOLLOW_LATEST, manifest_poll_interval=timedelta(hours=1)
        ),
    )
    with Table.create("t", mem, [b"m"], opts) as t:
        fill(t, {b"a": b"1", b"x": b"2"})
        before = {s.db_path: ManifestStore(mem, s.db_path).latest_id() for s in t.shards}
        assert list(t.scan()) == [(b"a", b"1"), (b"x", b"2")]
        assert before == {s.db_path: ManifestStore(mem, s.db_path).latest_id() for s in t.shards}


# ---- writers ---------------------------------------------------------------------------------
def test_shard_writers_refuse_keys_outside_their_range(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"g", b"p"], OPTS) as t, t.writer(1) as db:
        db.put(b"g", b"ok")
        for k in (b"a", b"p", b"z"):
            with pytest.raises(InvalidArgument):
                db.put(k, b"no")
        with pytest.raises(InvalidArgument):
            t.writer(3)


def test_a_writer_of_a_shard_the_map_no_longer_has_is_refused(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        old = t.shards[0]
        t.split(0, b"f")
        with pytest.raises(ShardMapConflict):
            t.writer(old)


# ---- split / merge ---------------------------------------------------------------------------
def test_split_preserves_data_and_new_shards_enforce_their_ranges(store: ObjectStore) -> None:
    rows = rows_of(200)
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, dict(list(rows.items())[:100]), flush=True)
        fill(t, dict(list(rows.items())[100:]))  # the rest only in WALs
        old = t.shards[0]
        m = t.split(0, b"f")
        assert m.id == 3 and [s.key_range for s in m.shards] == [
            KeyRange(None, b"f"),
            KeyRange(b"f", b"m"),
            KeyRange(b"m", None),
        ]
        assert m.retired == (old.db_path,) and not m.pending
        check_layout(m)
        assert ManifestStore(store, old.db_path).read_latest().manifest.destroyed_at_s is not None
        assert list(t.scan()) == sorted(rows.items())
        for s in m.shards[:2]:
            assert KeyRange.of(
                ManifestStore(store, s.db_path).read_latest().manifest.key_range
            ) == (s.key_range)
        with t.writer(0) as db:
            db.put(b"a", b"new")
            with pytest.raises(InvalidArgument):
                db.put(b"f", b"outside")
        t.refresh()
        assert t.get(b"a") == b"new"


def test_split_is_idempotent_and_refuses_keys_outside_the_shard(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        with pytest.raises(InvalidArgument):
            t.split(0, b"q")
        with pytest.raises(InvalidArgument):
            t.split(0, b"")
        m = t.split(0, b"f")
        assert t.split(0, b"f") == m  # `at` is already the boundary: nothing to do
        with Table.open("t", mem, OPTS) as stale:  # same call on an older view of the map
            stale._map = ShardMapStore(mem, "t").read(1)
            assert stale.split(0, b"f").id == m.id
        assert t.split(1, b"m").id == m.id


def test_writes_after_split_to_the_old_shards_writer_are_fenced(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        w = t.writer(1)
        try:
            w.put(b"n1", b"acked")  # acknowledged before the split: must survive it
            w.put(b"n2", b"buffered", await_durable=False)
            t.split(1, b"t")
            with pytest.raises(Fenced):
                w.put(b"n3", b"lost?")
            with pytest.raises(Fenced):
                w.put(b"u", b"lost?")
        finally:
            with pytest.raises(
                Fenced
            ):  # n2 was dropped: close() says so (RELIABILITY.md, review finding 8)
                w.close()
        t.refresh()
        assert t.get(b"n1") == b"acked"
        assert t.get(b"n3") is None and t.get(b"u") is None


def test_merge_preserves_data_and_enforces_the_merged_range(store: ObjectStore) -> None:
    rows = rows_of(200)
    with Table.create("t", store, [b"g", b"p"], OPTS) as t:
        fill(t, dict(list(rows.items())[:120]), flush=True)
        fill(t, dict(list(rows.items())[120:]))
        a, b = t.shards[0], t.shards[1]
        m = t.merge(0)
        assert [s.key_range for s in m.shards] == [KeyRange(None, b"p"), KeyRange(b"p", None)]
        assert set(m.retired) == {a.db_path, b.db_path}
        assert list(t.scan()) == sorted(rows.items())
        with t.writer(0) as db:
            db.put(b"h", b"merged")
            with pytest.raises(InvalidArgument):
                db.put(b"p", b"next shard")
        t.refresh()
        assert t.get(b"h") == b"merged"
        with pytest.raises(InvalidArgument):
            t.merge(1)  # the last shard has no next one


def test_split_then_merge_back_then_split_again(mem: ObjectStore) -> None:
    """Merging shards that are clones of a soft-destroyed shard needs final checkpoints in that
    destroyed database (regression: those were refused with DatabaseDestroyed)."""
    rows = rows_of(150)
    with Table.create("t", mem, [], OPTS) as t:
        fill(t, rows)
        t.split(0, b"j")
        t.split(1, b"r")
        fill(t, {b"jj": b"after split"})
        t.merge(0)
        t.merge(0)
        assert [s.key_range for s in t.shards] == [KeyRange()]
        t.split(0, b"d")
        want = {**rows, b"jj": b"after split"}
        assert list(t.scan()) == sorted(want.items())
        assert len(t.shard_map.retired) == 7


def test_a_clone_of_a_clone_works_after_its_root_is_soft_destroyed(mem: ObjectStore) -> None:
    with Db.open("root", mem, OPTS.writer) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    create_clone("child", "root", mem)
    destroy("root", mem, soft=True)
    create_clone("grandchild", "child", mem)
    with DbReader.open("grandchild", mem, options=OPTS.reader) as r:
        assert r.get(b"k") == b"v"


def test_merge_with_expected_map_id_applies_only_to_that_version(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"g", b"p"], OPTS) as t:
        with pytest.raises(ShardMapConflict):
            t.merge(0, expected_map_id=7)
        m = t.merge(0, expected_map_id=1)
        with pytest.raises(ShardMapConflict):
            t.merge(0, expected_map_id=1)  # a retry of the same decision
        assert len(m.shards) == 2


def test_concurrent_splits_of_one_shard_exactly_one_wins(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    Table.create("t", mem, [b"m"], OPTS).close()
    a, b = Table.open("t", faulty, OPTS), Table.open("t", mem, OPTS)
    # A parks right before creating map 2; B then seals, clones and commits; A loses the create.
    pause = faulty.pause("a-seal", "put_if_absent", "t/shardmap/*2.shardmap")
    result: dict[str, object] = {}

    def run_a() -> None:
        try:
            result["a"] = a.split(0, b"f")
        except SlateDBError as e:
            result["a"] = e

    thread = threading.Thread(target=run_a)
    thread.start()
    try:
        assert pause.wait_reached(10)
        won = b.split(0, b"c")
    finally:
        pause.release()
        thread.join(30)
    assert isinstance(result["a"], ShardMapConflict), result
    assert [s.key_range for s in won.shards] == [
        KeyRange(None, b"c"),
        KeyRange(b"c", b"m"),
        KeyRange(b"m", None),
    ]
    latest = ShardMapStore(mem, "t").read_latest()
    assert latest == won and not latest.pending
    check_layout(latest)
    dbs = {o.path.split("/")[2] for o in mem.list("t/shards/")}
    assert dbs == {"0000000001", "0000000002", "0000000003", "0000000004"}  # none of A's
    a.close()
    b.close()


def test_racing_rescales_of_different_shards_both_commit(mem: ObjectStore) -> None:
    Table.create("t", mem, [b"g", b"p"], OPTS).close()
    tables = [Table.open("t", mem, OPTS) for _ in range(2)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(t: Table, fn: str) -> None:
        try:
            barrier.wait(10)
            if fn == "split":
                t.split(0, b"c")
            else:
                t.merge(1)
        except BaseException as e:  # collected and asserted below
            errors.append(e)

    threads = [
        threading.Thread(target=run, args=(t, f))
        for t, f in zip(tables, ["split", "merge"], strict=True)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors
    latest = ShardMapStore(mem, "t").read_latest()
    check_layout(latest)
    assert [s.key_range for s in latest.shards] == [
        KeyRange(None, b"c"),
        KeyRange(b"c", b"g"),
        KeyRange(b"g", None),
    ]
    for t in tables:
        t.close()


def test_a_sealed_shard_is_readable_but_not_writable(mem: ObjectStore) -> None:
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"q": b"2"})
    t = Table.open("t", faulty, OPTS)
    faulty.fail_next("put_if_absent", "t/shards/0000000003/manifest/*", times=50)
    with pytest.raises(SlateDBError):
        t.split(0, b"f")
    faulty.clear_rules()
    with Table.open("t", mem, OPTS) as other:
        assert other.shards[0].sealed and other.shard_map.pending
        assert other.get(b"a") == b"1"
        with pytest.raises(ShardMapConflict, match="sealed"):
            other.writer(0)
        with pytest.raises(ShardMapConflict):
            other.split(0, b"c")  # another op on a sealed shard
        with pytest.raises(ShardMapConflict):
            other.merge(0)
        m = other.resume()
        assert not m.pending and len(m.shards) == 3
        assert list(other.scan()) == [(b"a", b"1"), (b"q", b"2")]
    t.close()


def _crash_points(n_calls: int, samples: int) -> list[int]:
    step = max(1, n_calls // samples)
    return sorted({*range(0, n_calls, step), n_calls - 1})


@pytest.mark.parametrize("op", ["split", "merge"])
def test_a_crash_at_any_store_call_of_a_rescale_leaves_a_valid_table_that_a_rerun_finishes(
    op: str,
) -> None:
    rows = rows_of(60)

    def setup() -> ObjectStore:
        mem = memory()
        with Table.create("t", mem, [b"m"], OPTS) as t:
            fill(t, dict(list(rows.items())[:30]), flush=True)
            fill(t, dict(list(rows.items())[30:]))
        return mem

    def rescale(t: Table) -> ShardMap:
        return t.split(0, b"f") if op == "split" else t.merge(0)

    counting = FaultyStore(setup())
    with Table.open("t", counting, OPTS) as t:
        before = counting.counters.total()
        expected = rescale(t)
        n_calls = counting.counters.total() - before
    deadline = time.monotonic() + 120
    for k in _crash_points(n_calls, 25):
        assert time.monotonic() < deadline, "crash-point loop over its time budget"
        mem = setup()
        faulty = FaultyStore(mem)
        t = Table.open("t", faulty, OPTS)
        faulty.add_rule(FaultRule(None, "*", fail_before=1.0, skip=k))  # the process dies at k
        try:
            rescale(t)
        except SlateDBError:
            pass
        faulty.clear_rules()
        t.close()
        with Table.open("t", mem, OPTS) as again:
            m = again.shard_map
            check_layout(m)
            assert list(again.scan()) == sorted(rows.items()), k
            if len(m.shards) != len(expected.shards):
                again.resume() if m.pending else rescale(again)
            else:
                again.resume()
            final = again.refresh()
            assert [s.key_range for s in final.shards] == [s.key_range for s in expected.shards], k
            assert not final.pending
            for path in final.retired:
                assert ManifestStore(mem, path).read_latest().manifest.destroyed_at_s is not None
            assert list(again.scan()) == sorted(rows.items()), k
            fill(again, {b"a-after": b"x", b"z-after": b"y"})
            assert again.get(b"a-after") == b"x" and again.get(b"z-after") == b"y"


# ---- the map object --------------------------------------------------------------------------
def test_a_corrupted_shard_map_is_a_corruption_error(store: ObjectStore) -> None:
    Table.create("t", store, [b"m"], OPTS).close()
    maps = ShardMapStore(store, "t")
    path = maps.seq.path(1)
    good = store.get(path).data
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x40
    store.delete(path)
    store.put(path, bytes(flipped))
    with pytest.raises(CorruptionError):
        Table.open("t", store, OPTS)
    store.put(path, good[:-3])
    with pytest.raises(CorruptionError):
        Table.open("t", store, OPTS)


@pytest.mark.parametrize(
    "doc",
    [
        b'{"created_at":0,"next_shard_id":3,"pending":[],"retired":[],"shards":['
        b'{"db":"shards/1","end":"6d","id":1,"start":null},{"db":"shards/2","end":null,"id":2,"start":"6e"}]}',
        b'{"created_at":0,"next_shard_id":2,"pending":[],"retired":[],"shards":['
        b'{"db":"shards/1","end":null,"id":1,"start":"00"}]}',
        b'{"created_at":0,"next_shard_id":2,"pending":[],"retired":[],"shards":['
        b'{"db":"../x","end":null,"id":1,"start":null}]}',
        b'{"created_at":0,"next_shard_id":2,"pending":[],"retired":[],"shards":[]}',
        b"not json",
    ],
    ids=["gap", "bounded-first", "escaping-path", "no-shards", "not-json"],
)
def test_a_well_sealed_but_invalid_map_is_a_corruption_error(mem: ObjectStore, doc: bytes) -> None:
    mem.put_if_absent(ShardMapStore(mem, "t").seq.path(1), seal(SHARDMAP_MAGIC, 1, doc))
    with pytest.raises(CorruptionError):
        Table.open("t", mem, OPTS)


def test_ingest_leftovers_older_than_ingest_min_age_are_collected(
    tmp_path: pytest.TempPathFactory,
) -> None:
    """Staged SSTs a zombie attempt left and old done markers go; young ones, the shard
    databases and the map stay."""
    store = open_store(f"file://{tmp_path}")
    with Table.create("t", store, [b"m"], OPTS) as t:
        t.writer(0).close()
        with t.writer(1) as db:
            db.put(b"x", b"1")
        leftovers = {
            "t/_ingest/job1/0000000001.done": b"{}",
            "t/_ingest/job1/staged/run1/00003-1-ab/00000-0000000002-00000.sst": b"s" * 100,
        }
        for path, data in leftovers.items():
            store.put_if_absent(path, data)
        before = sorted(m.path for m in store.list("t/") if "/_ingest/" not in m.path)
        assert t.collect_garbage(ingest_min_age=timedelta(hours=1)).ingest_objects == 0
        stats = t.collect_garbage(ingest_min_age=timedelta(0))
        assert (stats.ingest_objects, stats.ingest_bytes, stats.shard_maps) == (2, 102, 0)
        assert not list(store.list("t/_ingest/"))
        assert sorted(m.path for m in store.list("t/")) == before
        assert t.get(b"x") == b"1"
        with pytest.raises(InvalidArgument):
            t.collect_garbage(ingest_min_age=timedelta(seconds=-1))


def test_old_maps_are_collected_behind_the_boundary_never_the_latest(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        t.split(0, b"f")
        t.merge(0)
        maps = ShardMapStore(mem, "t")
        assert [e.id for e in maps.seq.list()] == [1, 2, 3, 4, 5]
        assert t.collect_garbage(timedelta(hours=1)).shard_maps == 0
        assert t.collect_garbage(timedelta(0)).shard_maps == 4
        assert [e.id for e in maps.seq.list()] == [5]
        assert maps.seq.boundary.read() == 4
        stale = dataclasses.replace(maps.read(5))
        with pytest.raises(ObjectVersionBehindBoundary):
            maps.versions.commit(3, stale, None)  # a writer stalled since map 2 must not succeed
        assert Table.open("t", mem, OPTS).shard_map.id == 5


# ---- snapshots -------------------------------------------------------------------------------
def test_a_snapshot_reads_a_fixed_view_across_a_split(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"x": b"2"}, flush=True)
        snap = t.snapshot()
        fill(t, {b"a": b"changed", b"b": b"new"}, flush=True)
        t.split(0, b"c")
        with Table.open("t", mem, OPTS, snapshot=type(snap).from_json(snap.to_json())) as old:
            assert list(old.scan()) == [(b"a", b"1"), (b"x", b"2")]
            assert old.get(b"a") == b"1" and old.get_many([b"b", b"x"]) == [None, b"2"]
            with pytest.raises(InvalidArgument):
                old.writer(0)
        assert list(t.scan()) == [(b"a", b"changed"), (b"b", b"new"), (b"x", b"2")]
        t.release_snapshot(snap)
        for s, cid in zip(snap.shards, snap.checkpoints, strict=True):
            assert ManifestStore(mem, s.db_path).read_latest().manifest.checkpoint(cid) is None


def test_union_accepts_a_flushed_source_after_a_reader_named_its_fence_wal(
    mem: ObjectStore,
) -> None:
    """Regression: a managed reader records the last WAL SST it listed, a writer's empty fence
    included, in wal_id_last_seen; union then refused the fully flushed source for good."""
    from slatedb_core.lifecycle.union import UnionSource, create_union

    for path, key in (("a", b"a"), ("b", b"x")):
        with Db.open(path, mem, OPTS.writer) as db:
            db.put(key, b"v")
            db.flush_memtable()
        Db.open(path, mem, OPTS.writer).close()  # a writer that wrote nothing: a fence WAL SST
        with DbReader.open(path, mem, options=OPTS.reader):
            pass
        m = ManifestStore(mem, path).read_latest().manifest
        assert m.wal_id_last_seen > m.replay_after_wal_id
    create_union(
        "ab",
        [
            UnionSource("a", range=KeyRange(None, b"m")),
            UnionSource("b", range=KeyRange(b"m", None)),
        ],
        mem,
    )
    with DbReader.open("ab", mem, options=OPTS.reader) as r:
        assert list(r.scan()) == [(b"a", b"v"), (b"x", b"v")]


def test_a_stale_table_reroutes_reads_after_a_rescale_destroyed_its_shard(mem: ObjectStore) -> None:
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"k": b"2", b"x": b"3"})
        with Table.open("t", mem, OPTS) as stale, Table.open("t", mem, OPTS) as stale2:
            t.split(0, b"f")
            fill(t, {b"b": b"after"})
            assert stale.shard_map.id == 1
            assert stale.get(b"b") == b"after" and stale.shard_map.id == t.shard_map.id
            assert list(stale2.scan()) == [
                (b"a", b"1"),
                (b"b", b"after"),
                (b"k", b"2"),
                (b"x", b"3"),
            ]


def test_a_split_does_not_wait_for_a_compactor_when_l0_is_full(mem: ObjectStore) -> None:
    opts = dataclasses.replace(OPTS, writer=dataclasses.replace(OPTS.writer, l0_max_ssts=2))
    with Table.create("t", mem, [], opts) as t:
        with t.writer(0) as db:
            for i in range(2):
                db.put(b"k%d" % i, b"v")
                db.flush_memtable()
            db.put(b"wal-only", b"v")  # its flush would stall: L0 is full and no compactor runs
        done: list[ShardMap] = []
        worker = threading.Thread(target=lambda: done.append(t.split(0, b"k1")), daemon=True)
        worker.start()
        worker.join(30)
        assert done, "the split stalled behind l0_max_ssts"
        assert [k for k, _ in t.scan()] == [b"k0", b"k1", b"wal-only"]
