"""Compaction results, checked through the real writer against a dict model on every store."""

from __future__ import annotations

import dataclasses
import itertools
import random

from slatedb_core.compactor import run_compaction_once
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import SortedRun
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

from . import FAST, key, read_back, run_entries, tombstones, write_l0s

L0_ONLY = CompactorOptions(l0_trigger=2, min_merge_width=100, max_sorted_runs=100)


def test_l0_compaction_preserves_every_latest_value_and_delete(store: ObjectStore) -> None:
    rng = random.Random(7)
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, FAST) as db:
        write_l0s(db, model, rng, flushes=5, ops=150)
        entries_in = sum(s.info.entry_count for s in db.manifest.manifest.ssts)
    stats = run_compaction_once("db", store, L0_ONLY)
    assert stats is not None and stats.compactions == 1 and stats.input_ssts == 5
    assert stats.rows_in == entries_in
    got, m = read_back(store)
    assert got == model
    assert m.l0 == () and len(m.compacted) == 1
    assert stats.rows_out == len(model)  # bottom run: one live entry per key, no tombstones
    assert {s.id for s in m.ssts} == {v.sst_id for v in m.compacted[0].views}
    with Db.open("db", store, FAST) as db:
        for i in range(0, 400, 7):
            assert db.get(key(i)) == model.get(key(i))


def test_tombstones_stay_above_older_runs_and_vanish_at_the_bottom(store: ObjectStore) -> None:
    rng = random.Random(11)
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, FAST) as db:
        write_l0s(db, model, rng, flushes=2, ops=120, delete_p=0.0)
        assert run_compaction_once("db", store, L0_ONLY) is not None
        write_l0s(db, model, rng, flushes=2, ops=120, delete_p=0.5)
    assert run_compaction_once("db", store, L0_ONLY) is not None
    got, m = read_back(store)
    assert got == model and [r.id for r in m.compacted] == [1, 0]
    upper = run_entries(store, m, m.compacted[0])
    assert tombstones(upper) > 0  # they still hide values in run 0
    assert tombstones(run_entries(store, m, m.compacted[1])) == 0

    merge_all = CompactorOptions(l0_trigger=100, min_merge_width=2, size_ratio=1000.0)
    stats = run_compaction_once("db", store, merge_all)
    assert stats is not None and stats.compactions == 1
    got, m = read_back(store)
    assert got == model and len(m.compacted) == 1 and m.compacted[0].id == 2
    bottom = run_entries(store, m, m.compacted[0])
    assert tombstones(bottom) == 0 and bottom.num_rows == len(model)


def test_similar_sorted_runs_merge_into_one_and_keep_the_newest_values(
    store: ObjectStore,
) -> None:
    rng = random.Random(3)
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, FAST) as db:
        for r in range(4):
            write_l0s(db, model, rng, flushes=2, ops=100, tag=f"r{r}-")
            assert run_compaction_once("db", store, L0_ONLY) is not None
    _, m = read_back(store)
    assert [r.id for r in m.compacted] == [3, 2, 1, 0]
    tiers = CompactorOptions(l0_trigger=100, min_merge_width=4, size_ratio=4.0)
    stats = run_compaction_once("db", store, tiers)
    assert stats is not None and stats.compactions == 1
    got, m = read_back(store)
    assert got == model
    assert [r.id for r in m.compacted] == [4]
    assert {s.id for s in m.ssts} == {v.sst_id for v in m.compacted[0].views}


def test_output_is_split_into_ssts_of_about_max_sst_size(store: ObjectStore) -> None:
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    with Db.open("db", store, FAST) as db:
        write_l0s(db, model, rng, flushes=3, ops=300, key_space=2000, delete_p=0.0)
    target = 4096
    stats = run_compaction_once(
        "db", store, dataclasses.replace(L0_ONLY, max_sst_size_bytes=target)
    )
    assert stats is not None
    got, m = read_back(store)
    assert got == model
    views = m.compacted[0].views
    assert len(views) == stats.output_ssts >= 5
    infos = [s.info for v in views for s in m.ssts if s.id == v.sst_id]
    for a, b in itertools.pairwise(infos):
        assert a.last_key is not None and b.first_key is not None and a.last_key < b.first_key
    raw = []
    for v in views:
        t = run_entries(store, m, SortedRun(0, (v,)))
        ks, vs = t.column("key").to_pylist(), t.column("value").to_pylist()
        raw.append(sum(len(k) + len(x) + 17 for k, x in zip(ks, vs, strict=True)))
    row_max = max(len(k) + len(v) + 17 for k, v in got.items())
    assert all(target <= r < target + row_max for r in raw[:-1]) and raw[-1] <= target + row_max


def test_compaction_keeps_only_what_a_views_visible_range_shows(store: ObjectStore) -> None:
    with Db.open("db", store, FAST) as db:
        for i in range(100):
            db.put(key(i), b"old", await_durable=False)
        db.flush_memtable()
        for i in range(0, 100, 2):
            db.put(key(i), b"new", await_durable=False)
        db.flush_memtable()
    # narrow the older view to [key00020, key00060), as a projection would
    visible = KeyRange(key(20), key(60)).to_bytes_range()
    ms = ManifestStore(store, "db")
    ms.update(
        lambda m: dataclasses.replace(
            m, l0=(m.l0[0], dataclasses.replace(m.l0[1], visible_range=visible))
        )
    )
    before, _ = read_back(store)
    assert run_compaction_once("db", store, L0_ONLY) is not None
    after, m = read_back(store)
    assert after == before
    assert after[key(21)] == b"old" and key(1) not in after and after[key(2)] == b"new"
    assert run_entries(store, m, m.compacted[0]).num_rows == len(before)


def test_nothing_to_do_returns_none_and_takes_no_epoch(store: ObjectStore) -> None:
    with Db.open("db", store, FAST) as db:
        db.put(b"k", b"v")
        db.flush_memtable()
    latest = ManifestStore(store, "db").read_latest()
    assert run_compaction_once("db", store, CompactorOptions(l0_trigger=2)) is None
    after = ManifestStore(store, "db").read_latest()
    assert after.id == latest.id and after.manifest.compactor_epoch == 0
