"""The long-running garbage collector: one pass every ``options.interval`` on a daemon thread.

SlateDB RFC 0004 runs GC as its own task, possibly in its own process, one per database. A failed pass is
logged and retried at the next tick, because every step is idempotent and a half-done pass leaves
only objects the next one finishes. The one exception is :class:`BoundaryMissing`: GC never
deletes boundary files, so a vanished one means the store is not what we think it is, and
deleting more could let a stale writer win; the loop stops and keeps the error.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from slatedb_core.errors import BoundaryMissing
from slatedb_core.gc.collector import Clock, Collector
from slatedb_core.gc.stats import GcStats
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.objectstore import ObjectStore

log = logging.getLogger(__name__)


def run_gc_once(
    path: str,
    store: ObjectStore,
    options: GarbageCollectorOptions | None = None,
    *,
    now: Clock = time.time,
    wal_url: str | None = None,
) -> GcStats:
    """One pass over the database at ``path`` (see :mod:`slatedb_core.gc.collector`);
    ``wal_url``: its separate WAL store, if it has one (SlateDB RFC 0009)."""
    return Collector(path, store, options, wal_url=wal_url).run(now)


class GarbageCollector:
    """Runs passes in the background once :meth:`start` is called; :meth:`run_once` runs a pass in
    the caller's thread (never two at once). The lifecycle is :class:`Compactor`'s: ``with
    GarbageCollector(...).start() as gc:`` runs it for the block, ``with GarbageCollector(...)
    as gc:`` starts no thread; leaving the block stops it."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: GarbageCollectorOptions | None = None,
        *,
        now: Clock = time.time,
        wal_url: str | None = None,
    ) -> None:
        self.options = options or GarbageCollectorOptions()
        self._collector = Collector(path, store, self.options, wal_url=wal_url)
        self._now = now
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_stats: GcStats | None = None
        self.last_error: BaseException | None = None
        self.passes = 0
        self.failed_passes = 0

    @property
    def path(self) -> str:
        return self._collector.path

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run_once(self) -> GcStats:
        """Run one garbage-collection pass now and return what it did."""
        with self._pass_lock:
            stats = self._collector.run(self._now)
            self.last_stats = stats
            self.passes += 1
        return stats

    def start(self) -> GarbageCollector:
        """Start the background thread (idempotent); returns self for ``with ....start()``."""
        if self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"slatedb-gc-{self.path}", daemon=True
        )
        self._thread.start()
        return self

    def _loop(self) -> None:
        interval = self.options.interval.total_seconds()
        while not self._stop.is_set():
            try:
                self.run_once()
            except BoundaryMissing as e:
                self.last_error = e
                self.failed_passes += 1
                log.error("gc %r stops: %s", self.path, e)
                return
            except Exception as e:  # any failure: the pass is retried at the next tick
                self.last_error = e
                self.failed_passes += 1
                log.warning("gc pass over %r failed; retrying in %.3gs: %s", self.path, interval, e)
            self._stop.wait(interval)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the thread after its current pass. Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    def close(self) -> None:
        """Stop the background thread; the same as :meth:`stop`."""
        self.stop()

    def __enter__(self) -> GarbageCollector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"GarbageCollector({self.path!r}, running={self.running}, passes={self.passes})"
