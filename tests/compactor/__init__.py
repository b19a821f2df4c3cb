"""Shared helpers: write L0s through the real writer while keeping a dict model of the database."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa

from slatedb_core.layout import sst_path
from slatedb_core.manifest.model import Manifest, SortedRun
from slatedb_core.options import DbOptions
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.db import Db

FAST = DbOptions(
    flush_interval=timedelta(milliseconds=10),
    manifest_poll_interval=timedelta(milliseconds=50),
    l0_max_ssts=64,
)


def key(i: int) -> bytes:
    return f"key{i:05d}".encode()


def write_l0s(
    db: Db,
    model: dict[bytes, bytes],
    rng: random.Random,
    *,
    flushes: int,
    ops: int,
    key_space: int = 400,
    delete_p: float = 0.2,
    tag: str = "",
) -> None:
    """``flushes`` L0 SSTs of ``ops`` random puts/deletes each, mirrored into ``model``."""
    for f in range(flushes):
        for i in range(ops):
            k = key(rng.randrange(key_space))
            if rng.random() < delete_p:
                db.delete(k, await_durable=False)
                model.pop(k, None)
            else:
                v = f"{tag}{f}-{i}-{rng.random()}".encode()
                db.put(k, v, await_durable=False)
                model[k] = v
        db.flush_memtable()


def read_back(store: ObjectStore, path: str = "db") -> tuple[dict[bytes, bytes], Manifest]:
    """Everything a fresh writer sees, and the manifest it opened on."""
    with Db.open(path, store, FAST) as db:
        return dict(db.scan()), db.manifest.manifest


def run_entries(store: ObjectStore, m: Manifest, run: SortedRun, path: str = "db") -> pa.Table:
    """Every entry physically stored in ``run``'s SSTs, in key order."""
    ssts = {s.id: s for s in m.ssts}
    tables = [
        SstReader.open(store, sst_path(path, v.sst_id), ssts[v.sst_id].info).read_all()
        for v in run.views
    ]
    return pa.concat_tables(tables)


def tombstones(table: pa.Table) -> int:
    return int(sum(1 for k in table.column("kind").to_pylist() if k == 1))


def seed_l0s(store: ObjectStore, flushes: int = 3, path: str = "db") -> dict[bytes, bytes]:
    """A database with ``flushes`` L0 SSTs of random data; returns its dict model."""
    model: dict[bytes, bytes] = {}
    with Db.open(path, store, FAST) as db:
        write_l0s(db, model, random.Random(1), flushes=flushes, ops=80)
    return model
