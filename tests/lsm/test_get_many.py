"""``get_many`` (sorted once, each table walked once) against a dict model: across the memtable,
immutable tables (a reader's replayed WAL), L0 SSTs and sorted runs, with tombstones, duplicate
and unsorted keys in a request, and a projected database's range; and ``SstReader.get_sorted``
against ``get`` on SSTs holding several versions of a key across block boundaries."""

from __future__ import annotations

import bisect
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import InvalidArgument
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.options import CompactorOptions, DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.index import bisect_all
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.sst import Entry, batch_of

OPTS = DbOptions(
    flush_interval=timedelta(milliseconds=10),
    manifest_poll_interval=timedelta(milliseconds=200),
    block_size=64,
)
ONE_RUN = CompactorOptions(l0_trigger=1, block_size=64)
KEYS = st.one_of(
    st.sampled_from([b"k%02d" % i for i in range(24)]), st.binary(min_size=1, max_size=3)
)
WRITES = st.lists(
    st.tuples(KEYS, st.one_of(st.none(), st.binary(max_size=12))), min_size=1, max_size=10
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), WRITES),
        st.tuples(st.sampled_from(["flush", "compact"]), st.none()),
    ),
    min_size=1,
    max_size=14,
)


def mem() -> ObjectStore:
    return open_store(f"memory://get-many-{uuid.uuid4().hex}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, requests=st.lists(st.lists(KEYS, max_size=40), min_size=1, max_size=4))
def test_get_many_matches_a_dict_model_across_every_table(
    steps: list[tuple[str, list[tuple[bytes, bytes | None]] | None]],
    requests: list[list[bytes]],
) -> None:
    store = mem()
    model: dict[bytes, bytes | None] = {}
    db = Db.open("db", store, OPTS)
    try:
        for op, writes in steps:
            if op == "write":
                assert writes is not None
                batch = WriteBatch()
                for k, v in writes:
                    if v is None:
                        batch.delete(k)
                    else:
                        batch.put(k, v)
                    model[k] = v
                db.write(batch, await_durable=False)
            elif op == "flush":
                db.flush_memtable()  # memtable -> one more L0 SST
            else:  # every L0 SST and run into one sorted run; the reopened Db reads it
                db.close()
                run_compaction_once("db", store, ONE_RUN)
                db = Db.open("db", store, OPTS)
        asked = [*requests[0], *model][:60]  # some keys surely present
        for keys in [*requests, asked, asked[::-1]]:
            want = [model.get(k) for k in keys]
            assert db.get_many(keys) == want
            assert [db.get(k) for k in keys] == want
        db.flush()  # the memtable's writes reach WAL SSTs, which a reader replays as tables
        with DbReader.open(
            "db", store, options=DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
        ) as reader:
            for keys in [*requests, asked]:
                assert reader.get_many(keys) == [model.get(k) for k in keys]
    finally:
        db.close()


def test_get_many_reads_duplicates_and_unsorted_keys_in_the_callers_order() -> None:
    with Db.open("db", mem(), OPTS) as db:
        db.write(WriteBatch().put(b"b", b"1").put(b"a", b"2").put(b"c", b"3"))
        db.flush_memtable()
        db.put(b"a", b"new")
        db.delete(b"c")
        keys = [b"c", b"a", b"zz", b"b", b"a", b"c", b"b"]
        assert db.get_many(keys) == [None, b"new", None, b"1", b"new", None, b"1"]
        assert db.get_many([]) == []
        mixed = (bytearray(b"b"), memoryview(b"a"))
        assert db.get_many(mixed) == [b"1", b"new"]  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            db.get_many([b"a", b""])


def test_get_many_outside_a_projected_range_raises_for_the_first_such_key() -> None:
    store = mem()
    with Db.open("parent", store, OPTS) as db:
        for i in range(30):
            db.put(b"k%02d" % i, b"v%d" % i, await_durable=False)
        db.flush_memtable()
    create_clone("shard", "parent", store, projection=KeyRange(b"k10", b"k20"))
    with Db.open("shard", store, OPTS) as db:
        inside = [b"k15", b"k10", b"k19", b"k15"]
        assert db.get_many(inside) == [b"v15", b"v10", b"v19", b"v15"]
        for keys, first_out in (
            ([b"k12", b"k20", b"k05"], b"k20"),
            ([b"k05", b"k12", b"k25"], b"k05"),
        ):
            with pytest.raises(InvalidArgument, match=repr(first_out)[2:-1]):
                db.get_many(keys)
    with DbReader.open(
        "shard", store, options=DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    ) as reader:
        assert reader.get_many(inside) == [b"v15", b"v10", b"v19", b"v15"]
        with pytest.raises(InvalidArgument):
            reader.get_many([b"k12", b"k20"])


@st.composite
def versioned(draw: st.DrawFn) -> list[Entry]:
    """Sorted keys, each with 1..5 versions newest first; some tombstones."""
    keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=4), min_size=1, max_size=60)))
    out: list[Entry] = []
    seq = 10_000
    for key in keys:
        for _ in range(draw(st.integers(1, 5))):
            tomb = draw(st.integers(0, 4)) == 0
            out.append((key, seq, 1 if tomb else 0, b"" if tomb else b"v%d" % seq))
            seq -= 1
    return out


@settings(max_examples=60, deadline=None)
@given(
    entries=versioned(),
    probes=st.sets(st.binary(min_size=1, max_size=4), max_size=40),
    block=st.sampled_from([48, 64, 200]),
    cached=st.booleans(),
)
def test_get_sorted_is_get_of_each_key(
    entries: list[Entry], probes: set[bytes], block: int, cached: bool
) -> None:
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=block))
    cache = BlockCache(1 << 20) if cached else None
    reader = SstReader.from_bytes(data, "t", cache=cache)
    newest: dict[bytes, tuple[int, int, bytes]] = {}
    for k, seq, kind, value in entries:
        newest.setdefault(k, (seq, kind, value))
    keys = sorted(probes | set(list(newest)[::2]))
    if cached:  # warm part of the cache: get_sorted mixes cached and uncached blocks
        for k in list(newest)[::3]:
            reader.get(k)
    assert reader.get_sorted(keys) == [newest.get(k) for k in keys]
    assert [reader.get(k) for k in keys] == [newest.get(k) for k in keys]


@pytest.mark.parametrize("cached", [False, True])
def test_get_sorted_finds_a_key_that_starts_a_block_whose_other_probes_the_bloom_rules_out(
    cached: bool,
) -> None:
    """A block's first key is looked for in the block before it too (a key's versions may
    straddle the boundary); the block itself must still be read when the bloom filter ruled
    out every other key probed in it (the final-read failure of simulation seed 471)."""
    entries = [(b"k%03d" % i, 1000 - i, 0, b"v%d" % i) for i in range(0, 200, 2)]
    data, _ = encode_sst(batch_of(entries), SstOptions(block_size=64))
    reader = SstReader.from_bytes(data, "t", cache=BlockCache(1 << 20) if cached else None)
    present = {e[0] for e in entries}
    starts = [k for k in reader.index_keys if k in present]  # index keys that are first keys
    assert len(starts) > 3
    for start in starts:
        absent = [start + b"\x00", start + b"\x01"]  # odd keys: absent, inside the same block
        want = [(s, k, v) for key, s, k, v in entries if key == start]
        assert reader.get_sorted([start, *absent]) == [want[0], None, None]


@settings(max_examples=200, deadline=None)
@given(
    index=st.lists(st.binary(max_size=3), max_size=40),
    keys=st.sets(st.binary(min_size=1, max_size=3), max_size=60),
)
def test_bisect_all_is_bisect_left_of_each_key(index: list[bytes], keys: set[bytes]) -> None:
    index.sort()  # index keys: sorted, possibly repeated (SlateDB's), some equal to keys
    ks = sorted(keys | set(index[::3]) - {b""})
    assert bisect_all(index, ks) == [bisect.bisect_left(index, k) for k in ks]
