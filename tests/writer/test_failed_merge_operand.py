"""Review of issue 38 (item 2): our memtable folds a merge operand at write time, so the merge
operator (the application's code) runs inside the write. When it raises (``add_int64`` given an
operand of the wrong length, a callable with a bug), the write is refused with
``MergeOperatorFailed``; it must then have written nothing: a write batch is atomic, and a refused
write must not be served by reads (it is in no WAL SST, so it is gone after a restart)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.errors import MergeOperatorFailed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

OPTS = DbOptions(flush_interval=timedelta(hours=1), merge_operator="add_int64")


def i64(n: int) -> bytes:
    return n.to_bytes(8, "little", signed=True)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake")


def test_a_batch_whose_operand_fails_writes_none_of_it(store: ObjectStore) -> None:
    """Found by the review of issue 38 (was review/test_issue38_failed_merge.py)."""
    db = Db.open("db", store, OPTS)
    db.put(b"k", i64(5))
    db.merge(b"n", i64(1))
    batch = WriteBatch()
    batch.merge(b"a", i64(1))
    batch.put(b"p", i64(7))
    batch.merge(b"n", i64(2))
    batch.merge(b"k", b"bad")  # not 8 bytes: add_int64 raises
    with pytest.raises(MergeOperatorFailed):
        db.write(batch)
    # nothing of the refused batch is served, and the keys it touched read as before
    assert [db.get(k) for k in (b"a", b"p", b"n", b"k")] == [None, None, i64(1), i64(5)]
    db.put(b"z", i64(0))
    db.flush_memtable()
    assert [db.get(k) for k in (b"a", b"p", b"n", b"k")] == [None, None, i64(1), i64(5)]
    db.close()
    with Db.open("db", store, OPTS) as again:
        assert [again.get(k) for k in (b"a", b"p", b"n", b"k", b"z")] == [
            None,
            None,
            i64(1),
            i64(5),
            i64(0),
        ]


def test_a_failed_operand_keeps_the_key_and_its_pending_versions(store: ObjectStore) -> None:
    """A key with versions the flush keeps apart (operands of different TTLs) loses none of
    them when a later operand fails, whether the key's entry is in the dict or a sorted run.

    Found by the review of issue 38 (was review/test_issue38_failed_merge.py)."""
    db = Db.open("db", store, OPTS)
    db.put_arrow(
        pa.table({"key": [b"r%04d" % i for i in range(300)], "value": [i64(i) for i in range(300)]})
    )
    db.merge(b"r0005", i64(10), ttl=3_600_000)
    db.merge(b"r0005", i64(100), ttl=7_200_000)
    with pytest.raises(MergeOperatorFailed):
        db.merge(b"r0005", b"bad")
    with pytest.raises(MergeOperatorFailed):
        db.merge(b"r0006", b"bad")
    assert db.get(b"r0005") == i64(5 + 10 + 100)
    assert db.get(b"r0006") == i64(6)
    db.flush_memtable()
    assert db.get(b"r0005") == i64(5 + 10 + 100)
    assert db.get(b"r0006") == i64(6)
    db.close()
