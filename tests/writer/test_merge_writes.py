"""Our writer's merge operands (issue 38, item 2, write side): ``Db.merge``, ``WriteBatch.merge``
with ``DbOptions.merge_operator`` (SlateDB RFC 0006). The WAL receives each operand as written
(kind 2, its TTL, its create_ts); the memtable folds it onto the key's entry, so reads return the
folded value; the L0 flush writes what SlateDB's memtable flush writes (equal-TTL neighbours
folded into one row, the others kept apart); a crashed writer's replay folds the WAL the same
way. Without a merge operator, ``Db.merge`` is refused before anything is written, as SlateDB's
``Db::merge`` refuses it (``MergeOperatorMissing``)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument, MergeOperatorFailed, MergeOperatorMissing
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE
from slatedb_core.options import DbOptions
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks

APPEND = DbOptions(flush_interval=timedelta(hours=1), merge_operator="string_append")


def i64(n: int) -> bytes:
    return n.to_bytes(8, "little", signed=True)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake")


def wal_rows(store: ObjectStore) -> list[dict[str, object]]:
    wal = WalLog(store, "db")
    out: list[dict[str, object]] = []
    for wal_id in wal.list_ids():
        out += wal.decode(
            wal_id, store.get(wal.path(wal_id)).data, timestamps=True
        ).entries.to_pylist()
    return out


def l0_rows(store: ObjectStore, db: Db) -> list[dict[str, object]]:
    view = db.manifest.manifest.l0[0]
    path = f"db/compacted/{view.sst_id}.sst"
    rows: list[dict[str, object]] = (
        SstReader.from_bytes(store.get(path).data, path).read_all(timestamps=True).to_pylist()
    )
    return rows


def test_merge_without_an_operator_is_refused_and_writes_nothing(store: ObjectStore) -> None:
    with Db.open("db", store, DbOptions(flush_interval=timedelta(hours=1))) as db:
        db.put(b"a", b"1")
        db.flush()
        before = sorted((m.path, m.size) for m in store.list("db/wal"))
        with pytest.raises(MergeOperatorMissing) as e:
            db.merge(b"a", b"x")
        assert e.value.key == b"a"
        with pytest.raises(MergeOperatorMissing):
            db.write(WriteBatch().put(b"b", b"2").merge(b"c", b"y"))
        assert db.get(b"a") == b"1" and db.get(b"b") is None
        db.flush()
        assert sorted((m.path, m.size) for m in store.list("db/wal")) == before


def test_an_unknown_operator_name_is_refused_at_open(store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument, match="unknown merge operator"):
        Db.open("db", store, DbOptions(merge_operator="no_such_operator"))
    assert not list(store.list("db"))


def test_merges_fold_in_the_memtable_and_enter_the_wal_as_written(store: ObjectStore) -> None:
    hooks = WriterHooks()  # its steps show the writer's state
    with Db.open("db", store, APPEND, hooks=hooks) as db:
        db.put(b"v", b"base")
        db.merge(b"v", b"+1")
        db.merge(b"v", b"+2")
        db.merge(b"o", b"a")  # onto nothing: an operand
        db.merge(b"o", b"b")
        db.delete(b"t")
        db.merge(b"t", b"z")  # onto a tombstone: a value
        db.write(WriteBatch().put(b"b", b"B").merge(b"b", b"+").merge(b"b", b"!").delete(b"x"))
        assert db.get(b"v") == b"base+1+2"
        assert db.get(b"o") == b"ab"
        assert db.get(b"t") == b"z"
        assert db.get(b"b") == b"B+!"
        assert hooks.steps is not None
        memtable = hooks.steps.state().memtable
        v, o = memtable.get(b"v"), memtable.get(b"o")
        assert v is not None and v[1] == KIND_VALUE and v[2] == b"base+1+2"
        assert o is not None and o[1] == KIND_MERGE and o[2] == b"ab"
    rows = wal_rows(store)
    operands = [(r["key"], r["value"]) for r in rows if r["kind"] == KIND_MERGE]
    assert operands == [
        (b"v", b"+1"),
        (b"v", b"+2"),
        (b"o", b"a"),
        (b"o", b"b"),
        (b"t", b"z"),
        (b"b", b"+"),
        (b"b", b"!"),
    ]
    seqs = [int(str(r["seq"])) for r in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_the_l0_flush_folds_what_slatedbs_flush_folds(store: ObjectStore) -> None:
    """Operands with the same expire_ts fold into one row; one with another TTL stays a row of
    its own above them (SlateDB's flush folds only equal-expire_ts neighbours)."""
    with Db.open("db", store, APPEND) as db:
        db.put(b"k", b"v")
        db.merge(b"k", b"1")
        db.merge(b"k", b"2", ttl=3_600_000)
        db.merge(b"k", b"3", ttl=7_200_000)
        db.merge(b"n", b"a")
        db.merge(b"n", b"b")
        assert db.get(b"k") == b"v123"
        db.flush_memtable()
        rows = l0_rows(store, db)
        assert db.get(b"k") == b"v123"
    k = [(r["kind"], r["value"]) for r in rows if r["key"] == b"k"]
    assert k == [(KIND_MERGE, b"3"), (KIND_MERGE, b"2"), (KIND_VALUE, b"v1")]
    k_rows = [r for r in rows if r["key"] == b"k"]
    expire, create = k_rows[0]["expire_ts"], k_rows[0]["create_ts"]
    assert isinstance(expire, int) and isinstance(create, int) and expire - create == 7_200_000
    seqs = [int(str(r["seq"])) for r in k_rows]
    assert seqs == sorted(seqs, reverse=True)
    assert [(r["kind"], r["value"]) for r in rows if r["key"] == b"n"] == [(KIND_MERGE, b"ab")]


def test_an_expired_operand_is_dropped_by_the_flush(store: ObjectStore) -> None:
    with Db.open("db", store, APPEND) as db:
        db.put(b"k", b"v")
        db.merge(b"k", b"gone", ttl=0)
        db.merge(b"e", b"alone", ttl=0)
        db.put(b"later", b"x", ttl=3_600_000)  # the memtable's last tick is past both
        db.flush_memtable()
        rows = l0_rows(store, db)
    by_key = {r["key"]: r for r in rows if r["key"] != b"k"}
    assert b"e" not in by_key
    assert [(r["kind"], r["value"]) for r in rows if r["key"] == b"k"] == [(KIND_VALUE, b"v")]


def test_a_failing_operator_names_the_key(store: ObjectStore) -> None:
    with Db.open("db", store, DbOptions(merge_operator="add_int64")) as db:
        db.put(b"n", b"not eight bytes")
        with pytest.raises(MergeOperatorFailed) as e:
            db.merge(b"n", i64(1))
        assert e.value.key == b"n"


def test_a_crashed_writers_replay_folds_its_operands(store: ObjectStore) -> None:
    options = DbOptions(flush_interval=timedelta(hours=1), merge_operator="add_int64")
    db = Db.open("db", store, options)
    db.put(b"c", i64(10))
    for _ in range(3):
        db.merge(b"c", i64(5))
    db.merge(b"d", i64(-2))
    db.merge(b"d", i64(7), ttl=3_600_000)
    db.delete(b"x")
    db.merge(b"x", i64(1))
    db.flush()
    db._simulate_crash()
    with Db.open("db", store, options) as again:
        assert again.get(b"c") == i64(25)
        assert again.get(b"d") == i64(5)
        assert again.get(b"x") == i64(1)
        again.flush_memtable()
        rows = l0_rows(store, again)
        assert again.get(b"d") == i64(5)
    d = [(r["kind"], r["value"]) for r in rows if r["key"] == b"d"]
    assert d == [(KIND_MERGE, i64(7)), (KIND_MERGE, i64(-2))]
    assert [(r["kind"], r["value"]) for r in rows if r["key"] == b"c"] == [(KIND_VALUE, i64(25))]
    assert [r["kind"] for r in rows if r["key"] == b"x"] == [KIND_VALUE]
    assert KIND_TOMBSTONE not in [r["kind"] for r in rows]


def test_a_scan_of_a_memtable_with_operands_and_runs(store: ObjectStore) -> None:
    """The memtable's scan merged its dict and its runs with the read's merge, which refuses an
    operand when it keeps tombstones: a scan of a memtable holding an operand entry beside a
    run (a ``put_arrow``) raised ``UnsupportedFeature``. Entries are final per key (folded at
    the write), so the scan keeps the newest of each key as it is."""
    with Db.open("db", store, APPEND) as db:
        db.put(b"a", b"1", ttl=3_600_000)
        db.merge(b"a", b"+")
        db.put_arrow(pa.table({"key": [b"c%04d" % i for i in range(5000)], "value": [b"x"] * 5000}))
        db.merge(b"c0001", b"y")  # onto a run row
        db.merge(b"m", b"only")
        db.delete(b"c0002")
        rows = dict(db.scan())
        assert rows[b"a"] == b"1+" and rows[b"c0001"] == b"xy" and rows[b"m"] == b"only"
        assert b"c0002" not in rows and len(rows) == 5001
        assert db.scan_arrow().read_all().num_rows == 5001
        db.flush_memtable()
        assert dict(db.scan()) == rows
