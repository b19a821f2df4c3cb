"""Shared helpers of the garbage-collector tests: databases built from bare manifests, so each test
states exactly which objects exist and which manifest references them."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Generic, TypeVar

from ulid import ULID

from slatedb_core.layout import sst_path
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest, SstView
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultRule, FaultyStore
from slatedb_core.wal.log import WalLog

T = TypeVar("T")

ZERO = GarbageCollectorOptions(min_age=timedelta(0))
HOUR = timedelta(hours=1)


def new_db(store: ObjectStore, path: str = "db", manifest: Manifest | None = None) -> ManifestStore:
    ms = ManifestStore(store, path)
    ms.create_initial(manifest or Manifest())
    return ms


def bump(m: Manifest) -> Manifest:
    return dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1)


def commit(ms: ManifestStore, n: int = 1, change: Callable[[Manifest], Manifest] = bump) -> int:
    """Commit ``n`` updates; returns the latest id."""
    stored = ms.read_latest()
    for _ in range(n):
        stored = ms.update(change, base=stored)
    return stored.id


def add_checkpoint(
    ms: ManifestStore, manifest_id: int | None = None, expire_time_s: int | None = None
) -> tuple[uuid.UUID, StoredManifest]:
    """Pin ``manifest_id`` (default: the manifest that records the checkpoint)."""
    cp_id = uuid.uuid4()

    def change(m: Manifest, next_id: int) -> Manifest:
        cp = Checkpoint(
            cp_id,
            next_id if manifest_id is None else manifest_id,
            int(time.time()),
            expire_time_s,
        )
        return dataclasses.replace(m, checkpoints=(*m.checkpoints, cp))

    return cp_id, ms.update_at(change)


def with_ssts(*ssts: CompactedSst) -> Callable[[Manifest], Manifest]:
    """A change that makes ``ssts`` the database's only SSTs, all in L0."""

    def change(m: Manifest) -> Manifest:
        views = tuple(SstView(s.id, s.id) for s in ssts)
        return dataclasses.replace(m, ssts=ssts, l0=views, compacted=())

    return change


def put_sst(store: ObjectStore, path: str = "db", sst_id: ULID | None = None) -> ULID:
    sst_id = sst_id or ULID()
    store.put(sst_path(path, sst_id), b"sst bytes that GC never reads")
    return sst_id


def put_wal(store: ObjectStore, ids: range, path: str = "db") -> None:
    wal = WalLog(store, path)
    for i in ids:
        store.put(wal.path(i), b"wal")


def names(store: ObjectStore, prefix: str) -> list[str]:
    return [m.path for m in store.list(prefix)]


def manifest_ids(ms: ManifestStore) -> list[int]:
    return [e.id for e in ms.list()]


def wal_ids(store: ObjectStore, path: str = "db") -> list[int]:
    return WalLog(store, path).list_ids()


def recording(store: ObjectStore) -> FaultyStore:
    """A store whose ``events`` list every request in order (a zero-delay latency rule logs each
    call as ("latency", op, path) without changing behaviour)."""
    return FaultyStore(store, rules=[FaultRule(latency_s=1e-9)])


class Background(Generic[T]):
    """Run ``fn`` on a thread and collect its result or exception."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self.result: T | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], T]) -> None:
        try:
            self.result = fn()
        except BaseException as e:
            self.error = e

    def join(self, timeout: float = 30) -> T | None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "background call did not finish"
        return self.result
