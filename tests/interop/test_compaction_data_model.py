"""Our compactions keep SlateDB's whole data model (issue 38, items 1-3, compaction half).

SlateDB 0.17's own engine (the wheel) writes TTL rows (one expired by the compaction clock),
merge operands (its merge operator through the Python binding) and overwrites and deletes while
it holds a ``DbSnapshot``; our compactor then compacts with the database open. Before the fix
the compactor refused the whole pass (a live snapshot, TTL rows) and the Spark compaction,
which had no guard, emptied the snapshot and dropped every ``expire_ts``. Now both keep what
SlateDB's compactor keeps: the snapshot reads what it read, the expired row is gone, the live
TTL row keeps its ``expire_ts`` in the output SST, operands are folded as SlateDB folds them.
And the reverse: after SlateDB's own compaction of the same kind of history, our reads agree.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from slatedb_core.compactor import run_compaction_once
from slatedb_core.errors import MergeOperatorMissing
from slatedb_core.gc import run_gc_once
from slatedb_core.lsm.merge_operator import string_append
from slatedb_core.lsm.retention import compaction_retention, retain_stream
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_VALUE
from slatedb_core.lsm.versions_merge import merge_versions
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.compaction_history_steps import COMPACT, KEYS, wait_for_tree, write_history
from tests.interop.oracle import DB, Oracle
from tests.interop.oracle_compaction import (
    batch_rows,
    open_merge_db,
    open_merge_reader,
    rows_batch,
    snapshot_get,
    sst_rows,
    tree_rows,
)

pytestmark = pytest.mark.slatedb


def test_our_compaction_keeps_snapshot_ttl_and_operands(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    w = open_merge_db(oracle)
    at_snapshot, snap = write_history(w)
    m = ManifestStore(store, DB).read_latest().manifest
    assert m.recent_snapshot_min_seq < m.last_l0_seq  # the snapshot is live
    before = tree_rows(store)["l0"]
    c_expire = next(r[4] for r in before if r[0] == b"c")
    assert c_expire is not None
    assert [r[2] for r in before if r[0] == b"b"] == [KIND_VALUE]  # flushed before it expired
    read = snapshot_get(oracle, snap)
    seen = {k: read(k) for k in KEYS}
    assert {k: v for k, v in seen.items() if k != b"b"} == {
        k: v for k, v in at_snapshot.items() if k != b"b"
    }
    latest = {b"a": None, b"b": None, b"c": b"c-long", b"d": b"d0", b"k": b"v1", b"m": b"xyz"}
    # SlateDB 0.17 reads an expired row as written until a rewrite expires it
    assert {k: w.get(k) for k in KEYS} == {**latest, b"b": b"b-short"}

    # without the operator: a typed error, nothing committed
    with pytest.raises(MergeOperatorMissing):
        run_compaction_once(DB, store, CompactorOptions(l0_trigger=2, min_merge_width=2))
    assert ManifestStore(store, DB).read_latest().manifest.l0 == m.l0

    stats = run_compaction_once(DB, store, COMPACT)
    assert stats is not None and stats.compactions == 1
    tree = tree_rows(store)
    assert tree["l0"] == [] and len(tree) == 2
    out = tree["run 0"]
    by_key: dict[bytes, list[tuple[int, int, bytes | None, int | None]]] = {}
    for key, seq, kind, value, expire, _create in out:
        by_key.setdefault(key, []).append((seq, kind, value, expire))
    # b expired at the compaction clock: a tombstone at the bottom run, so gone
    assert b"b" not in by_key
    # c keeps its TTL, exactly as written
    assert [(kind, value, expire) for _, kind, value, expire in by_key[b"c"]] == [
        (KIND_VALUE, b"c-long", c_expire)
    ]
    assert all(r[5] is not None for r in out if r[0] == b"c")  # create_ts carried over
    # the snapshot's versions: k's v0 under v1, a's a0 under its tombstone
    assert [v for _, _, v, _ in by_key[b"k"]] == [b"v1", b"v0"]
    assert [v for _, _, v, _ in by_key[b"a"]] == [None, b"a0"]
    # m: the operand above the snapshot stays, the older two are folded (still an operand)
    assert [(kind, value) for _, kind, value, _ in by_key[b"m"]] == [
        (KIND_MERGE, b"z"),
        (KIND_MERGE, b"xy"),
    ]

    # SlateDB reads back once its writer has loaded our manifest (a snapshot reads the
    # writer's current tree up to its seq): the snapshot as before, the Db the latest values
    wait_for_tree(w)
    # (SlateDB's retention expires rows under snapshots too: b reads as gone there as well)
    assert {k: read(k) for k in KEYS} == {**seen, b"b": None}
    assert {k: w.get(k) for k in KEYS} == latest
    r = open_merge_reader(oracle)
    assert {k: r.get(k) for k in KEYS} == latest


def test_slatedb_compaction_writes_what_ours_writes_and_our_reads_agree(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    """The reverse: SlateDB's own compactor compacts the same history (its snapshot still
    held). The run it writes is, row for row (seq, kind, value, expire_ts, create_ts), what our
    retention makes of the L0 rows it compacted with the policy of the manifest it planned on;
    and our reader, with the same operator, reads what SlateDB reads."""
    oracle, store, _ = both_stores
    w = open_merge_db(oracle, compactor=True)
    _, snap = write_history(w)
    for i in range(2):  # SlateDB's scheduler compacts L0 from 4 SSTs on
        w.put(b"e%d" % i, b"e")
        w.flush_memtable()
    oracle.admin().wait_until(lambda lm: bool(lm.compacted) and not lm.l0)
    ms = ManifestStore(store, DB)
    planned = [
        m for m in (ms.read(e.id).manifest for e in ms.list()) if len(m.l0) == 4 and not m.compacted
    ][-1]
    sources = [[rows_batch(sst_rows(store, f"{DB}/compacted/{v.sst_id}.sst"))] for v in planned.l0]
    policy = compaction_retention(planned, drop_tombstones=True, merge_operator=string_append)
    assert policy.retention_min_seq is not None  # the snapshot was live
    ours = [r for b in retain_stream(merge_versions(sources), policy) for r in batch_rows(b)]
    theirs = [r for name, rows in tree_rows(store).items() if name != "l0" for r in rows]
    assert theirs == ours

    wait_for_tree(w)  # the writer reads through its compactor's output
    expect = {k: w.get(k) for k in KEYS}
    assert expect[b"b"] is None and expect[b"m"] == b"xyz"
    assert snapshot_get(oracle, snap)(b"k") == b"v0"
    options = DbReaderOptions(
        manifest_poll_interval=timedelta(milliseconds=100), merge_operator="string_append"
    )
    with DbReader.open(DB, store, options=options) as reader:
        assert {k: reader.get(k) for k in KEYS} == expect


def test_our_gc_after_our_compaction_leaves_a_live_snapshot_its_rows(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    """Item 4: a SlateDB snapshot is an in-memory view that reads the writer's current tree up
    to its seq, so once the writer has loaded our compaction's manifest it reads our output SSTs
    only. Our GC (``min_age`` 0, SlateDB's rule for its writer's uncommitted SSTs applied) then
    deletes the compacted L0 SSTs, and the snapshot, the writer and a new reader still read what
    they read; nothing the tree references is deleted."""
    oracle, store, _ = both_stores
    w = open_merge_db(oracle)
    _, snap = write_history(w)
    read = snapshot_get(oracle, snap)
    l0 = [v.sst_id for v in ManifestStore(store, DB).read_latest().manifest.l0]
    assert run_compaction_once(DB, store, COMPACT) is not None
    wait_for_tree(w)
    seen = {k: read(k) for k in KEYS}
    latest = {k: w.get(k) for k in KEYS}
    stats = run_gc_once(DB, store, GarbageCollectorOptions(min_age=timedelta(0)))
    # the older compacted L0 SST is gone; the newest stays (SlateDB's GC rule while its writer
    # holds the database: nothing from the last compacted L0 on)
    assert stats.compacted.deleted >= 1
    left = {p.path.rsplit("/", 1)[-1] for p in store.list(f"{DB}/compacted")}
    assert f"{l0[-1]}.sst" not in left
    assert {k: read(k) for k in KEYS} == seen and seen[b"k"] == b"v0" and seen[b"m"] == b"xy"
    assert {k: w.get(k) for k in KEYS} == latest
    r = open_merge_reader(oracle)
    assert {k: r.get(k) for k in KEYS} == latest
