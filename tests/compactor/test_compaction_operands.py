"""Compactions of our own writer's merge operands and TTL rows (issue 38, items 1-3): the
compactor embedded in a writer folds operands with the writer's ``DbOptions.merge_operator``
(before, it had none and every compaction of such a database failed), and a standalone
compaction without an operator is refused with nothing committed."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import MergeOperatorMissing
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

QUIET = DbOptions(flush_interval=timedelta(hours=1), merge_operator="string_append")


def write_operands(db: Db) -> None:
    db.put(b"k", b"base")
    db.merge(b"k", b"+1")
    db.flush_memtable()
    db.merge(b"k", b"+2")
    db.merge(b"n", b"a")
    db.flush_memtable()


def test_the_embedded_compactor_folds_with_the_writers_operator(store: ObjectStore) -> None:
    compactor = CompactorOptions(poll_interval=timedelta(milliseconds=20), l0_trigger=2)
    options = DbOptions(
        flush_interval=timedelta(hours=1), merge_operator="string_append", compactor=compactor
    )
    with Db.open("db", store, options) as db:
        write_operands(db)
        deadline = time.monotonic() + 10
        while not ManifestStore(store, "db").read_latest().manifest.compacted:
            assert time.monotonic() < deadline, "the embedded compactor never compacted"
            time.sleep(0.05)
    with Db.open("db", store, QUIET) as db:
        assert db.get(b"k") == b"base+1+2" and db.get(b"n") == b"a"


def test_a_compaction_without_the_operator_commits_nothing(store: ObjectStore) -> None:
    with Db.open("db", store, QUIET) as db:
        write_operands(db)
    before = ManifestStore(store, "db").read_latest().manifest
    with pytest.raises(MergeOperatorMissing):
        run_compaction_once("db", store, CompactorOptions(l0_trigger=2))
    after = ManifestStore(store, "db").read_latest().manifest
    assert after.l0 == before.l0 and after.compacted == ()
    stats = run_compaction_once(
        "db", store, CompactorOptions(l0_trigger=2, merge_operator="string_append")
    )
    assert stats is not None and stats.compactions == 1
    with Db.open("db", store, QUIET) as db:
        assert db.get(b"k") == b"base+1+2" and db.get(b"n") == b"a"
