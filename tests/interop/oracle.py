"""The slatedb 0.17 wheel (``slatedb.uniffi``, SlateDB's own Rust engine) driven synchronously, for
the cross-engine tests of docs/format.md's "what each engine ignores of the other's".

The binding is async; :class:`Oracle` owns one event loop per test and runs every call to the
wheel to completion on it (:meth:`Oracle.run`). Every handle talks to the local filesystem through
the wheel's own ``LOCAL`` object store rooted at the test's directory, the same directory our side
opens with ``open_store(root)``; the database path is ``db`` unless a test says otherwise.

Settings shorten SlateDB's timers (flush, manifest poll, compactor polls) so a test waits
milliseconds, not seconds; ``compactor=False`` turns its in-process compactor off (when our
compactor owns the database).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

T = TypeVar("T")

DB = "db"

FULL_RANGE = sdb.KeyRange(start=None, start_inclusive=True, end=None, end_inclusive=False)


def settings(*, compactor: bool = True, gc: bool = False, **extra: Any) -> sdb.Settings:
    """SlateDB's defaults with test-speed timers. ``gc=False`` turns off its in-process GC (our
    GC is the one under test where a test runs one); ``extra`` sets dotted keys to JSON values."""
    s = sdb.Settings.default()
    s.set("flush_interval", json.dumps("10ms"))
    s.set("manifest_poll_interval", json.dumps("100ms"))
    if compactor:
        s.set("compactor_options.poll_interval", json.dumps("100ms"))
        s.set("compactor_options.worker.compactions_poll_interval", json.dumps("100ms"))
        s.set("compactor_options.commit_compacted_interval", json.dumps("100ms"))
    else:
        s.set("compactor_options", "null")
    if not gc:
        s.set("garbage_collector_options", "null")
    for key, value in extra.items():
        s.set(key.replace("__", "."), json.dumps(value))
    return s


SHUTDOWN_TIMEOUT_S = 60.0
"""How long closing one SlateDB handle may take in a test's teardown."""


S3Config = dict[str, str]
"""The wheel's S3 object-store settings (``ObjectStoreBuilder.with_config`` keys)."""


def s3_config(endpoint: str, bucket: str) -> S3Config:
    """Settings for the wheel's S3 store on the test S3 server (moto on 127.0.0.1) at
    ``endpoint``, bucket ``bucket``, with the same test credentials as ``MotoS3.url``."""
    return {
        "bucket_name": bucket,
        "endpoint": endpoint,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "allow_http": "true",
        "conditional_put": "etag",
    }


class Oracle:
    """The wheel on the local directory ``root``, or on an S3 bucket (``s3``, see
    :func:`s3_config`): one event loop, closed by :meth:`close`."""

    def __init__(self, root: Path, s3: S3Config | None = None) -> None:
        self.root = root
        self.s3 = s3
        self.loop = asyncio.new_event_loop()
        self._open: list[Callable[[], Coroutine[Any, Any, None]]] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def store(self) -> sdb.ObjectStore:
        if self.s3 is not None:
            builder = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.S3)
            for key, value in self.s3.items():
                builder.with_config(key, value)
            return builder.build()
        builder = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.LOCAL)
        builder.with_config("local_path", str(self.root))
        return builder.build()

    # ---- handles ---------------------------------------------------------------------------
    def open_db(self, path: str = DB, s: sdb.Settings | None = None) -> SlateWriter:
        builder = sdb.DbBuilder(path, self.store())
        builder.with_settings(s if s is not None else settings())
        writer = SlateWriter(self, self.run(builder.build()))
        self._open.append(writer.db.shutdown)
        return writer

    def open_reader(
        self, path: str = DB, checkpoint: uuid.UUID | None = None, *, follow: bool = False
    ) -> SlateReader:
        """SlateDB's DbReader: pinned to ``checkpoint``, else following the latest manifest
        (``follow``, no checkpoint of its own) or with its managed checkpoint (the default)."""
        builder = sdb.DbReaderBuilder(path, self.store())
        if checkpoint is not None:
            builder.with_reader_mode(sdb.ReaderMode.CHECKPOINT(str(checkpoint)))
        elif follow:
            builder.with_reader_mode(sdb.ReaderMode.FOLLOW_LATEST())
        reader = SlateReader(self, self.run(builder.build()))
        self._open.append(reader.reader.shutdown)
        return reader

    def admin(self, path: str = DB) -> SlateAdmin:
        return SlateAdmin(self, sdb.AdminBuilder(path, self.store()).build())

    def close(self) -> None:
        """Shut down whatever a test left open (errors of fenced or closed handles ignored)."""
        for shutdown in reversed(self._open):
            try:
                # bounded: a CI run saw a SlateDB handle's shutdown hang after its test had timed
                # out, and the unbounded teardown held the whole run until CI's limit
                self.run(asyncio.wait_for(shutdown(), SHUTDOWN_TIMEOUT_S))
            except (sdb.Error, TimeoutError):
                pass
        self._open.clear()
        self.loop.close()


async def _drain(it: sdb.DbIterator) -> list[tuple[bytes, bytes]]:
    rows: list[tuple[bytes, bytes]] = []
    while True:
        batch = await it.next_batch(1024)
        if not batch:
            return rows
        rows.extend((kv.key, kv.value) for kv in batch)


class SlateWriter:
    """SlateDB's ``Db``. A write is acknowledged once durable (its WriteHandle's
    ``await_durable``: the WAL SST holding it is written) unless ``durable=False``."""

    def __init__(self, oracle: Oracle, db: sdb.Db) -> None:
        self.oracle = oracle
        self.db = db

    def _durable(self, write: Coroutine[Any, Any, sdb.WriteHandle], durable: bool) -> None:
        async def run() -> None:
            handle = await write
            if durable:
                await handle.await_durable()

        self.oracle.run(run())

    def put(self, key: bytes, value: bytes, *, durable: bool = True) -> None:
        self._durable(self.db.put(key, value), durable)

    def put_ttl(self, key: bytes, value: bytes, ttl_ms: int, *, durable: bool = True) -> None:
        """A put that expires ``ttl_ms`` after SlateDB's clock at the write (the row stores its
        expire_ts)."""
        options = sdb.PutOptions(ttl=sdb.Ttl.EXPIRE_AFTER_MILLIS(ttl_ms))
        self._durable(self.db.put_with_options(key, value, options, sdb.WriteOptions()), durable)

    def delete(self, key: bytes, *, durable: bool = True) -> None:
        self._durable(self.db.delete(key), durable)

    def write(self, ops: Iterable[tuple[bytes, bytes | None]], *, durable: bool = True) -> None:
        """One WriteBatch; a None value is a delete."""
        batch = sdb.WriteBatch()
        for key, value in ops:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._durable(self.db.write(batch), durable)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.oracle.run(self.db.get(key))
        return value

    def scan(self) -> list[tuple[bytes, bytes]]:
        async def scan() -> list[tuple[bytes, bytes]]:
            return await _drain(await self.db.scan(FULL_RANGE))

        return self.oracle.run(scan())

    def snapshot(self) -> sdb.DbSnapshot:
        """A snapshot: while it is held, SlateDB's flushes and compactions keep the versions it
        sees, so one SST holds several versions of a key (newest first)."""
        return self.oracle.run(self.db.snapshot())

    def flush_wal(self) -> None:
        self.oracle.run(self.db.flush_with_options(sdb.FlushOptions(flush_type=sdb.FlushType.WAL)))

    def flush_memtable(self) -> None:
        self.oracle.run(
            self.db.flush_with_options(sdb.FlushOptions(flush_type=sdb.FlushType.MEM_TABLE))
        )

    def shutdown(self) -> None:
        self.oracle.run(self.db.shutdown())


class SlateReader:
    """SlateDB's ``DbReader``."""

    def __init__(self, oracle: Oracle, reader: sdb.DbReader) -> None:
        self.oracle = oracle
        self.reader = reader

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.oracle.run(self.reader.get(key))
        return value

    def scan(self) -> list[tuple[bytes, bytes]]:
        async def scan() -> list[tuple[bytes, bytes]]:
            return await _drain(await self.reader.scan(FULL_RANGE))

        return self.oracle.run(scan())

    def shutdown(self) -> None:
        self.oracle.run(self.reader.shutdown())


class SlateAdmin:
    """SlateDB's ``Admin``: manifests, checkpoints and compactions as SlateDB decodes them."""

    def __init__(self, oracle: Oracle, admin: sdb.Admin) -> None:
        self.oracle = oracle
        self.admin = admin

    def manifests(self) -> list[sdb.VersionedManifest]:
        return self.oracle.run(self.admin.list_manifests(None, None))

    def latest(self) -> sdb.VersionedManifest:
        return self.manifests()[-1]

    def checkpoints(self) -> list[sdb.Checkpoint]:
        return self.oracle.run(self.admin.list_checkpoints(None))

    def create_checkpoint(self, name: str | None = None) -> uuid.UUID:
        options = sdb.CheckpointOptions(lifetime_ms=None, source=None, name=name)
        result = self.oracle.run(self.admin.create_detached_checkpoint(options))
        return uuid.UUID(result.id)

    def run_gc(self, min_age_ms: int = 0) -> None:
        """One pass of SlateDB's own GC over every directory, with this ``min_age``."""
        d = sdb.GarbageCollectorDirectoryOptions(min_age_ms=min_age_ms, dry_run=False)
        options = sdb.GarbageCollectorOptions(
            manifest_options=d, wal_options=d, compacted_options=d, compactions_options=d
        )
        self.oracle.run(self.admin.run_gc_once(options))

    def compactions(self) -> list[sdb.VersionedCompactions]:
        return self.oracle.run(self.admin.list_compactions(None, None))

    def wait_until(
        self, done: Callable[[sdb.VersionedManifest], bool], timeout_s: float = 20.0
    ) -> sdb.VersionedManifest:
        """Poll the latest manifest until ``done`` holds (e.g. SlateDB's compactor has moved
        L0 into a sorted run); AssertionError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            latest = self.latest()
            if done(latest):
                return latest
            if time.monotonic() > deadline:
                raise AssertionError(f"SlateDB's manifest never reached the state: {latest}")
            time.sleep(0.05)
