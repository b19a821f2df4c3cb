"""Review of issue 38 (items 1 and 2): wrong types at our write API. ``Db.merge(key, None)`` and
``Db.put(key, None, ttl=...)`` (or any put while the database has a ``default_ttl``) went through
the path for rows with a TTL or an operand, which reads a None value as a delete: they deleted
the key and reported success, where ``Db.put(key, None)`` and ``WriteBatch.merge(key, None)`` are
refused (``InvalidArgument``). An operand or value that is not bytes is refused everywhere,
having written nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.options import DbOptions
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db

CALLS: dict[str, tuple[DbOptions, Callable[[Db], object]]] = {
    "merge None": (
        DbOptions(flush_interval=timedelta(hours=1), merge_operator="string_append"),
        lambda db: db.merge(b"k", None),  # type: ignore[arg-type]
    ),
    "merge str": (
        DbOptions(flush_interval=timedelta(hours=1), merge_operator="string_append"),
        lambda db: db.merge(b"k", "x"),  # type: ignore[arg-type]
    ),
    "put None with ttl": (
        DbOptions(flush_interval=timedelta(hours=1)),
        lambda db: db.put(b"k", None, ttl=1000),  # type: ignore[arg-type]
    ),
    "put None under default_ttl": (
        DbOptions(flush_interval=timedelta(hours=1), default_ttl=1000),
        lambda db: db.put(b"k", None),  # type: ignore[arg-type]
    ),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_value_that_is_not_bytes_is_refused(tmp_path: Path, call: str) -> None:
    """Found by the review of issue 38 (was review/test_issue38_wrong_types.py)."""
    options, write = CALLS[call]
    with Db.open("db", open_store(tmp_path.as_uri()), options) as db:
        db.put(b"k", b"v", ttl=3_600_000)
        with pytest.raises(InvalidArgument):
            write(db)
        assert db.get(b"k") == b"v"
