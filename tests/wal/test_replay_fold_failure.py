"""Replay folds a merge operand into key versions with other TTLs: an operator that raises there
does not fail ``Db.open``."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.errors import MergeOperatorFailed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

PATH = "db"


APPEND = DbOptions(merge_operator="string_append", flush_interval=timedelta(milliseconds=10))


HOUR_MS = 3_600_000


def needs_existing(key: bytes, existing: bytes | None, operand: bytes) -> bytes:
    """An application operator that only appends onto an existing value."""
    if existing is None:
        raise ValueError("no existing value to append to")
    return existing + operand


def test_replay_fold_of_ttl_parts_that_raises_does_not_fail_open(store: ObjectStore) -> None:
    """Item 1 (b06a87a): replay folds an operand twice when the key holds versions with other
    TTLs (the entry and the ``parts`` SlateDB's flush writes); the operator raising on the second
    fold (two operands, no base) escaped ReplayOperator and failed ``Db.open`` after the fence,
    the very failure b06a87a removes. Now the key is left Unresolved and no write is lost.

    Found by the review of issue 38, second pass (was review/test_issue38_review2.py)."""
    db = Db.open(PATH, store, APPEND)
    db.put(b"k", b"base")
    batch = WriteBatch()  # one clock read: both operands get the same expire_ts
    batch.merge(b"k", b"a", ttl=HOUR_MS)  # another TTL than the base's: its own version
    batch.merge(b"k", b"b", ttl=HOUR_MS)  # folds onto "a" alone: op(None, "a") then "b"
    db.write(batch)
    db.put(b"other", b"v")
    db.flush()
    db._simulate_crash()
    options = DbOptions(merge_operator=needs_existing, flush_interval=timedelta(milliseconds=10))
    with Db.open(PATH, store, options) as db:
        assert db.get(b"other") == b"v"
        # the entry folds onto the base, so the read may succeed or fail for this key only
        try:
            assert db.get(b"k") == b"baseab"
        except MergeOperatorFailed as e:
            assert e.key == b"k"
        db.flush_memtable()
    with Db.open(PATH, store, APPEND) as db:
        assert db.get(b"k") == b"baseab"
        assert db.get(b"other") == b"v"
