"""A mixed workload over a faulty HTTP path: writers taking turns (each newer one fencing the
older), a compactor that restarts, GC with min_age 0, and readers on checkpoints and on the
latest state, all talking S3 through :class:`~tests.http_faults.proxy.FaultProxy`.

What it records, and what :func:`verify` then demands:

* every write a writer acknowledged (``put`` returned) is readable at the end with its value;
  a write that raised may or may not be there, but nothing else is (unique keys per write);
* a writer never acknowledges a write it began after a newer writer's ``open`` returned: such a
  write can only become durable in a new WAL SST, and the newer writer's fence forbids that;
* bank transfers (atomic write batches) keep the total, for every reader and at the end;
* every reader sees, per writer, a prefix of that writer's writes; a checkpoint reader's two
  scans agree;
* the manifest chain is valid: ids contiguous from the boundary up, epochs that never decrease,
  and every SST the latest manifest names exists.

Every loop is bounded by count and by time; every failure a component may legitimately meet
under injected faults (a ``StoreError`` after obstore's retries ran out) is counted, not hidden.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from slatedb_core.compactor import Compactor
from slatedb_core.errors import (
    CheckpointNotFound,
    DbClosed,
    Fenced,
    SlateDBError,
    SstMissing,
    StoreError,
)
from slatedb_core.gc import GarbageCollector
from slatedb_core.layout import join, sst_path
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.options import (
    CheckpointScope,
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db

DB = "db"
ACCOUNTS = 16
INITIAL_BALANCE = 1_000
TOTAL = ACCOUNTS * INITIAL_BALANCE

WRITER_OPTIONS = DbOptions(
    flush_interval=timedelta(milliseconds=20),
    manifest_poll_interval=timedelta(milliseconds=100),
    l0_sst_size_bytes=32 * 1024,
    block_size=4 * 1024,
)
COMPACTOR_OPTIONS = CompactorOptions(
    poll_interval=timedelta(milliseconds=100), l0_trigger=2, min_merge_width=2
)
GC_OPTIONS = GarbageCollectorOptions(min_age=timedelta(0), interval=timedelta(milliseconds=100))


def account(i: int) -> bytes:
    return f"acct/{i:03d}".encode()


def write_key(writer: int, n: int) -> bytes:
    return f"w{writer}/{n:06d}".encode()


def write_value(writer: int, n: int) -> bytes:
    return f"value of writer {writer} write {n} ".encode() * 3


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    seed: int = 0
    writers: int = 3
    turn_s: float = 8.0
    """How long each writer runs before the next one opens (and fences it)."""
    readers: int = 2
    max_ops_per_writer: int = 5_000
    open_attempts: int = 20
    deadline_s: float = 180.0
    """Hard cap on the whole run; reaching it fails the test rather than hanging it."""


@dataclass
class WriterLog:
    index: int
    epoch: int = 0
    acked: dict[bytes, bytes] = field(default_factory=dict)
    maybe: dict[bytes, bytes] = field(default_factory=dict)
    issued: list[bytes] = field(default_factory=list)
    ack_started_at: dict[bytes, float] = field(default_factory=dict)
    transfers_acked: int = 0
    transfers_maybe: int = 0
    ended_by: str = ""


@dataclass
class Outcome:
    logs: list[WriterLog] = field(default_factory=list)
    fenced_at: dict[int, float] = field(default_factory=dict)
    """Writer index -> monotonic time when the next writer's open returned."""
    errors: Counter[str] = field(default_factory=Counter)
    """Tolerated failures per place (type names), e.g. 'writer:StoreError'."""
    violations: list[str] = field(default_factory=list)
    reads: int = 0
    checkpoint_reads: int = 0
    checkpoints: list[uuid.UUID] = field(default_factory=list)
    compactor_restarts: int = 0
    compactions: int = 0
    gc_passes: int = 0
    gc_failed_passes: int = 0
    unexpected: list[str] = field(default_factory=list)
    """Errors no component should raise under store faults (bugs)."""

    def violation(self, text: str) -> None:
        self.violations.append(text)


def _retry(
    fn: Callable[[], Db], attempts: int, outcome: Outcome, where: str, deadline: float
) -> Db:
    last: BaseException | None = None
    for _ in range(attempts):
        if time.monotonic() > deadline:
            break
        try:
            return fn()
        except StoreError as e:
            outcome.errors[f"{where}:{type(e).__name__}"] += 1
            last = e
            time.sleep(0.05)
    raise AssertionError(f"{where} failed {attempts} times; last error: {last!r}")


class Workload:
    def __init__(self, store: ObjectStore, config: WorkloadConfig) -> None:
        self.store = store
        self.config = config
        self.outcome = Outcome()
        self.rng = random.Random(config.seed)
        self._stop_readers = threading.Event()
        self._deadline = time.monotonic() + config.deadline_s
        self._lock = threading.Lock()

    # ---- writers ---------------------------------------------------------------------------
    def _open_writer(self, index: int) -> Db:
        return _retry(
            lambda: Db.open(DB, self.store, WRITER_OPTIONS),
            self.config.open_attempts,
            self.outcome,
            f"open writer {index}",
            self._deadline,
        )

    def _seed_accounts(self, db: Db) -> None:
        batch = WriteBatch()
        for i in range(ACCOUNTS):
            batch.put(account(i), str(INITIAL_BALANCE).encode())
        for _ in range(self.config.open_attempts):
            try:
                db.write(batch)
                return
            except StoreError as e:  # not acknowledged; retrying writes the same values again
                self.outcome.errors[f"seed:{type(e).__name__}"] += 1
        raise AssertionError("could not seed the accounts")

    def _writer_loop(self, db: Db, log: WriterLog, stop: threading.Event, seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(self.config.max_ops_per_writer):
            if stop.is_set() or time.monotonic() > self._deadline:
                log.ended_by = log.ended_by or "stopped"
                return
            try:
                if rng.random() < 0.3:
                    self._transfer(db, log, rng)
                else:
                    self._put_group(db, log, rng)
            except Fenced:
                log.ended_by = "fenced"
                return
            except DbClosed:
                log.ended_by = "closed"
                return
            except StoreError as e:
                self.outcome.errors[f"writer:{type(e).__name__}"] += 1
            except SlateDBError as e:
                self.outcome.unexpected.append(f"writer {log.index}: {e!r}")
                log.ended_by = f"error {type(e).__name__}"
                return
        log.ended_by = "max ops"

    def _put_group(self, db: Db, log: WriterLog, rng: random.Random) -> None:
        """A few buffered puts made durable by one ``flush``: acknowledged when it returns."""
        started = time.monotonic()
        group: dict[bytes, bytes] = {}
        for _ in range(rng.randint(1, 30)):
            n = len(log.issued)  # never reused, even after a failed group
            key, value = write_key(log.index, n), write_value(log.index, n)
            log.issued.append(key)
            log.maybe[key] = value  # until the flush returns
            db.put(key, value, await_durable=False)
            group[key] = value
        db.flush()
        for key, value in group.items():
            del log.maybe[key]
            log.acked[key] = value
            log.ack_started_at[key] = started

    def _transfer(self, db: Db, log: WriterLog, rng: random.Random) -> None:
        a, b = rng.sample(range(ACCOUNTS), 2)
        va, vb = db.get(account(a)), db.get(account(b))
        if va is None or vb is None:
            self.outcome.violation(
                f"writer {log.index}: account missing ({a}: {va!r}, {b}: {vb!r})"
            )
            return
        amount = rng.randint(1, 50)
        batch = WriteBatch()
        batch.put(account(a), str(int(va) - amount).encode())
        batch.put(account(b), str(int(vb) + amount).encode())
        try:
            db.write(batch)
        except StoreError:
            log.transfers_maybe += 1
            raise
        log.transfers_acked += 1

    # ---- readers ---------------------------------------------------------------------------
    def check_view(self, view: dict[bytes, bytes], where: str) -> None:
        balances = [view.get(account(i)) for i in range(ACCOUNTS)]
        if all(b is not None for b in balances):
            total = sum(int(b) for b in balances if b is not None)
            if total != TOTAL:
                shown = [int(b) for b in balances if b is not None]
                self.outcome.violation(f"{where}: bank total {total} != {TOTAL}: {shown}")
        elif any(b is not None for b in balances):
            self.outcome.violation(f"{where}: some accounts missing: {balances}")
        with self._lock:
            logs = list(self.outcome.logs)
        for log in logs:
            issued = list(log.issued)
            seen = [k in view for k in issued]
            if seen and any(seen[i] and not seen[i - 1] for i in range(1, len(seen))):
                first_gap = next(i for i in range(1, len(seen)) if seen[i] and not seen[i - 1])
                self.outcome.violation(
                    f"{where}: writer {log.index} not a prefix: {issued[first_gap - 1]!r} "
                    f"missing while {issued[first_gap]!r} is visible"
                )
            for k in issued:
                if k in view and view[k] != write_value(log.index, int(k.split(b"/")[1])):
                    self.outcome.violation(f"{where}: wrong value for {k!r}")

    def _latest_reader_loop(self, index: int) -> None:
        opts = DbReaderOptions(
            mode=ReaderMode.FOLLOW_LATEST, manifest_poll_interval=timedelta(milliseconds=100)
        )
        for _ in range(10_000):
            if self._stop_readers.is_set() or time.monotonic() > self._deadline:
                return
            try:
                with DbReader.open(DB, self.store, options=opts) as reader:
                    for _ in range(5):
                        if self._stop_readers.is_set():
                            return
                        view = dict(reader.scan())
                        self.check_view(
                            view,
                            f"latest reader {index} at manifest {reader.manifest_id}, "
                            f"{reader.stats()}",
                        )
                        with self._lock:
                            self.outcome.reads += 1
                        time.sleep(0.05)
            except (StoreError, SstMissing) as e:
                self.outcome.errors[f"latest reader:{type(e).__name__}"] += 1
            except SlateDBError as e:
                if "DatabaseNotFound" in type(e).__name__:
                    time.sleep(0.05)
                    continue
                self.outcome.unexpected.append(f"latest reader {index}: {e!r}")
                return

    def _checkpoint_reader(self, checkpoint: uuid.UUID) -> None:
        opts = DbReaderOptions(mode=ReaderMode.CHECKPOINT)
        try:
            with DbReader.open(DB, self.store, checkpoint=checkpoint, options=opts) as reader:
                first = dict(reader.scan())
                self.check_view(first, f"checkpoint reader {checkpoint}")
                time.sleep(0.2)  # let the writer, compactor and GC move on underneath
                if dict(reader.scan()) != first:
                    self.outcome.violation(f"checkpoint {checkpoint}: two scans differ")
                self.outcome.checkpoint_reads += 1
        except StoreError as e:
            self.outcome.errors[f"checkpoint reader:{type(e).__name__}"] += 1
        except (SstMissing, CheckpointNotFound) as e:
            # Nobody deletes these checkpoints (no lifetime): losing one is a bug.
            self.outcome.violation(f"checkpoint {checkpoint}: {e!r}")

    def _checkpoints_during_turn(self, db: Db, until: float) -> None:
        while time.monotonic() < min(until, self._deadline):
            time.sleep(min(1.0, max(0.0, until - time.monotonic())))
            if time.monotonic() >= until:
                return
            try:
                cp = db.create_checkpoint(CheckpointScope.DURABLE)
            except (StoreError, Fenced, DbClosed) as e:
                self.outcome.errors[f"checkpoint:{type(e).__name__}"] += 1
                continue
            self.outcome.checkpoints.append(cp.id)
            self._checkpoint_reader(cp.id)

    # ---- the run ---------------------------------------------------------------------------
    def _start_compactor(self) -> Compactor:
        for _ in range(self.config.open_attempts):
            try:
                return Compactor(DB, self.store, COMPACTOR_OPTIONS).start()
            except StoreError as e:
                self.outcome.errors[f"compactor start:{type(e).__name__}"] += 1
                time.sleep(0.05)
        raise AssertionError("could not start a compactor")

    def run(self) -> Outcome:
        cfg = self.config
        out = self.outcome
        first = self._open_writer(0)
        self._seed_accounts(first)
        gc = GarbageCollector(DB, self.store, GC_OPTIONS).start()
        compactor = self._start_compactor()
        readers = [
            threading.Thread(target=self._latest_reader_loop, args=(i,), name=f"reader-{i}")
            for i in range(cfg.readers)
        ]
        for t in readers:
            t.start()
        dbs: list[Db] = []
        threads: list[threading.Thread] = []
        stops: list[threading.Event] = []
        try:
            db = first
            for index in range(cfg.writers):
                if index > 0:
                    db = self._open_writer(index)
                    out.fenced_at[index - 1] = time.monotonic()
                log = WriterLog(index, epoch=db.writer_epoch)
                with self._lock:
                    out.logs.append(log)
                stop = threading.Event()
                t = threading.Thread(
                    target=self._writer_loop,
                    args=(db, log, stop, self.rng.randrange(2**32)),
                    name=f"writer-{index}",
                )
                t.start()
                dbs.append(db)
                threads.append(t)
                stops.append(stop)
                turn_end = time.monotonic() + cfg.turn_s
                if index == cfg.writers // 2:  # a new compactor fences the running one
                    compactor.stop()
                    out.compactions += compactor.stats.compactions
                    compactor = self._start_compactor()
                    out.compactor_restarts += 1
                self._checkpoints_during_turn(db, turn_end)
        finally:
            for s in stops:
                s.set()
            for t in threads:
                t.join(60)
            self._stop_readers.set()
            for t in readers:
                t.join(60)
            compactor.stop()
            gc.stop()
            for d in dbs:
                try:
                    d.close()
                except SlateDBError as e:
                    out.errors[f"close:{type(e).__name__}"] += 1
        out.compactions += compactor.stats.compactions
        out.gc_passes, out.gc_failed_passes = gc.passes, gc.failed_passes
        if any(t.is_alive() for t in threads + readers):
            out.unexpected.append("a worker thread did not stop within 60 s")
        return out


def verify(outcome: Outcome, store: ObjectStore, workload: Workload) -> dict[str, int]:
    """Reopen over a fault-free store and check every invariant; returns figures for the report."""
    out = outcome
    for log in out.logs:
        fenced_at = out.fenced_at.get(log.index)
        if fenced_at is None:
            continue
        late = [k for k, t in log.ack_started_at.items() if t > fenced_at]
        if late:
            out.violation(
                f"writer {log.index} (epoch {log.epoch}) acknowledged {len(late)} writes begun "
                f"after writer {log.index + 1} fenced it, e.g. {late[0]!r}"
            )
    with Db.open(DB, store, WRITER_OPTIONS) as db:
        final = dict(db.scan())
    workload.check_view(final, "final state")
    for log in out.logs:
        for k, v in log.acked.items():
            if final.get(k) != v:
                out.violation(f"acknowledged write {k!r} of writer {log.index} lost")
    known = {k for log in out.logs for k in log.issued} | {account(i) for i in range(ACCOUNTS)}
    strangers = sorted(set(final) - known)
    if strangers:
        out.violation(f"keys nobody wrote: {strangers[:5]}")
    if any(final.get(account(i)) is None for i in range(ACCOUNTS)):
        out.violation("accounts missing in the final state")
    for cp in out.checkpoints:
        workload._checkpoint_reader(cp)
    _verify_manifest_chain(store, out)
    return {
        "acked_writes": sum(len(log.acked) for log in out.logs),
        "maybe_writes": sum(len(log.maybe) for log in out.logs),
        "maybe_writes_present": sum(k in final for log in out.logs for k in log.maybe),
        "transfers_acked": sum(log.transfers_acked for log in out.logs),
        "final_keys": len(final),
    }


def _verify_manifest_chain(store: ObjectStore, out: Outcome) -> None:
    manifests = ManifestStore(store, DB)
    boundary = BoundaryObject(store, join(DB, "gc", "manifest.boundary")).read()
    ids = [e.id for e in manifests.list()]
    live = [i for i in ids if i > boundary]
    if not live or live != list(range(live[0], live[-1] + 1)) or live[0] != boundary + 1:
        out.violation(f"manifest ids above the boundary {boundary} not contiguous: {live[:10]}")
    epochs: list[tuple[int, int]] = []
    for i in live:
        m = manifests.read(i).manifest
        epochs.append((m.writer_epoch, m.compactor_epoch))
    for (w0, c0), (w1, c1) in itertools.pairwise(epochs):
        if w1 < w0 or c1 < c0:
            out.violation(f"epochs decreased along the manifest chain: {epochs}")
            break
    latest = manifests.read_latest().manifest
    if latest.writer_epoch < len(out.logs):
        out.violation(f"writer epoch {latest.writer_epoch} < {len(out.logs)} writers opened")
    for sst in latest.ssts:
        if not store.exists(sst_path(DB, sst.id)):
            out.violation(f"the latest manifest names a missing SST {sst.id}")
