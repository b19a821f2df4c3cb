"""Table snapshots of shards whose WAL is in a separate object store (SlateDB RFC 0009), on the
local filesystem and on the S3 server (issue 38, item 4: "DbOptions/CLI/Spark/Dagster accept a
WAL store URL"; the gap left after it landed: ``take_snapshot`` called ``create_checkpoint``
without the WAL store, so such a table's snapshot raised ``WalStoreMissing`` instead of taking
its checkpoints).

The table's options say where its shards' WAL is (``TableOptions.writer.wal_url`` /
``reader.wal_url``); the snapshot's checkpoints name the WAL SSTs found there, and a view of the
snapshot reads the rows still only in those WAL SSTs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.errors import WalStoreMissing
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.table import Table, TableOptions
from tests.interop.oracle import settings
from tests.interop.oracle_wal import WalStores, wal_stores

__all__ = ["wal_stores"]  # the fixture, used by name


def table_options(wal_url: str | None) -> TableOptions:
    return TableOptions(
        writer=DbOptions(flush_interval=timedelta(milliseconds=5), wal_url=wal_url),
        reader=DbReaderOptions(
            manifest_poll_interval=timedelta(hours=1), checkpoint_lifetime=None, wal_url=wal_url
        ),
    )


def test_a_snapshot_of_a_table_with_a_wal_store(wal_stores: WalStores) -> None:
    s = wal_stores
    opts = table_options(s.wal_url)
    with Table.create("t", s.store, [b"m"], opts) as t:
        with t.writer(0) as a, t.writer(1) as b:
            a.put(b"a", b"1")  # durable in the WAL store only, never flushed to L0
            b.put(b"x", b"2")
            assert all("/wal/" not in m.path for m in s.store.list("t"))
            assert any("/wal/" in m.path for m in s.wal_store.list("t"))
            snap = t.snapshot()
            a.put(b"a", b"after")
        with Table.open("t", s.store, opts, snapshot=snap) as view:
            assert list(view.scan()) == [(b"a", b"1"), (b"x", b"2")]
        t.release_snapshot(snap)
        # named snapshots take theirs the same way
        named = t.snapshot(name="daily")
        with Table.open("t", s.store, opts, snapshot=named) as view:
            assert view.get(b"a") == b"after"


def test_a_snapshot_of_a_shard_slatedb_writes_with_its_wal_store(wal_stores: WalStores) -> None:
    """SlateDB's writer on a shard, its WAL in the WAL store (a tail only there): the table
    opened without the WAL store refuses the snapshot with a typed error and leaves no
    checkpoint; opened with it, the snapshot holds SlateDB's tail."""
    s = wal_stores
    with Table.create("t", s.store, [], table_options(s.wal_url)) as t:
        shard_db = t.shards[0].db_path
    w = s.oracle.open_db(shard_db, settings(compactor=False))
    w.put(b"a", b"flushed")
    w.flush_memtable()
    w.put(b"a", b"tail")  # durable only in SlateDB's WAL, in the WAL store
    w.put(b"b", b"tail")
    with Table.open("t", s.store, table_options(None)) as blind:
        with pytest.raises(WalStoreMissing):
            blind.snapshot()
        assert list_checkpoints(shard_db, s.store) == []
    with Table.open("t", s.store, table_options(s.wal_url)) as t:
        snap = t.snapshot()
        with Table.open("t", s.store, table_options(s.wal_url), snapshot=snap) as view:
            assert list(view.scan()) == [(b"a", b"tail"), (b"b", b"tail")]


def test_a_split_retires_a_shard_whose_wal_is_in_the_wal_store(wal_stores: WalStores) -> None:
    """Rescaling retires the source shard with a soft destroy: its fence goes to the WAL store,
    not the main store (the GC deletes the shard once its children no longer reference it)."""
    s = wal_stores
    opts = table_options(s.wal_url)
    with Table.create("t", s.store, [], opts) as t:
        source = t.shards[0].db_path
        with t.writer(0) as db:
            for i in range(20):
                db.put(b"k%02d" % i, b"v")
        t.split(0, b"k10")
        assert dict(t.scan()) == {b"k%02d" % i: b"v" for i in range(20)}
    assert not [m.path for m in s.store.list("t") if "/wal/" in m.path]
    assert ManifestStore(s.store, source).read_latest().manifest.destroyed_at_s is not None


def test_a_merge_of_shards_whose_wal_is_in_the_wal_store(wal_stores: WalStores) -> None:
    """A split then a merge (a union) of a table's shards with a WAL store: the merged shard's
    writer opens with the table's WAL store and keeps every row written before and after."""
    s = wal_stores
    opts = table_options(s.wal_url)
    with Table.create("t", s.store, [], opts) as t:
        with t.writer(0) as db:
            for i in range(20):
                db.put(b"k%02d" % i, b"v")
        t.split(0, b"k10")
        with t.writer(1) as db:
            db.put(b"k15", b"after the split")  # only in the WAL store until the close
        t.merge(0)
        with t.writer(0) as db:
            db.put(b"k16", b"after the merge")
        want = {b"k%02d" % i: b"v" for i in range(20)}
        want[b"k15"], want[b"k16"] = b"after the split", b"after the merge"
        assert dict(t.scan()) == want
