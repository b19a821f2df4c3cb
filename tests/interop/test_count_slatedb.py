"""``slatedb count`` and the approximate rows of ``table stats`` on databases either engine writes
(issue 40, item 4): the count equals what SlateDB 0.17's own reader scans, at the latest state
and at a checkpoint; SSTs SlateDB wrote carry no entry count in the manifest, so the approximate
rows come from their stats blocks (docs/format.md, "SSTs"). On the local filesystem and on S3."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.fleet.table_stats import approximate_rows
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.oracle import DB, Oracle, settings

pytestmark = pytest.mark.slatedb


def count(url: str, *args: str) -> Any:
    r = CliRunner().invoke(cli, ["--url", url, "--path", DB, "count", *args, "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr, r.exception)
    return json.loads(r.stdout)["keys"]


def test_count_of_what_slatedb_writes(both_stores: tuple[Oracle, ObjectStore, str]) -> None:
    oracle, store, url = both_stores
    w = oracle.open_db(s=settings(compactor=False))
    w.write((b"k%04d" % i, b"v1") for i in range(200))
    w.flush_memtable()
    w.write(
        [
            *((b"k%04d" % i, None) for i in range(50)),
            *((b"k%04d" % i, b"v2") for i in range(150, 170)),
        ]
    )
    w.flush_memtable()
    cid = oracle.admin().create_checkpoint()
    w.write((b"k%04d" % i, None) for i in range(60, 70))  # tombstones only in the WAL
    w.flush_wal()
    assert count(url) == len(w.scan()) == 200 - 50 - 10
    assert count(url, "--checkpoint", str(cid)) == len(oracle.open_reader(checkpoint=cid).scan())
    assert count(url, "--checkpoint", str(cid)) == 150
    manifest = ManifestStore(store, DB).read_latest().manifest
    assert manifest.ssts and all(s.info.entry_count == 0 for s in manifest.ssts)
    assert approximate_rows(store, DB, manifest) == (200 + 50 + 20, 0)


def test_slatedb_reads_what_we_count(both_stores: tuple[Oracle, ObjectStore, str]) -> None:
    oracle, store, url = both_stores
    with Db.open(DB, store, DbOptions()) as db:
        for i in range(100):
            db.put(b"k%04d" % i, b"v", await_durable=False)
        db.flush_memtable()
        for i in range(0, 100, 4):
            db.delete(b"k%04d" % i, await_durable=False)
        db.put(b"k9999", b"v")
    assert count(url) == len(oracle.open_reader(follow=True).scan()) == 100 - 25 + 1
