"""An end cursor (``--until``, Spark's ``changes_until``, a micro-batch's end) another database
handed out is refused as a start cursor is (review43 of issue 43, item 1: a read cut at
another database's position reports success for rows the caller never asked for)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.cli.changes import db_changes_until
from slatedb_core.errors import CursorInvalid
from slatedb_core.feed import ChangeFeed
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from spark_jobs.changes_source import ChangesBatchReader, read_between

QUIET = DbOptions(flush_interval=timedelta(hours=1))


def test_another_databases_end_cursor_is_cursor_invalid(store: ObjectStore) -> None:
    for name in ("a", "b"):
        with Db.open(name, store, QUIET) as db:
            for i in range(4):
                db.put(b"%s%d" % (name.encode(), i), b"v")
    a, b = ChangeFeed("a", store), ChangeFeed("b", store)
    until = b.tail()
    with pytest.raises(CursorInvalid, match="another database's"):
        list(db_changes_until(a, None, until))
    start = a.tail()
    with pytest.raises(CursorInvalid, match="another database's"):
        list(read_between(a, start, until))


def test_a_spark_batch_read_to_another_databases_end_is_cursor_invalid(tmp_path: Path) -> None:
    """``changes_until`` of another database before ``changes_since``: planned as no
    partition, the read reported success with no rows."""
    url = tmp_path.as_uri()
    store = open_store(url)
    for name, n in (("a", 3), ("b", 1)):
        with Db.open(name, store, QUIET) as db:
            for i in range(n):
                db.put(b"k%d" % i, b"v")
    since, until = ChangeFeed("a", store).tail(), ChangeFeed("b", store).tail()
    options = {"url": url, "path": "a", "changes_since": since.encode()}
    reader = ChangesBatchReader({**options, "changes_until": until.encode()})
    with pytest.raises(CursorInvalid, match="another database's"):
        reader.partitions()
    assert ChangesBatchReader({**options, "changes_until": since.encode()}).partitions() == []
