"""Racing write paths of one writer keep every acknowledged write, once, in the order each
caller issued them (issue 41/42 adversarial review, item 1: the writer composed of an engine
and an ingest part). Each thread owns its keys and writes them through every path (put, merge,
delete, a batch, put_arrow, bulk_ingest), while another thread flushes memtables and takes
checkpoints; before and after a reopen (WAL replay, L0) every key holds its thread's last
write. Held on the memory, file and S3 stores."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pyarrow as pa
import pytest

from slatedb_core.options import CheckpointScope, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

OPTS = DbOptions(
    flush_interval=timedelta(milliseconds=5),
    manifest_poll_interval=timedelta(milliseconds=50),
    l0_sst_size_bytes=4096,
    l0_max_ssts=10_000,  # no compactor here: a full L0 stalls flushes by design
    merge_operator="string_append",
)
THREADS, STEPS = 3, 60


def _worker(db: Db, t: int, model: dict[bytes, bytes | None], errors: list[BaseException]) -> None:
    rng = random.Random(t)
    try:
        for step in range(STEPS):
            key = b"t%d/%03d" % (t, rng.randrange(12))
            value = b"%d.%d" % (t, step)
            op = rng.randrange(6)
            if op == 0:
                db.put(key, value, await_durable=bool(step % 2))
                model[key] = value
            elif op == 1:
                db.delete(key, await_durable=False)
                model[key] = None
            elif op == 2:
                db.merge(key, value)
                model[key] = (model.get(key) or b"") + value
            elif op == 3:
                b = WriteBatch()
                b.put(key, value)
                b.delete(key + b"x")
                db.write(b)
                model[key], model[key + b"x"] = value, None
            elif op == 4:
                db.put_arrow(pa.table({"key": [key], "value": [value]}), await_durable=False)
                model[key] = value
            else:
                db.bulk_ingest(pa.table({"key": [key, key + b"y"], "value": [value, value]}))
                model[key] = model[key + b"y"] = value
    except BaseException as e:
        errors.append(e)


def _maintain(db: Db, stop: threading.Event, errors: list[BaseException]) -> None:
    try:
        while not stop.is_set():
            db.flush_memtable()
            db.create_checkpoint(CheckpointScope.DURABLE)
    except BaseException as e:
        errors.append(e)


@pytest.mark.parametrize("seed", [0, 1])
def test_racing_write_paths_keep_each_callers_last_write(store: ObjectStore, seed: int) -> None:
    models: list[dict[bytes, bytes | None]] = [{} for _ in range(THREADS)]
    errors: list[BaseException] = []
    stop = threading.Event()
    db = Db.open("db", store, OPTS)
    workers = [
        threading.Thread(target=_worker, args=(db, t + 10 * seed, models[t], errors))
        for t in range(THREADS)
    ]
    keeper = threading.Thread(target=_maintain, args=(db, stop, errors))
    keeper.start()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    keeper.join()
    assert not errors, errors
    want = {k: v for m in models for k, v in m.items()}
    got = db.get_many(sorted(want))
    assert dict(zip(sorted(want), got, strict=True)) == want
    db.close()
    with Db.open("db", store, OPTS) as again:
        assert {k: again.get(k) for k in want} == want
        assert dict(again.scan()) == {k: v for k, v in want.items() if v is not None}
