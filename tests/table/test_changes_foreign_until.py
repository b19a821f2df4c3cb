"""A table's ``until`` whose shard cursors another database handed out (a table dropped and
created again at the path, whose shard databases are named as before) is CursorInvalid, as a
``since`` is (review43 of issue 43, item 2: a read cut at another database's positions
reports success for rows the caller never asked for)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.errors import ChangesCollected, CursorInvalid
from slatedb_core.options import DbOptions
from slatedb_core.table import Table
from slatedb_core.table.changes import TableCursor
from slatedb_core.writer.db import Db
from tests.table.conftest import OPTS, fill, memory

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_a_table_until_of_another_tables_shards_is_cursor_invalid() -> None:
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"n": b"1"})
        mine = t.changes_tail()
    with Table.create("u", store, [b"m"], OPTS) as u:
        fill(u, {b"a": b"1", b"n": b"1"})
        theirs = u.changes_tail()
    # u's shard cursors under t's shard paths: positions t's shards have too
    assert [p for p, _ in mine.shards] == [p for p, _ in theirs.shards]
    foreign = TableCursor(mine.map_id, theirs.shards)
    with Table.open("t", store, OPTS) as t, pytest.raises(CursorInvalid, match="another"):
        list(t.changes(None, until=foreign))


def test_a_table_until_never_yields_a_shard_snapshot_past_it() -> None:
    """A shard whose feed starts from a snapshot (an ingest put rows in L0 that no WAL SST
    holds) newer than the until cursor: ``Table.changes(None, until=)`` yielded the snapshot,
    then ``until``, and a read from ``until`` delivered those changes again."""
    store = memory()
    with Table.create("t", store, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"n": b"1"})
        until = t.changes_tail()
        shard = t.path.rstrip("/") + "/" + until.shards[0][0]
    with Db.open(shard, store, QUIET) as db:
        db.put(b"a", b"2")  # after until
        db.bulk_ingest(pa.table({"key": [b"b"], "value": [b"v"]}))
    with Table.open("t", store, OPTS) as t:
        try:
            got = [
                (r["key"], r["value"])
                for b in t.changes(None, until=until)
                for r in b.rows.to_pylist()
            ]
        except ChangesCollected:
            return
    assert sorted(got) == [(b"a", b"1"), (b"n", b"1")]
