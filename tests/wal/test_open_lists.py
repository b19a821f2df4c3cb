"""Reopening a database our writer closed cleanly costs two LISTs of its WAL (fencing, replay),
as before the WAL store check (issue 38 item 4 added a third before the epoch bump; the
data-model bench measured reopen 4.4 -> 5.3 ms): the check lists only when what it finds can
refuse the open."""

from __future__ import annotations

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.writer.db import Db


def test_a_clean_reopen_lists_the_wal_as_before_the_wal_store_check(mem: ObjectStore) -> None:
    store = FaultyStore(mem)
    with Db.open("db", store) as db:
        db.put(b"k", b"v")
    lists = store.add_rule(FaultRule("list", "db/wal*"))  # counts, injects nothing
    with Db.open("db", store) as db:
        assert db.get(b"k") == b"v"
        assert lists.seen == 2  # 3 with the check listing too (d5ea00b: 2)
