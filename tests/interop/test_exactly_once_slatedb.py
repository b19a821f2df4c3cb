"""Exactly-once records (``Manifest.transactions``, ours slot 8) against SlateDB 0.17 (the
wheel): it opens, reads and writes a database whose manifest carries them, and drops them when
it rewrites the manifest, after which a re-run of an old batch is applied again (docs/format.md,
"What a SlateDB rewrite loses")."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.sst import ENTRY_SCHEMA, KIND_VALUE, encode_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)


def staged(store: ObjectStore, name: str, rows: dict[bytes, bytes]) -> str:
    keys = sorted(rows)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array([1] * len(keys), pa.uint64()),
            pa.array([KIND_VALUE] * len(keys), pa.uint8()),
            pa.array([rows[k] for k in keys], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    )
    path = f"staging/{name}.sst"
    store.put(path, encode_sst(batch)[0])
    return path


def test_slatedb_reads_and_writes_a_database_with_records_and_drops_them(
    oracle: Oracle, store: ObjectStore
) -> None:
    batch = staged(store, "b1", {b"a": b"1", b"b": b"1"})
    with Db.open("db", store, FAST) as db:
        db.put(b"own", b"x")
        assert not db.ingest_ssts([batch], txn=AppVersion("loader", 1)).already_applied
        db.record_transactions([AppVersion("other", 9)])
    latest = ManifestStore(store, "db").read_latest().manifest
    assert latest.transactions == (AppVersion("loader", 1), AppVersion("other", 9))
    # SlateDB decodes the manifest and reads the data
    assert oracle.admin().latest().id >= 1
    reader = oracle.open_reader()
    assert reader.get(b"a") == b"1" and reader.get(b"own") == b"x"
    assert dict(reader.scan()) == {b"a": b"1", b"b": b"1", b"own": b"x"}
    reader.shutdown()
    # SlateDB's writer opens it (rewriting the manifest: its fence), writes and closes
    w = oracle.open_db(s=settings(compactor=False))
    assert w.get(b"b") == b"1"
    w.put(b"c", b"slate")
    w.flush_memtable()
    w.shutdown()
    rewritten = ManifestStore(store, "db").read_latest().manifest
    assert rewritten.transactions == ()  # the documented consequence: the records are gone
    # ... and a re-run of the old batch is applied again
    rerun = staged(store, "b1-again", {b"a": b"2"})
    with Db.open("db", store, FAST) as db:
        assert db.get(b"c") == b"slate"
        again = db.ingest_ssts([rerun], txn=AppVersion("loader", 1))
        assert not again.already_applied and db.get(b"a") == b"2"
    reader = oracle.open_reader()
    assert reader.get(b"a") == b"2" and reader.get(b"c") == b"slate"
    reader.shutdown()
