"""DbReader.get_many of many keys sorts them once and walks each table once (DbState.get_many):
the same answers as one get per key, from one state, whatever the layout (replayed WAL tables,
L0, sorted runs, tombstones, keys repeated or missing)."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.lsm.dbstate import DbState
from slatedb_core.options import CompactorOptions, DbOptions, DbReaderOptions
from slatedb_core.reader.reader import GET_MANY_BATCH_MIN, DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

WRITER = DbOptions(flush_interval=timedelta(milliseconds=10), compactor=None)
MANUAL = DbReaderOptions(manifest_poll_interval=timedelta(minutes=5), checkpoint_lifetime=None)


def key(i: int) -> bytes:
    return f"k{i:05d}".encode()


def test_get_many_answers_as_get_does_over_every_layout(store: ObjectStore) -> None:
    rng = random.Random(7)
    want: dict[bytes, bytes | None] = {}
    with Db.open("db", store, WRITER) as db:
        # a sorted run (compacted), newer L0 SSTs over it, then WAL-only writes on top
        for layer in range(4):
            batch = WriteBatch()
            for i in rng.sample(range(3000), 900):
                if rng.random() < 0.15:
                    batch.delete(key(i))
                    want[key(i)] = None
                else:
                    v = f"v{layer}-{i}".encode()
                    batch.put(key(i), v)
                    want[key(i)] = v
            db.write(batch)
            if layer < 3:
                db.flush_memtable()
            if layer == 1:
                run_compaction_once("db", store, CompactorOptions(l0_trigger=1))
        with DbReader.open("db", store, options=MANUAL) as reader:
            state = reader._current.state
            assert state.runs and state.l0 and state.imm, "every layer is present"
            asked = [key(i) for i in rng.choices(range(3300), k=2000)]  # repeats, misses
            assert len(asked) >= GET_MANY_BATCH_MIN
            assert reader.get_many(asked) == [reader.get(k) for k in asked]
            assert reader.get_many(asked) == [want.get(k) for k in asked]
            ordered = sorted(set(asked))
            assert reader.get_many(ordered) == [want.get(k) for k in ordered]


def test_a_batched_get_many_paused_by_a_replay_answers_from_the_state_it_began_on(
    store: ObjectStore,
) -> None:
    """The batched path's torn-read check (test_db_reader.py has the per-key one): paused between
    its walk of the replayed WAL tables and its walk of the SSTs while the reader replays a
    batch over every key, it answers all keys from its first state."""
    keys = [key(i) for i in range(GET_MANY_BATCH_MIN * 4)]
    result: list[list[bytes | None]] = []
    paused, resume = threading.Event(), threading.Event()
    walk = DbState.get_immutable_many

    def pausing(self: DbState, ks: list[bytes]) -> list[bytes | None]:
        if threading.current_thread() is worker:
            paused.set()
            assert resume.wait(10)
        return walk(self, ks)

    worker = threading.Thread(target=lambda: result.append(reader.get_many(keys)))
    with Db.open("db", store, WRITER) as db:
        db.write(WriteBatch().put(keys[0], b"sst"))
        db.flush_memtable()
        old = WriteBatch()
        for k in keys[1:]:
            old.put(k, b"1")
        db.write(old)
        with DbReader.open("db", store, options=MANUAL) as reader:
            DbState.get_immutable_many = pausing  # type: ignore[method-assign]
            try:
                worker.start()
                assert paused.wait(10)
                new = WriteBatch()
                for k in keys:
                    new.put(k, b"2")
                db.write(new)
                reader.refresh()
                DbState.get_immutable_many = walk  # type: ignore[method-assign]
                assert reader.get_many(keys) == [b"2"] * len(keys)
            finally:
                DbState.get_immutable_many = walk  # type: ignore[method-assign]
                resume.set()
                worker.join(10)
    assert result == [[b"sst"] + [b"1"] * (len(keys) - 1)]
