"""Table.get_many reads every key on one shard map: when a shard turns out to be gone mid-way
(an overwrite swapped it out and the GC deleted it), every key is read again on the new map,
never some keys on the old map and some on the new (docs/overwrite.md, "Readers")."""

from __future__ import annotations

import time
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.gc.service import run_gc_once
from slatedb_core.options import DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table import Table, TableOptions

ZERO = timedelta(0)
OLD = {b"a1": b"old-a1", b"z1": b"old-z1"}
NEW = {b"a1": b"new-a1", b"z1": b"new-z1"}
# a reader's checkpoint keeps the GC off its shard for this long; the GC below runs an hour later,
# as after a reader stalled mid-way past its checkpoint's lifetime
OPTS = TableOptions(
    reader=DbReaderOptions(
        checkpoint_lifetime=timedelta(minutes=5), manifest_poll_interval=timedelta(minutes=2)
    )
)


def test_get_many_does_not_mix_the_shards_of_two_maps(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = Table.create("t", store, [b"m"])
    for shard in t.shards:
        with t.writer(shard.index) as db:
            for k, v in OLD.items():
                if shard.contains(k):
                    db.put(k, v)
            db.flush_memtable()
    t.close()
    calls: list[int] = []
    get_many = DbReader.get_many

    def then_overwrite(self: DbReader, keys: list[bytes]) -> list[bytes | None]:
        out = get_many(self, keys)
        if not calls:  # after the first shard's keys: replace the table and collect the old one
            calls.append(1)
            with Table.open("t", store) as other:
                retired = [s.db_path for s in other.shards]
                other.overwrite(
                    [
                        pa.record_batch(
                            {
                                "key": pa.array(sorted(NEW), pa.binary()),
                                "value": pa.array([NEW[k] for k in sorted(NEW)], pa.binary()),
                            }
                        )
                    ]
                )
            for path in retired:
                stats = run_gc_once(
                    path,
                    store,
                    GarbageCollectorOptions(min_age=ZERO, db_delete_grace=ZERO),
                    now=lambda: time.time() + 3600,
                )
                assert stats.database_deleted, stats
        return out

    with Table.open("t", store, OPTS) as reader:
        monkeypatch.setattr(DbReader, "get_many", then_overwrite)
        got = reader.get_many([b"a1", b"z1"])
    assert calls == [1]
    assert got in ([OLD[b"a1"], OLD[b"z1"]], [NEW[b"a1"], NEW[b"z1"]]), got
