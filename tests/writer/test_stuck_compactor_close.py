"""A writer failed by a stuck embedded compactor: its close, and what a new writer finds.

From review54 (session 54) of c63afbd: once ``_await_l0_room`` fails the writer, ``close()``
must raise that error at once (no hang on the stalled flush), no L0 SST of the failed flush may
be committed afterwards, and every durable put acknowledged before the failure must be read by
the next writer, each once, with its latest value."""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from slatedb_core.errors import BackgroundThreadDied
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, DbOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from slatedb_core.writer.db import Db
from tests.writer.thread_steps import start_recorded

T = TypeVar("T")
FAST = timedelta(milliseconds=20)


class Breaking(FaultyStore):
    """Raises RuntimeError (a bug, not an outage) for reads of compacted SSTs once armed."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.armed = False

    def _run(self, op: str, path: str, call: Callable[[], T]) -> T:
        if self.armed and op == "get" and fnmatch.fnmatchcase(path, "db/compacted/*"):
            raise RuntimeError(f"unexpected failure of {op} {path}")
        return super()._run(op, path, call)


def test_close_after_a_stuck_compactor_failed_the_writer(tmp_path: Path) -> None:
    inner = open_store(f"file://{tmp_path}/lake")
    store = Breaking(inner)
    opts = DbOptions(
        flush_interval=FAST,
        l0_sst_size_bytes=4096,
        max_unflushed_bytes=4096,
        l0_max_ssts=2,
        manifest_poll_interval=FAST,
        compactor=CompactorOptions(poll_interval=FAST, l0_trigger=2),
    )
    db = Db.open("db", store, opts)
    store.armed = True
    acked: dict[bytes, bytes] = {}
    failure: list[BaseException] = []

    def writes() -> None:
        try:
            for i in range(3000):
                key, value = b"k%03d" % (i % 400), b"v%05d" % i + b"x" * 300
                db.put(key, value)  # durable: returns once its WAL SST is written
                acked[key] = value
        except BaseException as e:
            failure.append(e)

    t = threading.Thread(target=writes, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "a durable put hangs behind the stuck compactor"
    assert failure and isinstance(failure[0], BackgroundThreadDied), failure
    l0_at_failure = ManifestStore(inner, "db").read_latest().manifest.l0

    c, closer = start_recorded(db.close)
    c.join(30)
    assert not c.is_alive(), "close() hangs after the writer failed"
    assert isinstance(closer[0], BackgroundThreadDied)
    assert ManifestStore(inner, "db").read_latest().manifest.l0 == l0_at_failure

    with Db.open("db", inner, DbOptions()) as again:
        assert acked, "nothing was acknowledged before the failure"
        for key, value in acked.items():
            got = again.get(key)
            # a put that raised may have landed too (an ambiguous answer): it is newer
            assert got is not None and got >= value, (key, got, value)
