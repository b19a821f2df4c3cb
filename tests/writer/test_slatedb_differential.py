"""Review of issue 38 (items 1 and 2): random sequences of puts, deletes, merges, TTL puts and
merges, write batches, WAL and memtable flushes, reopens and (ours) crashes, written into our
engine and into SlateDB 0.17's own (the ``slatedb`` wheel, ``string_append`` on both sides).
Every read must agree: our writer's gets and scan against SlateDB's writer's, and each engine's
reader of the other's database against the same.

TTLs are either long (never expire in a test) or 1 ms followed by a pause, so whether a row is
expired at a memtable flush (SlateDB's flush retention at the memtable's last clock tick) does not
depend on timing: a write after the pause is always past the expiry in both engines."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, SlateWriter
from tests.interop.oracle_merge import Op, open_reader_at, ours_write, slatedb_write
from tests.interop.oracle_merge_read import StringAppend, open_merge_db

pytestmark = [pytest.mark.slatedb, pytest.mark.slow]


KEYS = [b"a", b"b", b"c"]


TICK: Op = ("put", b"~tick", b"", None)


LONG = 3_600_000


OURS = {
    n: DbOptions(
        flush_interval=timedelta(milliseconds=10),
        merge_operator="string_append",
        max_parallel_writes=n,
    )
    for n in (1, 3)
}


_key = st.sampled_from(KEYS)


_val = st.sampled_from([b"1", b"2", b"3", b"x", b""])


_ttl = st.sampled_from([None, None, 1, LONG])


_write: st.SearchStrategy[Op] = st.one_of(
    st.tuples(st.just("put"), _key, _val, _ttl),
    st.tuples(st.just("merge"), _key, _val, _ttl),
    st.tuples(st.just("delete"), _key, st.none(), st.none()),
)


_step = st.one_of(
    st.lists(_write, min_size=1, max_size=3).map(lambda ops: ("write", ops)),
    st.sampled_from([("flush_wal", None), ("flush_mem", None), ("reopen", None)]),
    st.sampled_from([("crash", None)]),
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    return d


@pytest.fixture
def oracle(root: Path) -> Iterator[Oracle]:
    o = Oracle(root)
    try:
        yield o
    finally:
        o.close()


def _reads(get: object, scan: object) -> tuple[dict[bytes, bytes | None], list[object]]:
    assert callable(get) and callable(scan)
    return {k: get(k) for k in KEYS}, [tuple(kv) for kv in scan()]


def _arrow_reads(db: Db | DbReader) -> tuple[dict[bytes, bytes | None], list[object]]:
    """The same through ``get_many`` and ``scan_arrow``."""
    rows = db.scan_arrow().read_all().to_pylist()
    return dict(zip(KEYS, db.get_many(KEYS), strict=True)), [(r["key"], r["value"]) for r in rows]


FOLLOW = DbReaderOptions(
    merge_operator="string_append",
    mode=ReaderMode.FOLLOW_LATEST,
    manifest_poll_interval=timedelta(hours=1),
    checkpoint_lifetime=timedelta(hours=3),
)


_n = itertools.count()


@pytest.mark.parametrize("parallel", sorted(OURS))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_step, min_size=1, max_size=10))
def test_random_ops_read_as_slatedb_reads_them(
    oracle: Oracle, root: Path, parallel: int, steps: list[tuple[str, list[Op] | None]]
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_differential.py)."""
    n = next(_n)
    ours_path, theirs_path = f"ours{n}", f"theirs{n}"
    store = open_store(root.as_uri())
    db = Db.open(ours_path, store, OURS[parallel])
    theirs: SlateWriter = open_merge_db(oracle, StringAppend(), path=theirs_path)
    # a reader of ours open all along: it replays WAL tails our writer flushes to L0 meanwhile
    follower = DbReader.open(ours_path, store, options=FOLLOW)
    try:
        for kind, ops in steps:
            if kind == "write":
                assert ops is not None
                try:
                    slatedb_write(theirs, ops)
                except sdb.Error.Invalid:  # operands of one key with different TTLs
                    with pytest.raises(InvalidArgument):
                        ours_write(db, ops)
                    continue
                ours_write(db, ops)
                if any(op[3] == 1 for op in ops):
                    # past the 1 ms TTL in both engines, and a write there: any flush from now
                    # on expires the row in both (SlateDB's tick is its last write's; ours may
                    # be a WAL flush's, see test_issue38_wal_tick.py)
                    time.sleep(0.005)
                    ours_write(db, [TICK])
                    slatedb_write(theirs, [TICK])
            elif kind == "flush_wal":
                db.flush()
                theirs.flush_wal()
            elif kind == "flush_mem":
                db.flush_memtable()
                theirs.flush_memtable()
            else:  # reopen, or (ours) crash: every write was durable, so the same state
                # SlateDB's close flushes its memtable (its retention then expires rows at the
                # last tick): ours flushes before closing, or after replaying a crashed WAL
                if kind == "crash":
                    db._simulate_crash()
                else:
                    db.flush_memtable()
                    db.close()
                db = Db.open(ours_path, store, OURS[parallel])
                if kind == "crash":
                    db.flush_memtable()
                theirs.shutdown()
                theirs = open_merge_db(oracle, StringAppend(), path=theirs_path)
            follower.refresh()  # between steps: tails and L0 SSTs overlap at times
        want = _reads(theirs.get, theirs.scan)
        assert _reads(db.get, db.scan) == want, steps
        assert _arrow_reads(db) == want, steps
        db.flush()
        follower.refresh()
        assert _reads(follower.get, follower.scan) == want, steps
        assert _arrow_reads(follower) == want, steps
        slatedb_reader = open_reader_at(oracle, ours_path, StringAppend())
        assert _reads(slatedb_reader.get, slatedb_reader.scan) == want, steps
        slatedb_reader.shutdown()
        theirs.flush_wal()
        our_reader = DbReader.open(
            theirs_path, store, options=DbReaderOptions(merge_operator="string_append")
        )
        try:
            assert _reads(our_reader.get, our_reader.scan) == want, steps
        finally:
            our_reader.close()
    finally:
        follower.close()
        db.close()
        theirs.shutdown()
