"""A writer's WAL replay at open (``recovery.replay_wal``) over SlateDB 0.17's WAL objects: fences
(zero-byte objects) hold no rows, and rows at or below the manifest's ``last_l0_seq`` are in its
SSTs already, so they are skipped, as SlateDB 0.17's replay skips them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.lsm.memtable import Memtable
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions
from slatedb_core.sst import KIND_MERGE, SstOptions, encode_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.wal import WalLog
from slatedb_core.wal.log import FENCE, encode_wal_sst, in_seq_order
from slatedb_core.writer.db import Db
from slatedb_core.writer.recovery import replay_wal


def put_rows(store: ObjectStore, wal: WalLog, wal_id: int, rows: list[tuple[bytes, int]]) -> None:
    keys = [k for k, _ in rows]
    seqs = [s for _, s in rows]
    batch = batch_from_lists(keys, seqs, [0] * len(rows), [b"v%d" % s for s in seqs])
    store.put_if_absent(wal.path(wal_id), encode_wal_sst(batch, SstOptions()))


def test_replay_skips_fences_and_rows_the_manifests_ssts_hold() -> None:
    store = open_store("memory://")
    wal = WalLog(store, "db")
    store.put_if_absent(wal.path(1), FENCE)
    # SST 2: a memtable flushed after id 1 took k1 (seq 4) and k2 (seq 5) to L0 already
    put_rows(store, wal, 2, [(b"k1", 4), (b"k2", 5), (b"k3", 6)])
    store.put_if_absent(wal.path(3), FENCE)  # an opener that wrote nothing
    put_rows(store, wal, 4, [(b"k4", 7)])
    m = Manifest(replay_after_wal_id=1, next_wal_sst_id=2, last_l0_seq=5)
    replayed = replay_wal("db", wal, m, fence_id=5)
    memtable = replayed.memtable
    assert replayed.in_l0_upto == 1  # SST 2 holds rows above last_l0_seq: no move
    assert memtable.get(b"k1") is None and memtable.get(b"k2") is None
    assert memtable.get(b"k3") == (6, b"v6") and memtable.get(b"k4") == (7, b"v7")
    assert memtable.max_seq == 7


def test_replay_of_a_wal_holding_only_fences_is_empty() -> None:
    store = open_store("memory://")
    wal = WalLog(store, "db")
    for wal_id in (1, 2, 3):
        store.put_if_absent(wal.path(wal_id), FENCE)
    replayed = replay_wal("db", wal, Manifest(next_wal_sst_id=1), fence_id=4)
    assert replayed.memtable.is_empty() and replayed.memtable.max_seq is None
    assert replayed.in_l0_upto == 0  # fences alone never move the replay point


def test_wal_rows_are_put_in_seq_order_so_a_repeated_key_replays_to_its_newest() -> None:
    """SlateDB 0.17's WAL SSTs may hold a key several times, in seq order; rows read in another
    order (key order, say) are put back in seq order, and a memtable fed them keeps the newest."""
    rows = pa.Table.from_batches(
        [
            batch_from_lists(
                [b"a", b"a", b"b", b"k", b"k"],
                [9, 2, 5, 7, 3],
                [0, 0, 1, 0, 0],
                [b"a9", b"a2", b"", b"k7", b"k3"],
            )
        ]
    )
    ordered = in_seq_order(rows)
    assert ordered.column("seq").to_pylist() == [2, 3, 5, 7, 9]
    memtable = Memtable()
    for batch in ordered.to_batches():
        memtable.put_batch(batch)
    assert memtable.get(b"a") == (9, b"a9") and memtable.get(b"k") == (7, b"k7")
    assert memtable.get(b"b") == (5, None)
    in_order = ordered.slice(1)
    assert in_seq_order(in_order) is in_order  # already in seq order: no copy


def _wal_sst(kinds: list[int], expire_ts: list[int | None]) -> bytes:
    n = len(kinds)
    table = pa.table(
        {
            "key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            "seq": pa.array(range(1, n + 1), pa.uint64()),
            "kind": pa.array(kinds, pa.uint8()),
            "value": pa.array([b"" if k == 1 else b"v%d" % i for i, k in enumerate(kinds)]),
            "expire_ts": pa.array(expire_ts, pa.int64()),
        }
    )
    return encode_sst(table, SstOptions(), wal=True)[0]


def test_a_wal_row_past_its_expire_ts_reads_as_written() -> None:
    """SlateDB 0.17 applies a TTL when it rewrites rows, not when it replays the WAL: a row that
    expired in the WAL still reads as its value (tests/interop/test_slatedb_writes.py checks it
    against the wheel)."""
    wal = WalLog(open_store("memory://"), "db")
    rows = wal.decode(1, _wal_sst([0, 0, 1], [1, None, None])).entries  # k0 expired in 1970
    assert rows.column("kind").to_pylist() == [0, 0, 1]
    assert rows.column("value").to_pylist()[:2] == [b"v0", b"v1"]


def test_a_wal_sst_with_merge_operands_keeps_them() -> None:
    """Issue 38, item 3: a WAL SST holding merge operands decodes them as rows of their kind
    (reads fold them, SlateDB RFC 0006); it was refused whole, which made ``DbReader.open`` of
    the database fail."""
    wal = WalLog(open_store("memory://"), "db")
    rows = wal.decode(1, _wal_sst([0, KIND_MERGE], [None, None])).entries
    assert rows.column("kind").to_pylist() == [0, KIND_MERGE]


def test_wal_ssts_whose_rows_are_all_in_l0_are_passed_by_the_next_flush(tmp_path: Path) -> None:
    """A WAL tail whose rows are all at or below last_l0_seq (SlateDB 0.17 moves the replay point
    only to the last WAL SST a flush covers whole) replays nothing; the writer's next flush must
    still move the replay point past it, or a union of the database refuses it as unflushed."""
    store = open_store(f"file://{tmp_path}/lake")
    quiet = DbOptions(flush_interval=timedelta(hours=1))
    with Db.open("db", store, quiet) as db:
        db.put(b"a", b"1")  # WAL 2
        db.put(b"b", b"2")  # WAL 3
        db.flush_memtable()
    ms = ManifestStore(store, "db")
    m = ms.read_latest().manifest
    assert (m.replay_after_wal_id, m.last_l0_seq) == (3, 2)
    ms.update(lambda m: dataclasses.replace(m, replay_after_wal_id=1), force=True)
    with Db.open("db", store, quiet) as db:
        assert db.get(b"a") == b"1" and db.get(b"b") == b"2"
        db.flush_memtable()  # nothing to flush, but WAL 2 and 3 are in L0 already
        m = db.manifest.manifest
        assert m.replay_after_wal_id == 4 and m.next_wal_sst_id <= 5  # past our fence (4)
        assert len(m.l0) == 1
