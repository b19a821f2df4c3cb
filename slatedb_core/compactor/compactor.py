"""The compactor process: one epoch, then compactions until the scheduler has nothing left.

Starting a compactor bumps ``compactor_epoch`` in the manifest (SlateDB RFC 0001 "Compactors") and then
stamps the ``.compactions`` namespace with it. From then on every manifest commit and every
``.compactions`` write is fenced on that epoch: once a newer compactor starts, the older one's next
commit raises :class:`Fenced`, and it stops for good, so two compactors never both change the tree.

:func:`run_compaction_once` is the batch form (a scheduled job; it bumps the epoch only when there is
work). :class:`Compactor` is the long-running form: a daemon thread polling every
``poll_interval``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from types import TracebackType

from slatedb_core.compactor.compactions import CompactionsStore
from slatedb_core.compactor.executor import CompactionExecutor, CompactionResult
from slatedb_core.compactor.scheduler import plan_compaction
from slatedb_core.errors import (
    CompactionCancelled,
    CompactionContended,
    CompactionSourceChanged,
    ErrorKind,
    Fenced,
    SlateDBError,
)
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.options import CompactorOptions, check_optional
from slatedb_core.store.objectstore import ObjectStore, check_store

log = logging.getLogger(__name__)

MAX_COMPACTIONS_PER_RUN = 1000
"""A pass stops after this many compactions, so a writer outpacing it cannot keep it forever."""
MAX_CONSECUTIVE_CONFLICTS = 5
"""Source conflicts in a row after which a pass gives up until the next one."""
STUCK_AFTER = 3
"""Background passes failing in a row on what retrying does not mend after which
:meth:`Compactor.stuck` names the error (a writer stalled on a full L0 fails with it)."""


def retry_mends(err: BaseException) -> bool:
    """Whether a later pass may not meet ``err``: an outage or contention (``ErrorKind``
    TRANSIENT: a retryable ``StoreError``, :class:`CommitRetriesExhausted`,
    :class:`CompactionContended`), other actors' commits in the way (CONFLICT:
    :class:`CompactionSourceChanged`), a stop (:class:`CompactionCancelled`). Decided on the
    kind, as ``slatedb_core.errors`` asks: a store refusing for good (access denied, a link in
    a local store) is no outage."""
    if isinstance(err, CompactionCancelled):
        return True
    return isinstance(err, SlateDBError) and err.kind in (ErrorKind.TRANSIENT, ErrorKind.CONFLICT)


class ConflictStreak:
    """The one rule every compaction driver applies to source conflicts (the single-process
    :class:`Compactor` and :func:`run_compaction_once`, ``spark_jobs.compact``, and through them
    the CLI's ``compact`` and the Dagster ``compaction`` asset).

    A :class:`CompactionSourceChanged` means "plan again"; :data:`MAX_CONSECUTIVE_CONFLICTS` of
    them in a row end the pass. A pass that ended so without committing any compaction raises
    :class:`CompactionContended` from :meth:`check` instead of looking like "nothing to compact";
    one that committed some returns its statistics, the conflicts counted as failed.
    """

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.in_a_row = 0
        self.last: CompactionSourceChanged | None = None

    def lost(self, e: CompactionSourceChanged) -> bool:
        """Count one conflict; True when the pass must stop."""
        self.in_a_row += 1
        self.last = e
        log.warning("compaction of %r abandoned, re-planning: %s", self.db_path, e)
        return self.in_a_row >= MAX_CONSECUTIVE_CONFLICTS

    def won(self) -> None:
        self.in_a_row = 0

    def check(self, committed: int) -> None:
        """Raise CompactionContended when the pass gave up on conflicts with ``committed`` == 0."""
        if committed == 0 and self.in_a_row >= MAX_CONSECUTIVE_CONFLICTS and self.last:
            raise CompactionContended(self.db_path, self.in_a_row, str(self.last)) from self.last


@dataclass
class CompactionStats:
    """Counters of the compactions a :class:`Compactor` ran: inputs, outputs, bytes, rows, time."""

    compactions: int = 0
    failed: int = 0
    input_ssts: int = 0
    output_ssts: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    duration_s: float = 0.0

    def add(self, r: CompactionResult) -> None:
        """Count one finished compaction ``r``."""
        self.compactions += 1
        self.input_ssts += r.input_ssts
        self.output_ssts += len(r.outputs)
        self.bytes_in += r.bytes_in
        self.bytes_out += r.bytes_out
        self.rows_in += r.rows_in
        self.rows_out += r.rows_out

    def merge(self, other: CompactionStats) -> None:
        """Add every counter of ``other`` to this one's."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def mb_per_s(self) -> float:
        return self.bytes_in / 1e6 / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows_in / self.duration_s if self.duration_s > 0 else 0.0


class _Session:
    """What one epoch holds: the fenced manifest handle, the .compactions writer, an executor."""

    def __init__(
        self,
        path: str,
        store: ObjectStore,
        options: CompactorOptions,
        cancel: threading.Event | None = None,
    ) -> None:
        self.path = path
        self.options = options
        self.manifest = FencedManifest.init_compactor(ManifestStore(store, path))
        self.records = CompactionsStore(store, path, self.manifest.epoch)
        self.records.take_over(self.manifest.stored.manifest)
        self.executor = CompactionExecutor(
            store, path, self.manifest, self.records, options, cancel=cancel
        )
        self.results: list[CompactionResult] = []

    @property
    def epoch(self) -> int:
        return self.manifest.epoch

    def run_until_idle(self, stop: threading.Event | None = None) -> CompactionStats:
        """Compact until nothing is scheduled. Fenced propagates; so do store errors, after the
        compaction's record is marked failed."""
        stats = CompactionStats()
        started = time.monotonic()
        conflicts = ConflictStreak(self.path)
        try:
            for _ in range(MAX_COMPACTIONS_PER_RUN):
                if stop is not None and stop.is_set():
                    break
                stored = self.manifest.refresh()
                plan = plan_compaction(stored.manifest, self.options)
                if plan is None:
                    break
                try:
                    result = self.executor.execute(plan, stored)
                except CompactionSourceChanged as e:
                    stats.failed += 1
                    if conflicts.lost(e):
                        break
                    continue
                except CompactionCancelled:
                    stats.failed += 1
                    break
                conflicts.won()
                stats.add(result)
                self.results.append(result)
        finally:
            stats.duration_s = time.monotonic() - started
        conflicts.check(stats.compactions)
        return stats


def run_compaction_once(
    path: str, store: ObjectStore, options: CompactorOptions | None = None
) -> CompactionStats | None:
    """Compact ``path`` until nothing is scheduled; None if there was nothing to do.

    Takes over as THE compactor (bumps the epoch, fencing any running one) only after seeing
    work, so an idle scheduled run writes nothing.
    """
    check_store(store)
    options = check_optional("options", options, CompactorOptions) or CompactorOptions()
    latest = ManifestStore(store, path).read_latest()
    if plan_compaction(latest.manifest, options) is None:
        return None
    started = time.monotonic()
    session = _Session(path, store, options)
    stats = session.run_until_idle()
    stats.duration_s = time.monotonic() - started
    return stats if stats.compactions else None


class Compactor:
    """A long-running compactor. Constructing it takes over the compactor epoch.

    Thread-safe: :meth:`run_once` may be called while the polling thread runs; passes never
    overlap. Once fenced, every later :meth:`run_once` raises the same Fenced. The lifecycle is
    :class:`GarbageCollector`'s: :meth:`start` starts the polling thread (``with
    Compactor(...).start() as c:`` runs it for the block), ``with Compactor(...) as c:`` starts
    none; leaving the block or :meth:`stop` stops it, and :meth:`start` starts it again.
    """

    def __init__(
        self, path: str, store: ObjectStore, options: CompactorOptions | None = None
    ) -> None:
        check_store(store)  # checked before _Session takes over the compactor epoch
        self.path = path
        self.store = store
        self.options = check_optional("options", options, CompactorOptions) or CompactorOptions()
        self._stop = threading.Event()
        self._session = _Session(path, store, self.options, cancel=self._stop)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.stats = CompactionStats()
        self.fenced: Fenced | None = None
        self.last_error: BaseException | None = None
        self.failed_passes = 0
        """Background passes failed in a row since the last one that did not fail."""
        self.unmended_passes = 0
        """Of those, the last ones in a row that failed on what retrying does not mend
        (:func:`retry_mends`): what :meth:`stuck` counts."""

    @property
    def epoch(self) -> int:
        return self._session.epoch

    @property
    def results(self) -> list[CompactionResult]:
        return list(self._session.results)

    def run_once(self) -> CompactionStats:
        """One pass: compact until nothing is scheduled. Raises Fenced once replaced; does
        nothing after :meth:`stop`."""
        with self._lock:
            if self.fenced is not None:
                raise self.fenced
            try:
                stats = self._session.run_until_idle(self._stop)
            except Fenced as e:
                self.fenced = e
                self._stop.set()
                log.warning("compactor of %r stops: %s", self.path, e)
                raise
            self.stats.merge(stats)
            return stats

    def start(self) -> Compactor:
        """Start the background compaction thread (idempotent; again after :meth:`stop`) and
        return the compactor."""
        if self.running:
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name=f"slatedb-compactor-{self.path}", daemon=True
        )
        self._thread.start()
        return self

    def _loop(self) -> None:
        interval = self.options.poll_interval.total_seconds()
        while not self._stop.is_set():
            try:
                self.run_once()
                # the counters first: stuck() reads last_error, then them (review54)
                self.failed_passes = self.unmended_passes = 0
                self.last_error = None
            except Fenced:
                return
            except Exception as e:  # a store outage or a bug: keep the process alive, say why
                self.last_error = e
                self.failed_passes += 1
                self.unmended_passes = 0 if retry_mends(e) else self.unmended_passes + 1
                log.warning(
                    "compaction pass of %r failed, retrying: %s",
                    self.path,
                    e,
                    exc_info=not isinstance(e, SlateDBError),
                )
            self._stop.wait(interval)

    def stuck(self) -> BaseException | None:
        """The error of passes that keep failing on what retrying does not mend, else None.

        The last :data:`STUCK_AFTER` background passes all failed on errors retrying does not
        mend (:func:`retry_mends`: not an outage, not contention, which the next passes retry):
        a bug, damage (:class:`CorruptionError`), a merge operator's failure, a store refusing
        for good. A writer whose L0 waits on this compactor fails with it rather than stall
        behind a warning (``docs/operations.md``, "Write stalls"). None while passes succeed,
        after a fence (another compactor works) and during an outage."""
        if self.fenced is not None:  # the loop ended on it, counters as its last passes left them
            return None
        err = self.last_error
        if self.unmended_passes < STUCK_AFTER or err is None or retry_mends(err):
            return None
        return err

    def stop(self, timeout: float = 60.0) -> None:
        """Stop polling; a compaction in flight is abandoned before its commit. Idempotent."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        self._thread = None

    def close(self) -> None:
        """Stop the background thread; the same as :meth:`stop`."""
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Compactor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Compactor({self.path!r}, store={self.store.url!r}, epoch={self.epoch})"
