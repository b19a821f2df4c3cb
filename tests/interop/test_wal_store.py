"""A database whose WAL lives in a separate object store (SlateDB's ``with_wal_object_store``,
SlateDB RFC 0009), both directions with SlateDB 0.17's engine, on the local filesystem and on the
S3 server (issue 38, item 4).

SlateDB keeps the WAL at ``<db>/wal/`` of the WAL store and everything else in the main store.
With ``wal_url`` our reader, writer, CLI and GC find it there; without it they refuse with
``WalStoreMissing`` instead of serving (or writing into) an empty WAL.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from slatedb_core.checkpoints import create_checkpoint
from slatedb_core.cli.main import cli
from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.options import (
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, rows, scanner
from tests.interop.oracle import settings
from tests.interop.oracle_wal import WalStores, wal_stores
from tests.interop.rounds_steps import slate_rounds, slate_tail

pytestmark = pytest.mark.slatedb

__all__ = ["wal_stores"]  # the fixture, used by name

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10), manifest_poll_interval=timedelta(milliseconds=100)
)
MODES = [ReaderMode.MANAGED, ReaderMode.FOLLOW_LATEST]


def wal_ids(store: ObjectStore) -> list[int]:
    """WAL object ids (SSTs and fences) under ``db/wal/`` of ``store``."""
    return sorted(int(m.path.rsplit("/", 1)[1].split(".")[0]) for m in store.list("db/wal"))


def snapshot(store: ObjectStore) -> dict[str, str]:
    return {m.path: m.e_tag or str(m.size) for m in store.list("db")}


def reader_options(mode: ReaderMode, wal_url: str | None) -> DbReaderOptions:
    return DbReaderOptions(
        mode=mode, manifest_poll_interval=timedelta(milliseconds=100), wal_url=wal_url
    )


def cli_run(s: WalStores, *args: str, wal: bool = True) -> Any:
    pre = ["--url", s.url, "--path", "db"] + (["--wal-url", s.wal_url] if wal else [])
    return CliRunner().invoke(cli, [*pre, *args])


def slatedb_wrote_a_wal_tail(s: WalStores) -> Model:
    """SlateDB, WAL in the WAL store: two flushed rounds, then a durable tail only in its WAL
    (its writer stays open: nothing flushes that memtable)."""
    model = Model()
    w = s.oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 2)
    slate_tail(w, model)
    m = s.oracle.admin().latest()
    assert wal_ids(s.wal_store) and not wal_ids(s.store)  # SlateDB's WAL is in the WAL store
    assert max(wal_ids(s.wal_store)) > m.replay_after_wal_id  # the tail is only there
    return model


def test_slatedb_wal_store_read_by_our_reader_and_cli(wal_stores: WalStores) -> None:
    s = wal_stores
    model = slatedb_wrote_a_wal_tail(s)
    for mode in MODES:
        with DbReader.open("db", s.store, options=reader_options(mode, s.wal_url)) as reader:
            check_reads(model, reader.get, scanner(reader), who=f"our DbReader {mode}")
    r = cli_run(s, "scan", "--format", "hex", "--json")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    got = [(bytes.fromhex(x["key"]), bytes.fromhex(x["value"])) for x in json.loads(r.stdout)]
    assert got == model.live()
    key, value = b"t/new", b"tail"  # a row only SlateDB's WAL holds
    r = cli_run(s, "get", "--format", "hex", "0x" + key.hex(), "--json")
    assert r.exit_code == 0 and bytes.fromhex(json.loads(r.stdout)["value"]) == value


def test_slatedb_wal_store_refused_without_wal_url(wal_stores: WalStores) -> None:
    """Without the WAL store: a typed error from every opener, nothing written to either store,
    and SlateDB's live writer is not fenced."""
    s = wal_stores
    model = slatedb_wrote_a_wal_tail(s)
    untouched = (snapshot(s.store), snapshot(s.wal_store))
    with pytest.raises(WalStoreMissing):  # it would miss the tail nothing records
        create_checkpoint("db", s.store)
    r = cli_run(s, "create-checkpoint", wal=False)
    assert r.exit_code == 1 and "WalStoreMissing" in r.stderr, r.stderr
    assert (snapshot(s.store), snapshot(s.wal_store)) == untouched
    # a checkpoint that names SlateDB's WAL tail (ours covers the WAL it lists: with wal_url)
    cid = create_checkpoint("db", s.store, wal_url=s.wal_url).id
    before = (snapshot(s.store), snapshot(s.wal_store))
    for mode in MODES:
        with pytest.raises(WalStoreMissing, match="--wal-url"):
            DbReader.open("db", s.store, options=reader_options(mode, None))
    with pytest.raises(WalStoreMissing, match="--wal-url"):
        DbReader.open("db", s.store, cid, reader_options(ReaderMode.CHECKPOINT, None))
    with DbReader.open("db", s.store, cid, reader_options(ReaderMode.CHECKPOINT, s.wal_url)) as r:
        check_reads(model, r.get, scanner(r), who="our DbReader at the checkpoint, wal_url")
    with pytest.raises(WalStoreMissing):
        Db.open("db", s.store, FAST)
    with pytest.raises(WalStoreMissing):
        run_gc_once("db", s.store, GarbageCollectorOptions(min_age=timedelta(0)))
    for args in (("scan",), ("get", "t/new"), ("gc",)):
        r = cli_run(s, *args, wal=False)
        assert r.exit_code == 1 and "WalStoreMissing" in r.stderr, (args, r.stderr)
        assert "--wal-url" in r.stderr
    # nothing written: no manifest (SlateDB's writer not fenced), no fence, no checkpoint
    assert (snapshot(s.store), snapshot(s.wal_store)) == before
    slate_reader = s.oracle.open_reader()
    check_reads(model, slate_reader.get, slate_reader.scan, who="SlateDB DbReader, WAL store")


def test_our_writer_with_wal_url_read_by_slatedb(wal_stores: WalStores) -> None:
    """Our writer on a SlateDB database with a WAL store: it replays SlateDB's tail from there,
    writes its own WAL there (not in the main store), and SlateDB, with its WAL store, reads every
    write we acknowledged, the ones only in our WAL included."""
    s = wal_stores
    model = slatedb_wrote_a_wal_tail(s)
    main_wal_before = wal_ids(s.store)
    options = DbOptions(
        flush_interval=timedelta(milliseconds=10),
        manifest_poll_interval=timedelta(milliseconds=100),
        wal_url=s.wal_url,
    )
    with Db.open("db", s.store, options) as db:  # fences SlateDB's writer
        check_reads(model, db.get, scanner(db), who="our Db with wal_url")
        for key, value in rows(7, 40, step=2):
            db.put(key, value)
            model.put(key, value)
        db.delete(b"t/new")
        model.delete(b"t/new")
    assert wal_ids(s.store) == main_wal_before == []  # nothing of ours went to the main store
    m = s.oracle.admin().latest()
    assert max(wal_ids(s.wal_store)) > m.replay_after_wal_id  # our writes only in the WAL
    slate_reader = s.oracle.open_reader()
    check_reads(model, slate_reader.get, slate_reader.scan, who="SlateDB DbReader, WAL store")
    w = s.oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db with its WAL store")


def test_our_writer_creates_a_wal_store_database_slatedb_opens(wal_stores: WalStores) -> None:
    """The reverse start: a database our writer creates with ``wal_url``; SlateDB opens it with
    the WAL store and sees every acknowledged write; without ``wal_url`` ours refuses it."""
    s = wal_stores
    model = Model()
    options = DbOptions(flush_interval=timedelta(milliseconds=10), wal_url=s.wal_url)
    with Db.open("db", s.store, options) as db:
        for key, value in rows(1, 100):
            db.put(key, value)
            model.put(key, value)
        db.flush_memtable()
        for key, value in rows(2, 30, step=3):
            db.put(key, value)  # only in our WAL
            model.put(key, value)
    assert not wal_ids(s.store) and wal_ids(s.wal_store)
    w = s.oracle.open_db(s=settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db with its WAL store")
    slate_rounds(w, model, 1, first=5)
    w.put(b"t/slatedb-tail", b"only in its WAL")
    model.put(b"t/slatedb-tail", b"only in its WAL")
    with DbReader.open("db", s.store, options=reader_options(ReaderMode.MANAGED, s.wal_url)) as r:
        check_reads(model, r.get, scanner(r), who="our DbReader after SlateDB")
    for mode in MODES:  # SlateDB's writer holds it: its fence is not in the main store
        with pytest.raises(WalStoreMissing):
            DbReader.open("db", s.store, options=reader_options(mode, None))


def test_our_gc_collects_wal_in_the_wal_store(wal_stores: WalStores) -> None:
    """Our GC with ``wal_url`` deletes WAL SSTs below the replay point from the WAL store (and
    keeps the one at it and all after), and SlateDB then still reads every row."""
    s = wal_stores
    model = Model()
    w = s.oracle.open_db(s=settings(compactor=False))
    slate_rounds(w, model, 3)
    slate_tail(w, model)
    m = s.oracle.admin().latest()
    before = wal_ids(s.wal_store)
    assert min(before) < m.replay_after_wal_id
    stats = run_gc_once(
        "db", s.store, GarbageCollectorOptions(min_age=timedelta(0)), wal_url=s.wal_url
    )
    after = wal_ids(s.wal_store)
    assert stats.wal.deleted == len([i for i in before if i < m.replay_after_wal_id]) > 0
    assert after == [i for i in before if i >= m.replay_after_wal_id]
    r = cli_run(s, "gc", "--min-age", "0s", "--json")
    assert r.exit_code == 0, r.stderr
    check_reads(model, w.get, w.scan, who="SlateDB Db after our GC")
    w.shutdown()
    r2 = s.oracle.open_reader()
    check_reads(model, r2.get, r2.scan, who="SlateDB DbReader after our GC")
