"""Our writer's TTLs (issue 38, item 1, write side): ``Db.put(ttl=)``, ``WriteBatch.put(ttl=)``,
``DbOptions.default_ttl`` and ``put_arrow``'s ``ttl_column`` / ``ttl`` write each row's
``expire_ts`` (write time + TTL, SlateDB RFC 0003) and ``create_ts`` into the WAL, keep them in
the memtable, the L0 flush and the WAL replay of a crashed writer, and turn a row expired by the
memtable's last tick into a tombstone at the flush, as SlateDB's memtable flush does. A database
that sets no TTL writes the rows it always wrote (no expire_ts anywhere)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.row_model import KIND_TOMBSTONE, KIND_VALUE, has_timestamps, now_ms
from slatedb_core.options import DbOptions
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from slatedb_core.writer.hooks import WriterHooks
from slatedb_core.writer.ttl import NO_EXPIRY

QUIET = DbOptions(flush_interval=timedelta(hours=1))


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path}/lake")


def wal_rows(store: ObjectStore) -> dict[bytes, tuple[int, bytes | None, int | None, int | None]]:
    """key -> (kind, value, expire_ts, create_ts) of the newest WAL row of each key."""
    wal = WalLog(store, "db")
    out: dict[bytes, tuple[int, bytes | None, int | None, int | None]] = {}
    for wal_id in wal.list_ids():
        rows = wal.decode(wal_id, store.get(wal.path(wal_id)).data, timestamps=True).entries
        for r in rows.to_pylist():
            out[r["key"]] = (r["kind"], r["value"], r["expire_ts"], r["create_ts"])
    return out


def ttl_of(row: tuple[int, bytes | None, int | None, int | None]) -> int | None:
    """The TTL a WAL row was written with: expire_ts - create_ts (None: it never expires)."""
    expire, create = row[2], row[3]
    assert create is not None  # every WAL row has one
    return None if expire is None else expire - create


def l0_rows(store: ObjectStore, db: Db) -> list[dict[str, object]]:
    (view,) = db.manifest.manifest.l0
    path = f"db/compacted/{view.sst_id}.sst"
    reader = SstReader.from_bytes(store.get(path).data, path)
    table = reader.read_all(timestamps=True)
    rows: list[dict[str, object]] = table.to_pylist()
    return rows


def test_put_ttl_writes_expire_and_create_ts(store: ObjectStore) -> None:
    before = now_ms()
    with Db.open("db", store, QUIET) as db:
        db.put(b"t", b"1", ttl=60_000)
        db.put(b"td", b"2", ttl=timedelta(minutes=2))
        db.put(b"n", b"3", ttl=NO_EXPIRY)
        db.put(b"p", b"4")
        db.write(WriteBatch().put(b"b", b"5", ttl=1000).put(b"bp", b"6").delete(b"p"))
    after = now_ms()
    rows = wal_rows(store)
    kind, value, expire, create = rows[b"t"]
    assert (kind, value) == (KIND_VALUE, b"1")
    assert create is not None and expire == create + 60_000
    assert before <= create <= after
    assert ttl_of(rows[b"td"]) == 120_000
    assert ttl_of(rows[b"b"]) == 1000
    for key in (b"n", b"bp", b"p"):
        assert rows[key][2] is None, key  # no TTL: no expire_ts
    assert rows[b"p"][0] == KIND_TOMBSTONE


def test_default_ttl_applies_to_puts_without_one(store: ObjectStore) -> None:
    options = DbOptions(flush_interval=timedelta(hours=1), default_ttl=5000)
    with Db.open("db", store, options) as db:
        db.put(b"d", b"1")
        db.put(b"n", b"2", ttl=NO_EXPIRY)
        db.put(b"o", b"3", ttl=10)
        db.write(WriteBatch().put(b"b", b"4"))
        db.put_arrow(pa.table({"key": [b"a1", b"a2"], "value": [b"x", None]}))
        db.delete(b"gone")
    rows = wal_rows(store)
    for key in (b"d", b"b", b"a1"):
        assert ttl_of(rows[key]) == 5000, key
    assert ttl_of(rows[b"o"]) == 10
    assert rows[b"n"][2] is None
    assert rows[b"a2"][0] == KIND_TOMBSTONE and rows[b"a2"][2] is None  # deletes never expire
    assert rows[b"gone"][2] is None


def test_put_arrow_ttl_column(store: ObjectStore) -> None:
    data = pa.table(
        {
            "key": [b"k1", b"k2", b"k3", b"k4"],
            "value": [b"v1", b"v2", None, b"v4"],
            "ttl_ms": pa.array([100, None, 5, 0], pa.int32()),
        }
    )
    with Db.open("db", store, QUIET) as db:
        assert db.put_arrow(data, ttl_column="ttl_ms", ttl=7000) == 4
        assert db.get(b"k1") == b"v1"
        db.put_arrow(pa.table({"key": [b"f"], "value": [b"F"]}), ttl=42)
    rows = wal_rows(store)
    assert ttl_of(rows[b"k1"]) == 100
    assert ttl_of(rows[b"k2"]) == 7000  # null: the call's ttl  # type: ignore[operator]
    assert rows[b"k3"][0] == KIND_TOMBSTONE and rows[b"k3"][2] is None
    assert ttl_of(rows[b"k4"]) == 0
    assert ttl_of(rows[b"f"]) == 42


@pytest.mark.parametrize(
    ("column", "why"),
    [
        (pa.array([b"1", b"2"], pa.binary()), "must hold integers"),
        (pa.array([1, -1], pa.int64()), "must be in 0.."),
        (pa.array([1.5, 2.0], pa.float64()), "must hold integers"),
    ],
)
def test_a_bad_ttl_column_is_refused_before_anything_is_written(
    store: ObjectStore, column: pa.Array, why: str
) -> None:
    data = pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"], "t": column})
    with Db.open("db", store, QUIET) as db:
        with pytest.raises(InvalidArgument, match=why):
            db.put_arrow(data, ttl_column="t")
        with pytest.raises(InvalidArgument, match="no column"):
            db.put_arrow(data, ttl_column="nope")
        assert db.get(b"a") is None
    assert wal_rows(store) == {}


@pytest.mark.parametrize("ttl", [-1, True, "10", 1.5, timedelta(seconds=-1), 2**63])
def test_a_bad_ttl_is_refused(store: ObjectStore, ttl: object) -> None:
    with Db.open("db", store, QUIET) as db:
        with pytest.raises(InvalidArgument):
            db.put(b"a", b"1", ttl=ttl)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            WriteBatch().put(b"a", b"1", ttl=ttl)  # type: ignore[arg-type]
        assert db.get(b"a") is None
    with pytest.raises(InvalidArgument):
        DbOptions(default_ttl=-5)


def test_the_l0_flush_keeps_ttls_and_tombstones_what_expired(store: ObjectStore) -> None:
    """SlateDB's memtable flush runs its retention at the memtable's last tick: a value expired
    by then is a tombstone (expire_ts cleared, create_ts kept); the others keep their expiry."""
    with Db.open("db", store, QUIET) as db:
        db.put(b"short", b"1", ttl=0)  # expired at its own write
        db.put(b"long", b"2", ttl=3_600_000)
        db.put(b"plain", b"3")
        db.flush_memtable()
        rows = {r["key"]: r for r in l0_rows(store, db)}
    assert rows[b"long"]["kind"] == KIND_VALUE
    long_expire, long_create = rows[b"long"]["expire_ts"], rows[b"long"]["create_ts"]
    assert isinstance(long_expire, int) and isinstance(long_create, int)
    assert long_expire - long_create == 3_600_000
    assert rows[b"short"]["kind"] == KIND_TOMBSTONE and rows[b"short"]["expire_ts"] is None
    assert rows[b"short"]["create_ts"] is not None
    assert rows[b"plain"]["kind"] == KIND_VALUE and rows[b"plain"]["expire_ts"] is None


def test_a_database_without_ttls_flushes_the_rows_it_always_did(store: ObjectStore) -> None:
    hooks = WriterHooks()  # its steps show the writer's state
    with Db.open("db", store, QUIET, hooks=hooks) as db:
        db.put(b"a", b"1")
        db.write(WriteBatch().put(b"b", b"2").delete(b"a"))
        db.put_arrow(pa.table({"key": [b"c"], "value": [b"3"]}))
        assert hooks.steps is not None
        memtable = hooks.steps.state().memtable
        assert all(len(e) == 2 for e in map(memtable.get, [b"a", b"b", b"c"]))  # type: ignore[arg-type]
        db.flush_memtable()
        (view,) = db.manifest.manifest.l0
        path = f"db/compacted/{view.sst_id}.sst"
        table = SstReader.from_bytes(store.get(path).data, path).read_all()
    assert not has_timestamps(table)


def test_ttls_survive_a_crash_and_the_replay(store: ObjectStore) -> None:
    """A writer's WAL replay kept no TTL (it refused to open over one): the replayed memtable
    now holds the rows with their expire_ts, and its flush writes them."""
    db = Db.open("db", store, QUIET)
    db.put(b"t", b"1", ttl=3_600_000)
    db.put_arrow(pa.table({"key": [b"a"], "value": [b"2"]}), ttl=3_600_000)
    db.put(b"p", b"3")
    db.flush()
    expected = wal_rows(store)
    db._simulate_crash()
    hooks = WriterHooks()  # its steps show the writer's state
    with Db.open("db", store, QUIET, hooks=hooks) as again:
        assert again.get(b"t") == b"1"
        assert hooks.steps is not None
        entry = hooks.steps.state().memtable.get(b"t")
        assert entry is not None and entry[3] == expected[b"t"][2]  # type: ignore[misc]
        again.flush_memtable()
        rows = {r["key"]: r for r in l0_rows(store, again)}
    for key in (b"t", b"a"):
        assert rows[key]["expire_ts"] == expected[key][2], key
        assert rows[key]["create_ts"] == expected[key][3], key
    assert rows[b"p"]["expire_ts"] is None
