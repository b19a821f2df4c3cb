"""A writer's open over damaged L0 SSTs behind the compacted boundary: a missing or corrupted SST is
a typed error, never an older value, and a plain open rewrites none."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import (
    CorruptionError,
    SlateDBError,
)
from slatedb_core.gc import run_gc_once
from slatedb_core.layout import sst_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.gc import ZERO

QUIET = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(hours=1),  # a writer that never learns by polling
    compactor=None,
)


def _own(store: ObjectStore, path: str) -> list[str]:
    return sorted(m.path for m in store.list(path + "/") if "/gc/" not in m.path)


# ---- items 5 and 6: a writer's open neither drops nor copies damaged L0 SSTs ----------------
def _l0_db_behind_boundary(store: ObjectStore) -> str:
    """A database whose only L0 SST holds ``k``=new over WAL-free older data, behind the
    compacted boundary; returns the SST's path."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"k", b"old")
        db.flush_memtable()
        db.put(b"k", b"new")
        db.flush_memtable()
    run_gc_once("db", store, ZERO)  # the boundary now covers both SSTs
    m = ManifestStore(store, "db").read_latest().manifest
    return sst_path("db", m.l0[0].sst_id)


def test_a_missing_l0_sst_is_a_typed_error_not_an_older_value(store: ObjectStore) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
    newest = _l0_db_behind_boundary(store)
    store.delete(newest)
    try:
        db = Db.open("db", store, QUIET)
    except SlateDBError as e:
        assert newest.rsplit("/", 1)[1].split(".")[0] in str(e)
        return
    with db:
        with pytest.raises(SlateDBError) as err:
            db.get(b"k")
        assert newest.rsplit("/", 1)[1].split(".")[0] in str(err.value)
    assert not store.exists(newest)


def test_a_corrupted_l0_sst_is_reported_and_never_copied(store: ObjectStore) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
    newest = _l0_db_behind_boundary(store)
    good = store.get(newest).data
    store.put(newest, good[:-9] + bytes(9))
    before = _own(store, "db")
    try:
        with Db.open("db", store, QUIET) as db:
            with pytest.raises(CorruptionError):
                db.get(b"k")
    except CorruptionError:
        pass
    assert [p for p in _own(store, "db") if "/compacted/" in p] == [
        p for p in before if "/compacted/" in p
    ]
    store.put(newest, good)  # restoring the original repairs the database
    with Db.open("db", store, QUIET) as db:
        assert db.get(b"k") == b"new"


def test_a_plain_open_rewrites_no_l0_sst(store: ObjectStore) -> None:
    """Found by the outside review, RELIABILITY.md findings 1-6 and 11 (was test_review_protocol.py)."""
    _l0_db_behind_boundary(store)
    before = [p for p in _own(store, "db") if "/compacted/" in p]
    with Db.open("db", store, QUIET):
        pass
    assert [p for p in _own(store, "db") if "/compacted/" in p] == before
