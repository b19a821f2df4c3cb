"""Adversarial review of ``Db.ingest_ssts`` with stated seqs (docs/format.md, "Ingested SSTs"):
what it accepts must be what it commits and what our reads can serve."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.errors import InvalidArgument, UnsupportedFeature
from slatedb_core.options import DbOptions
from slatedb_core.sst import KIND_VALUE, SstReader
from slatedb_core.sst.format import KIND_MERGE
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.writer.ingest_steps import sst_of_rows

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=200)
)


STATED = 1 << 40  # above every seq the tests' writers give


@pytest.fixture
def store(tmp_path: object) -> ObjectStore:
    return open_store(str(tmp_path))


@pytest.mark.parametrize("seqs", [None, [STATED]])
def test_merge_operands_are_refused_whether_linked_or_re_encoded(
    store: ObjectStore, seqs: list[int] | None
) -> None:
    """A source holding merge operands was refused when re-encoded but committed when its seqs
    were stated (linked as it is); every later read of the key then failed with
    UnsupportedFeature (this engine has no merge operator). In a database without a merge
    operator both refuse now (MergeOperatorMissing, an UnsupportedFeature), committing nothing;
    with one, both carry the operands (tests/interop/test_ingest_rows.py, issue 38).

    Found by the adversarial review of ingest_ssts' stated seqs (was test_ingest_seq_interleavings.py)."""
    store.put(
        "staging/m.sst",
        sst_of_rows([(b"k1", STATED, KIND_MERGE, b"+1"), (b"k2", STATED, KIND_VALUE, b"v2")]),
    )
    with Db.open("db", store, FAST) as db:
        db.put(b"k1", b"before")
        before = db.manifest.id
        with pytest.raises(UnsupportedFeature):
            db.ingest_ssts(["staging/m.sst"], seqs=seqs)
        assert db.manifest.id == before
        assert db.get(b"k1") == b"before" and db.get(b"k2") is None


@pytest.mark.parametrize("seqs", [None, [STATED]])
def test_a_wal_sst_source_is_refused_not_skipped_as_empty(
    store: ObjectStore, seqs: list[int] | None
) -> None:
    """A WAL SST (rows in seq order, no key range in its info) was taken for an empty source:
    ``ingest_ssts`` reported 0 rows ingested and returned as if it had succeeded.

    Found by the adversarial review of ingest_ssts' stated seqs (was test_ingest_seq_interleavings.py)."""
    with Db.open("src", store, FAST) as db:
        db.put(b"z", b"1")
        db.put(b"a", b"2")
    wal = next(
        m.path
        for m in store.list("src/wal/")
        if m.size and SstReader.open(store, m.path).info.entry_count
    )
    with Db.open("db", store, FAST) as db:
        with pytest.raises(InvalidArgument, match="WAL"):
            db.ingest_ssts([wal], seqs=seqs)
        assert db.get(b"a") is None
