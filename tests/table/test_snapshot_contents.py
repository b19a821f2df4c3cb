"""What a table snapshot holds: every write acknowledged before it was taken, whether it reached L0
or is still only in a shard's WAL, and nothing acknowledged after; the same rows whatever readers
opened on the shards before (adversarial review, "a table snapshot can miss acknowledged writes
that are still only in the WAL, and what it includes depends on history")."""

from __future__ import annotations

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table
from tests.table.conftest import OPTS


def _snapshot_get(store: ObjectStore, table: Table, key: bytes) -> bytes | None:
    snap = table.snapshot()
    try:
        with Table.open(table.path, store, OPTS, snapshot=snap) as view:
            return view.get(key)
    finally:
        table.release_snapshot(snap)


def test_a_snapshot_holds_a_durable_write_of_a_closed_writer(mem: ObjectStore) -> None:
    with Table.create("t", mem, [], OPTS) as t:
        with t.writer(0) as db:
            db.put(b"a", b"1")  # durable: in a WAL SST, never flushed to L0
        assert _snapshot_get(mem, t, b"a") == b"1"


def test_a_snapshot_holds_a_durable_write_of_a_live_writer(mem: ObjectStore) -> None:
    with Table.create("t", mem, [], OPTS) as t, t.writer(0) as db:
        db.put(b"a", b"1")
        assert _snapshot_get(mem, t, b"a") == b"1"


def test_a_write_acknowledged_after_the_snapshot_is_not_in_it(mem: ObjectStore) -> None:
    with Table.create("t", mem, [], OPTS) as t, t.writer(0) as db:
        db.put(b"a", b"before")
        snap = t.snapshot()
        db.put(b"a", b"after")
        db.put(b"b", b"after")
        with Table.open("t", mem, OPTS, snapshot=snap) as view:
            assert view.get(b"a") == b"before"
            assert view.get(b"b") is None
            assert list(view.scan()) == [(b"a", b"before")]


def test_an_earlier_reader_does_not_change_what_a_snapshot_holds(mem: ObjectStore) -> None:
    """The review's case: the same history but for one reader opened before the snapshot gave
    the row only with that reader (its checkpoint recorded the WAL it had seen)."""
    results = []
    for with_reader in (False, True):
        with Table.create(f"t{int(with_reader)}", mem, [b"m"], OPTS) as t:
            with t.writer(0) as db:
                db.put(b"a", b"1")
                db.put(b"b", b"2")
            if with_reader:
                assert t.get(b"a") == b"1"  # opens a managed reader on shard 0
            snap = t.snapshot()
            with t.writer(0) as db:
                db.put(b"a", b"later")
            with Table.open(t.path, mem, OPTS, snapshot=snap) as view:
                results.append(list(view.scan()))
    assert results[0] == results[1] == [(b"a", b"1"), (b"b", b"2")]
