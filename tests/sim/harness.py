"""One seeded schedule: actors interleaved by ``random.Random(seed)`` over a faulty memory store.

Actors: writers opened on one path (the newest fences the others; the older ones keep trying as
zombies), stalled operations (a writer's flush, memtable flush, checkpoint or open, a compaction
pass or a GC pass, parked at a chosen store request and resumed later), readers on checkpoints
and following the latest state, a compactor that restarts, GC with ``min_age`` 0, checkpoint
creators and deleters, clones (whole and projected), unions of projected clones, and destroy.

After every step: the recorder's namespace rules, and a fault-free reader following the latest
state that must show every acknowledged write (see :mod:`tests.sim.model`). At the end every
stall is released, faults stop, and a final writer, compaction, GC, checkpoint readers and clone
readers check again; then the databases may be destroyed (soft, or hard with an emptiness check).

A failure raises :class:`~tests.sim.recorder.InvariantViolation` whose message starts with the
one-line command that replays the schedule.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint, list_checkpoints
from slatedb_core.clone import create_clone
from slatedb_core.compactor import CompactionStats, Compactor
from slatedb_core.destroy import destroy
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    Fenced,
    SlateDBError,
)
from slatedb_core.gc.collector import Collector
from slatedb_core.keys import KeyRange
from slatedb_core.options import (
    CheckpointOptions,
    CheckpointScope,
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader import DbReader, SstMissing
from slatedb_core.store.faults import FaultRule, FaultyStore, When
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.twophase import TwoPhaseStore
from slatedb_core.store.url import open_store
from slatedb_core.union import UnionSource, create_union
from slatedb_core.writebatch import WriteBatch
from tests.sim import model as m
from tests.sim.actors import Outcome, SimDb, SimWindow, Stalled, run_stalled
from tests.sim.recorder import InvariantViolation, RecordingStore
from tests.sim.txnfaults import FaultySqliteTxnStore

DB = "db"
LONG = timedelta(days=1)
REPRO = ".venv/bin/python -m tests.sim.run --seed {seed}"
LOWER, UPPER = KeyRange(None, b"k3"), KeyRange(b"k3", None)



@dataclass
class Writer:
    id: int
    db: SimDb | None = None
    state: str = "opening"  # opening, live, zombie, crashed, closed, failed
    busy: bool = False
    epoch: int = 0
    opened_issue: int = 0
    fenced_after_issue: int | None = None
    """Set when a newer writer finished opening: from then on, nothing may be acked."""


@dataclass
class CompactorActor:
    id: int
    compactor: Compactor
    zombie: bool = False
    busy: bool = False


@dataclass
class CheckpointRec:
    id: uuid.UUID
    snapshot: m.Snapshot | None
    deleted: bool = False
    delete_attempted: bool = False


@dataclass
class CloneRec:
    name: str
    projection: KeyRange | None
    checkpoint: CheckpointRec | None
    snapshot: m.Snapshot | None
    finished: bool = False
    destroyed: bool = False
    in_union: bool = False


@dataclass
class Figures:
    """What a run of schedules did; summed over schedules by the CLI."""

    schedules: int = 0
    steps: int = 0
    faults: int = 0
    pauses: int = 0
    requests: int = 0
    checks: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, other: Figures) -> None:
        for f in dataclasses.fields(self):
            if f.name != "outcomes":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.outcomes.update(other.outcomes)


@dataclass(frozen=True)
class Config:
    steps: int
    fault_rate: float
    l0_bytes: int
    stall_weight: int
    end: str  # none, soft, hard

    @staticmethod
    def of(rng: random.Random) -> Config:
        return Config(
            steps=rng.randint(12, 36),
            fault_rate=rng.choice([0.0, 0.01, 0.03, 0.05, 0.08]),
            l0_bytes=rng.choice([1024, 4096, 1 << 20]),
            stall_weight=rng.choice([0, 4, 10]),
            end=rng.choice(["none", "soft", "hard"]),
        )


class Simulation:
    def __init__(
        self, seed: int, *, trace: Callable[[str], None] | None = None, two_phase: bool = False
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = Config.of(self.rng)
        rate = self.config.fault_rate
        self.two_phase: TwoPhaseStore | None = None
        self.mem: ObjectStore = open_store("memory://")
        if two_phase:
            # A store that ignores If-None-Match / If-Match, made whole by two-phase CAS over
            # SQLite. Its own PUTs (temporary, copy) and DELETEs fail too, from a second fault
            # layer under the protocol; not its reads, which the fault-free judges go through,
            # and DELETEs only before taking effect: the recorder sits above the protocol and
            # would take a delete that raised after taking effect for one that did nothing.
            rules = [
                FaultRule("put", fail_before=rate / 2, fail_after=rate / 2),
                FaultRule("delete", fail_before=rate / 2),
            ] if rate else []
            under = FaultyStore(NoConditionalWrites(self.mem), seed=seed + 1, rules=rules)
            txn_dir = Path(tempfile.mkdtemp(prefix="slatedb-sim-txn-"))
            txn = FaultySqliteTxnStore(txn_dir / "txn.db", seed=seed + 2, rate=rate)
            self.two_phase = TwoPhaseStore(under, txn)
            self.mem = self.two_phase
        self.rec = RecordingStore(self.mem)
        rules = [FaultRule(fail_before=rate / 2, fail_after=rate / 2)] if rate else []
        if rate:
            rules.insert(0, FaultRule("put_if_absent", f"{DB}/manifest/*", latency_s=(0, 2e-4),
                                      max_hits=3))
        self.faulty = FaultyStore(self.rec, seed=seed, rules=rules, pause_timeout_s=60)
        self.model = m.Model()
        self.writers: list[Writer] = []
        self.compactors: list[CompactorActor] = []
        self.stalls: list[Stalled] = []
        self.checkpoints: list[CheckpointRec] = []
        self.readers: list[tuple[DbReader, CheckpointRec | None]] = []
        self.clones: list[CloneRec] = []
        self.unions: list[str] = []
        self.figures = Figures(schedules=1)
        self.verify_reader: DbReader | None = None
        self.destroyed = False
        self._trace = trace
        self._names = 0
        self.options = DbOptions(
            flush_interval=LONG,
            manifest_poll_interval=LONG,
            l0_sst_size_bytes=self.config.l0_bytes,
            wal_sst_size_bytes=1 << 30,
            max_unflushed_bytes=1 << 30,
            l0_max_ssts=100_000,
            block_size=512,
            block_cache_bytes=1 << 20,
            # seed 001's parallel WAL writes; its own generator, so the rest of a schedule stays
            # what it was before this knob existed
            max_parallel_writes=random.Random(seed * 7919 + 13).choice((1, 1, 2, 4)),
        )
        self.figures.outcomes[f"parallel_writes:{self.options.max_parallel_writes}"] += 1
        self.compactor_options = CompactorOptions(
            poll_interval=LONG, l0_trigger=2, min_merge_width=2, max_sst_size_bytes=2048,
            block_size=512,
        )
        self.gc_options = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))

    # ---- helpers ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        if self._trace is not None:
            self._trace(text)

    def name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def outcome(self, step: str, err: BaseException | None) -> None:
        what = "ok" if err is None else type(err).__name__
        self.figures.outcomes[f"{step}:{what}"] += 1
        if isinstance(err, Fenced):
            self.figures.outcomes["fenced"] += 1
        self.note(f"  -> {what}{'' if err is None else ': ' + str(err)[:160]}")

    def attempt(self, step: str, fn: Callable[[], object]) -> Outcome:
        """Run ``fn``; engine errors are outcomes, anything else (a bug) propagates."""
        try:
            out = Outcome(value=fn())
        except SlateDBError as e:
            out = Outcome(error=e)
        self.outcome(step, out.error)
        return out

    def live(self) -> Writer | None:
        for w in reversed(self.writers):
            if w.state == "live":
                return w
        return None

    def idle_writers(self) -> list[Writer]:
        return [w for w in self.writers if w.db is not None and not w.busy
                and w.state in ("live", "zombie")]

    def value(self, size: int) -> bytes:
        return b"x" * size

    # ---- writers ---------------------------------------------------------------------------
    def _opened(self, w: Writer, out: Outcome) -> None:
        if out.error is not None:
            w.state = "failed"
            self.outcome("open", out.error)
            return
        db = out.value
        assert isinstance(db, SimDb)
        w.db = db
        w.epoch = db.writer_epoch
        w.opened_issue = issue = self.model.next()
        newer = [o for o in self.writers if o is not w and o.db is not None and o.epoch > w.epoch]
        if newer:
            # Opened with an older epoch than a writer already running (its open was stalled
            # before fencing): it is a zombie from birth and may acknowledge nothing.
            w.state = "zombie"
            w.fenced_after_issue = min(o.opened_issue for o in newer)
            self.outcome("open_stale", None)
            return
        w.state = "live"
        for other in self.writers:
            if other is not w and other.db is not None and other.epoch < w.epoch:
                if other.state == "live":
                    other.state = "zombie"
                if other.fenced_after_issue is None:
                    other.fenced_after_issue = issue
        self.outcome("open", None)

    def step_open_writer(self) -> None:
        w = Writer(len(self.writers) + 1)
        self.writers.append(w)
        self.note(f"open writer w{w.id}")

        def fn() -> SimDb:
            return SimDb.open_manual(DB, self.faulty, self.options)

        if self.config.stall_weight and self.rng.random() < 0.3:
            pause = self.rng.choice([
                ("put_if_absent", f"{DB}/manifest/*", "after"),
                ("put_if_absent", f"{DB}/wal/*", "before"),
                ("list", f"{DB}/wal", "before"),
            ])
            self._stall(f"open w{w.id}", pause, fn, lambda out: self._opened(w, out))
            return
        try:
            db = fn()
        except SlateDBError as e:
            self._opened(w, Outcome(error=e))
            return
        self._opened(w, Outcome(value=db))
        if self.verify_reader is None:
            self._bank_open(w)

    def _bank_open(self, w: Writer) -> None:
        assert w.db is not None
        issue = self.model.next()
        batch = WriteBatch()
        for a in m.ACCOUNTS:
            batch.put(a, m.encode(issue, b"%d" % m.OPENING_BALANCE))
        self.model.issue(w.id, zip(batch.keys, batch.values, strict=True))
        self._durable(w, "bank_open", lambda: w.db.write(batch) if w.db else None)

    def _durable(self, w: Writer, step: str, fn: Callable[[], object]) -> Outcome:
        """A call that acks all of ``w``'s pending writes if it returns normally."""
        had_pending = self.model.has_pending(w.id)
        out = self.attempt(step, fn)
        if out.error is None:
            self._acked(w, had_pending, step)
        return out

    def _acked(self, w: Writer, had_pending: bool, step: str) -> None:
        if had_pending and w.fenced_after_issue is not None:
            newest = [x for x in self.model.pending.get(w.id, [])
                      if x.issue >= w.fenced_after_issue]
            if newest:
                raise InvariantViolation(
                    f"zombie writer w{w.id} acknowledged write #{newest[0].issue} issued after "
                    f"a newer writer fenced it (step {step})"
                )
        self.model.ack(w.id)

    def pick_writer(self) -> Writer | None:
        idle = self.idle_writers()
        if not idle:
            return None
        live = [w for w in idle if w.state == "live"]
        if live and self.rng.random() < 0.85:
            return live[0]
        return self.rng.choice(idle)

    def step_put(self, durable: bool) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        key = self.rng.choice(m.KEYS)
        issue = self.model.next()
        value = m.encode(issue, self.value(self.rng.randint(1, 300)))
        self.note(f"put{'_durable' if durable else ''} w{w.id} ({w.state}) {key!r} #{issue}")
        db = w.db
        self.model.issue(w.id, [(key, value)])
        if durable:
            self._durable(w, "put_durable", lambda: db.put(key, value))
        else:
            self.attempt("put", lambda: db.put(key, value, await_durable=False))

    def step_delete(self) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        key = self.rng.choice(m.KEYS)
        self.note(f"delete w{w.id} ({w.state}) {key!r} #{self.model.next()}")
        db = w.db
        self.model.issue(w.id, [(key, None)])
        self._durable(w, "delete", lambda: db.delete(key))

    def step_transfer(self) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        db = w.db
        got = self.attempt("transfer_read", lambda: db.get_many(list(m.ACCOUNTS)))
        if got.error is not None:
            return
        values = got.value
        assert isinstance(values, list)
        if any(v is None for v in values):
            return  # the opening batch is not in this writer's view
        a, b = self.rng.sample(range(len(m.ACCOUNTS)), 2)
        bal = [m.balance_of(v) for v in values]
        amount = self.rng.randint(0, bal[a])
        issue = self.model.next()
        batch = WriteBatch()
        batch.put(m.ACCOUNTS[a], m.encode(issue, b"%d" % (bal[a] - amount)))
        batch.put(m.ACCOUNTS[b], m.encode(issue, b"%d" % (bal[b] + amount)))
        self.note(f"transfer w{w.id} ({w.state}) {amount} acct{a}->acct{b} #{issue}")
        self.model.issue(w.id, zip(batch.keys, batch.values, strict=True))
        self._durable(w, "transfer", lambda: db.write(batch))

    def step_bulk_ingest(self) -> None:
        """A few keys straight into L0 (no WAL), atomic like a batch."""
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        db = w.db
        keys = sorted(self.rng.sample(m.KEYS, self.rng.randint(1, 3)))
        issue = self.model.next()
        values = [m.encode(issue, b"bulk") for _ in keys]
        self.note(f"bulk_ingest w{w.id} ({w.state}) {keys} #{issue}")
        rows = -issue  # not in the WAL: only this call can make these rows durable
        self.model.issue(rows, zip(keys, values, strict=True))
        table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
        before = db._fm.stored.id
        # it freezes and flushes the memtable first, so the writer's pending writes are acked too
        if self._durable(w, "bulk_ingest", lambda: db.bulk_ingest(table)).error is None:
            if w.fenced_after_issue is not None and issue >= w.fenced_after_issue:
                raise InvariantViolation(f"zombie writer w{w.id} acknowledged bulk ingest #{issue}")
            self.model.ack(rows)
            self._check_reported(db, before)
        else:
            self.model.forget(rows)

    def step_flush(self) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        db = w.db
        kind = self.rng.choice(["flush", "flush", "flush_memtable", "l0_flush"])
        self.note(f"{kind} w{w.id} ({w.state})")
        if kind == "flush":
            self._durable(w, kind, db.flush)
        elif kind == "flush_memtable":
            before = db._fm.stored.id
            if self._durable(w, kind, db.flush_memtable).error is None:
                self._check_reported(db, before)
        else:  # what the L0 flusher thread would do for memtables frozen by size
            self.attempt(kind, db._flush_imms)

    def _check_reported(self, db: SimDb, before: int) -> None:
        """A manifest the writer just committed must be above the manifest boundary."""
        mid = db._fm.stored.id
        if mid != before:  # else nothing to flush, nothing committed
            self._reported(mid, "writer's memtable flush")

    def _reported(self, mid: int, what: str) -> None:
        """A commit reported successful just now is above the manifest boundary."""
        boundary = self.rec.boundary(DB, "manifest")
        self.figures.checks += 1
        if mid <= boundary:
            raise InvariantViolation(
                f"{what} reported manifest {mid} committed, at or behind the boundary {boundary}"
            )

    def step_wal_pipeline(self) -> None:
        """Parallel WAL writes: a write that goes to the writer's window without waiting for it,
        or one create in flight landing (in a seeded order), so later SSTs land first and holes
        stay open while other actors (readers, new writers, GC, a crash) act."""
        w = self.pick_writer()
        if w is None or w.db is None or not isinstance(w.db._window, SimWindow):
            return
        db, window = w.db, w.db._window
        if window.queue and self.rng.random() < 0.4:
            self.note(f"wal_land w{w.id} ({w.state}), {len(window.queue)} in flight")
            self.attempt("wal_land", window.run_one)
            return
        key = self.rng.choice(m.KEYS)
        issue = self.model.next()
        value = m.encode(issue, self.value(self.rng.randint(1, 300)))
        self.note(f"wal_dispatch w{w.id} ({w.state}) {key!r} #{issue}, {len(window.queue)} in "
                  "flight")
        self.model.issue(w.id, [(key, value)])
        if self.attempt("put", lambda: db.put(key, value, await_durable=False)).error is None:
            self.attempt("wal_dispatch", lambda: db._dispatch_wal(window.size))

    def step_refresh(self) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        self.note(f"refresh w{w.id} ({w.state})")
        self.attempt("refresh", w.db._refresh)

    def step_crash(self) -> None:
        idle = self.idle_writers()
        if not idle:
            return
        w = self.rng.choice(idle)
        assert w.db is not None
        self.note(f"crash w{w.id} ({w.state})")
        w.db._simulate_crash()
        w.state = "crashed"
        self.model.forget(w.id)
        self.outcome("crash", None)

    def step_close(self) -> None:
        idle = self.idle_writers()
        if not idle:
            return
        w = self.rng.choice(idle)
        db = w.db
        assert db is not None
        self.note(f"close w{w.id} ({w.state})")
        self._close(w, "close")

    def _close(self, w: Writer, step: str) -> None:
        """``close`` flushes only a writer that has not failed; only then are its writes acked."""
        db = w.db
        assert db is not None
        had = self.model.has_pending(w.id)
        failed_before = db._error is not None
        out = self.attempt(step, db.close)
        if out.error is None and not failed_before:
            self._acked(w, had, step)
        w.state = "closed"
        self.model.forget(w.id)

    # ---- stalls ----------------------------------------------------------------------------
    def _stall(
        self,
        label: str,
        pause: tuple[str, str, str],
        fn: Callable[[], object],
        done: Callable[[Outcome], None],
    ) -> None:
        op, glob, when_s = pause
        when: When = "after" if when_s == "after" else "before"
        name = self.name("stall")
        self.note(f"  stall {label} at {when} {op} {glob}")
        parked = run_stalled(self.faulty, name, op, glob, when, fn)
        if isinstance(parked, Outcome):
            self.note("  (finished before reaching the pause)")
            done(parked)
            return
        point, thread, box = parked
        self.figures.pauses += 1
        self.stalls.append(Stalled(label, point, thread, box, done))

    def step_stall(self) -> None:
        kind = self.rng.choice(["writer", "writer", "compactor", "gc"])
        ns = self.rng.choice(["wal", "manifest", "compacted", "gc", "compactions"])
        op = self.rng.choice(["put_if_absent", "get", "list", "delete"])
        glob = f"{DB}/{ns}*" if op == "list" else f"{DB}/{ns}/*"
        pause = (op, glob, self.rng.choice(["before", "after"]))
        if kind == "writer":
            w = self.pick_writer()
            if w is None or w.db is None:
                return
            db = w.db
            what = self.rng.choice(["flush", "flush_memtable", "checkpoint", "put_durable"])
            if what == "put_durable":
                key = self.rng.choice(m.KEYS)
                issue = self.model.next()
                value = m.encode(issue, b"s")
                self.model.issue(w.id, [(key, value)])
                fn: Callable[[], object] = lambda: db.put(key, value)  # noqa: E731
            elif what == "flush":
                fn = db.flush
            elif what == "flush_memtable":
                fn = db.flush_memtable
            else:
                fn = lambda: db.create_checkpoint(CheckpointScope.ALL)  # noqa: E731
            had = self.model.has_pending(w.id)
            w.busy = True

            def done(out: Outcome, w: Writer = w, what: str = what, had: bool = had) -> None:
                w.busy = False
                self.outcome(f"stalled_{what}", out.error)
                if out.error is None:
                    self._acked(w, had, f"stalled {what}")
                    if what == "checkpoint":
                        self._checkpoint_made(out.value, m.Snapshot({}, 0), full=False,
                                              fresh=False)

            self._stall(f"w{w.id} ({w.state}) {what}", pause, fn, done)
        elif kind == "compactor":
            c = self._idle_compactor()
            if c is None:
                return
            c.busy = True

            def cdone(out: Outcome, c: CompactorActor = c) -> None:
                c.busy = False
                self._compacted(c, out, zombie_at_start=False)

            self._stall(f"compactor c{c.id}{' (zombie)' if c.zombie else ''}", pause,
                        c.compactor.run_once, cdone)
        else:
            gc = Collector(DB, self.faulty, self.gc_options, delete_concurrency=1)
            self._stall("gc", pause, gc.run, lambda out: self.outcome("stalled_gc", out.error))

    def step_resume(self) -> None:
        if not self.stalls:
            return
        s = self.stalls.pop(self.rng.randrange(len(self.stalls)))
        self.note(f"resume {s.label}")
        s.resume()

    # ---- compactor, GC ---------------------------------------------------------------------
    def _idle_compactor(self) -> CompactorActor | None:
        idle = [c for c in self.compactors if not c.busy]
        if not idle:
            return None
        fresh = [c for c in idle if not c.zombie]
        if fresh and self.rng.random() < 0.8:
            return fresh[-1]
        return self.rng.choice(idle)

    def step_compactor_start(self) -> None:
        self.note("start compactor")
        out = self.attempt(
            "compactor_start", lambda: Compactor(DB, self.faulty, self.compactor_options)
        )
        if out.error is None:
            assert isinstance(out.value, Compactor)
            for c in self.compactors:
                c.zombie = True
            self.compactors.append(CompactorActor(len(self.compactors) + 1, out.value))

    def _compacted(self, c: CompactorActor, out: Outcome, *, zombie_at_start: bool) -> None:
        """A pass begun by a fenced compactor must raise Fenced. (A stalled pass fenced midway
        may legitimately finish; that it commits nothing after the fence is the recorder's
        epochs-never-decrease rule.)"""
        self.outcome("compact", out.error)
        if out.error is None and zombie_at_start:
            raise InvariantViolation(f"zombie compactor c{c.id} finished a pass without Fenced")
        if isinstance(out.value, CompactionStats) and out.value.compactions:
            self._reported(c.compactor._session.manifest.stored.id, f"compactor c{c.id}")

    def step_compact(self) -> None:
        c = self._idle_compactor()
        if c is None:
            return
        self.note(f"compact c{c.id}{' (zombie)' if c.zombie else ''}")
        zombie = c.zombie
        try:
            out = Outcome(value=c.compactor.run_once())
        except SlateDBError as e:
            out = Outcome(error=e)
        self._compacted(c, out, zombie_at_start=zombie)

    def step_gc(self) -> None:
        self.note("gc")
        gc = Collector(DB, self.faulty, self.gc_options, delete_concurrency=1)
        self.attempt("gc", gc.run)

    # ---- checkpoints and readers -----------------------------------------------------------
    def _checkpoint_made(
        self, result: object, snap: m.Snapshot, *, full: bool, fresh: bool = True
    ) -> None:
        """``fresh``: the commit happened in this step (not before a stall), so it must still be
        above the boundary now; a checkpoint of the latest state pins its own commit."""
        cid = getattr(result, "id", None)
        assert isinstance(cid, uuid.UUID)
        if fresh:
            self._reported(getattr(result, "manifest_id", 0), f"checkpoint {cid}")
        self.checkpoints.append(CheckpointRec(cid, snap if full else None))

    def step_checkpoint(self) -> None:
        w = self.pick_writer()
        if w is not None and w.db is not None and self.rng.random() < 0.6:
            db = w.db
            self.note(f"checkpoint (ALL) by w{w.id} ({w.state})")
            out = self._durable(w, "checkpoint_all", lambda: db.create_checkpoint())
            if out.error is None:
                self._checkpoint_made(out.value, self.model.snapshot(), full=True)
            return
        self.note("checkpoint (admin, durable state)")
        lifetime = self.rng.choice([None, timedelta(hours=1)])
        out = self.attempt(
            "checkpoint_admin",
            lambda: create_checkpoint(DB, self.faulty, CheckpointOptions(lifetime=lifetime)),
        )
        if out.error is None:
            self._checkpoint_made(out.value, m.Snapshot({}, 0), full=False)

    def step_checkpoint_delete(self) -> None:
        live = [c for c in self.checkpoints if not c.deleted]
        if not live:
            return
        c = self.rng.choice(live)
        self.note(f"delete checkpoint {c.id}")
        c.delete_attempted = True
        out = self.attempt("checkpoint_delete", lambda: delete_checkpoint(DB, self.faulty, c.id))
        if out.error is None:
            c.deleted = True

    def _read_all(self, reader: DbReader) -> dict[bytes, bytes | None]:
        return dict(zip(m.ALL_KEYS, reader.get_many(list(m.ALL_KEYS)), strict=True))

    def _judge(self, state: dict[bytes, bytes | None], cp: CheckpointRec | None, where: str) -> None:
        self.figures.checks += 3
        m.check_bank(state, where)
        self.model.check_prefix(state, where)
        if cp is not None and cp.snapshot is not None:
            m.check_snapshot(state, cp.snapshot, where)

    def step_reader(self) -> None:
        if self.readers and self.rng.random() < 0.5:
            reader, cp = self.rng.choice(self.readers)
            self.note(f"re-read {reader!r}")
            if reader.mode is not ReaderMode.CHECKPOINT:
                if self.attempt("reader_refresh", reader.refresh).error is not None:
                    return
        else:
            cps = [c for c in self.checkpoints if not c.deleted]
            mode = self.rng.choice([ReaderMode.FOLLOW_LATEST, ReaderMode.MANAGED,
                                    ReaderMode.CHECKPOINT, ReaderMode.CHECKPOINT])
            cp = self.rng.choice(cps) if cps and mode is ReaderMode.CHECKPOINT else None
            if mode is ReaderMode.CHECKPOINT and cp is None:
                mode = ReaderMode.FOLLOW_LATEST
            opts = DbReaderOptions(manifest_poll_interval=LONG, checkpoint_lifetime=None, mode=mode)
            self.note(f"open reader {mode.name} {'' if cp is None else cp.id}")
            out = self.attempt(
                "reader_open",
                lambda: DbReader.open(DB, self.faulty, None if cp is None else cp.id, opts),
            )
            if out.error is not None:
                self._reader_error(out.error, cp)
                return
            assert isinstance(out.value, DbReader)
            reader = out.value
            self.readers.append((reader, cp))
        got = self.attempt("reader_read", lambda: self._read_all(reader))
        if got.error is not None:
            self._reader_error(got.error, cp)
            return
        state = got.value
        assert isinstance(state, dict)
        self._judge(state, cp, f"reader {reader!r}")

    def _reader_error(self, err: BaseException, cp: CheckpointRec | None) -> None:
        if isinstance(err, SstMissing) and cp is not None and not cp.deleted:
            raise InvariantViolation(f"checkpoint {cp.id} is live but its data is gone: {err}")

    # ---- clones, unions, destroy -----------------------------------------------------------
    def step_clone(self) -> None:
        unfinished = [c for c in self.clones if not c.finished and not c.destroyed]
        if unfinished and self.rng.random() < 0.5:
            c = self.rng.choice(unfinished)
            c.snapshot = None  # a resumed clone holds its first attempt's state
            self.note(f"resume clone {c.name}")
        else:
            cps = [x for x in self.checkpoints if not x.deleted]
            cp = self.rng.choice(cps) if cps and self.rng.random() < 0.4 else None
            proj = self.rng.choice([None, LOWER, UPPER, LOWER, UPPER])
            snap = self.model.snapshot() if cp is None else cp.snapshot
            c = CloneRec(self.name("clone"), proj, cp, snap)
            self.clones.append(c)
            self.note(f"clone {c.name} proj={proj} cp={None if cp is None else cp.id}")
        cid = None if c.checkpoint is None else c.checkpoint.id
        out = self.attempt(
            "clone", lambda: create_clone(c.name, DB, self.faulty, cid, c.projection)
        )
        if out.error is None:
            c.finished = True
            self._verify_clone(c)

    def _clone_state(self, path: str) -> dict[bytes, bytes | None]:
        opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
        with DbReader.open(path, self.rec, options=opts) as reader:
            return self._read_all(reader)

    def _verify_clone(self, c: CloneRec) -> None:
        state = self._clone_state(c.name)
        where = f"clone {c.name}"
        rng = c.projection or KeyRange()
        inside = [k for k in m.ALL_KEYS if rng.contains(k)]
        for k in m.ALL_KEYS:
            if k not in inside and state.get(k) is not None:
                raise InvariantViolation(f"{where}: {k!r} outside the projection {rng} is visible")
        self.figures.checks += 3
        m.check_bank(state, where)
        self.model.check_prefix(state, where, keys=inside)
        if c.snapshot is not None:
            snap = m.Snapshot({k: v for k, v in c.snapshot.acceptable.items() if k in inside}, 0)
            m.check_snapshot(state, snap, where)

    def step_union(self) -> None:
        ready = [c for c in self.clones if c.finished and not c.destroyed]
        lo = [c for c in ready if c.projection == LOWER]
        hi = [c for c in ready if c.projection == UPPER]
        if not lo or not hi:
            return
        a, b = self.rng.choice(lo), self.rng.choice(hi)
        self.note(f"union of {a.name} and {b.name}")
        for c in (a, b):  # union refuses sources with uncompacted WAL: flush each to L0
            def compact(c: CloneRec = c) -> None:
                db = SimDb.open_manual(c.name, self.faulty, self.options)
                try:
                    db.flush_memtable()
                finally:
                    db.close()

            if self.attempt("union_prepare", compact).error is not None:
                return
        expect = {**self._clone_state(b.name), **{k: v for k, v in self._clone_state(
            a.name).items() if LOWER.contains(k)}}
        name = self.name("union")
        self.unions.append(name)  # even if it fails: a half-made union is destroyed at the end
        out = self.attempt(
            "union",
            lambda: create_union(name, [UnionSource(a.name), UnionSource(b.name)], self.faulty),
        )
        if out.error is not None:
            return
        a.in_union = b.in_union = True
        got = self._clone_state(name)
        if got != expect:
            raise InvariantViolation(f"union {name} differs from its sources: {got} != {expect}")

    def step_destroy_clone(self) -> None:
        ready = [c for c in self.clones if c.finished and not c.destroyed and not c.in_union]
        if not ready:
            return
        c = self.rng.choice(ready)
        self.note(f"soft-destroy {c.name} and collect it")
        c.destroyed = True  # even if the call raised: it may have taken effect
        if self.attempt("destroy_clone", lambda: destroy(c.name, self.faulty)).error is None:
            gc = Collector(c.name, self.faulty, self.gc_options, delete_concurrency=1)
            self.attempt("gc_clone", gc.run)

    # ---- checks after every step -----------------------------------------------------------
    def verify_latest(self, *, final: bool = False) -> None:
        new = self.rec.check()
        if new or self.rec.violations:
            raise InvariantViolation("; ".join(self.rec.violations))
        if self.destroyed or not self.writers:
            return
        if self.verify_reader is None:
            opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
            try:
                self.verify_reader = DbReader.open(DB, self.rec, options=opts)
            except DatabaseNotFound:
                return
        try:
            self.verify_reader.refresh()
            state = self._read_all(self.verify_reader)
        except SstMissing as e:
            if not final:
                # A writer committed an L0 SST that a GC pass collected between its upload and
                # the commit, and has not re-homed it yet (parked, or its boundary read failed):
                # readers of the latest state fail until it does. Tolerated mid-schedule,
                # counted, and checked strictly once every stall is over and a writer reopened.
                self.figures.outcomes["verify:transient_sst_missing"] += 1
                return
            raise InvariantViolation(f"latest state unreadable: {e}") from e
        self.figures.checks += 4
        m.check_bank(state, "latest state")
        self.model.check_prefix(state, "latest state")
        self.model.check_durable(state, "latest state")

    # ---- the schedule ----------------------------------------------------------------------
    def steps(self) -> dict[str, tuple[int, Callable[[], None]]]:
        sw = self.config.stall_weight
        return {
            "open_writer": (4, self.step_open_writer),
            "put": (10, lambda: self.step_put(False)),
            "put_durable": (8, lambda: self.step_put(True)),
            "delete": (2, self.step_delete),
            "transfer": (8, self.step_transfer),
            "flush": (8, self.step_flush),
            "wal_pipeline": (12 if self.options.max_parallel_writes > 1 else 0,
                             self.step_wal_pipeline),
            "bulk_ingest": (2, self.step_bulk_ingest),
            "refresh": (2, self.step_refresh),
            "crash": (2, self.step_crash),
            "close": (1, self.step_close),
            "stall": (sw, self.step_stall),
            "resume": (sw if self.stalls else 0, self.step_resume),
            "compactor_start": (2, self.step_compactor_start),
            "compact": (4, self.step_compact),
            "gc": (5, self.step_gc),
            "checkpoint": (3, self.step_checkpoint),
            "checkpoint_delete": (2, self.step_checkpoint_delete),
            "reader": (4, self.step_reader),
            "clone": (2, self.step_clone),
            "union": (3, self.step_union),
            "destroy_clone": (1, self.step_destroy_clone),
        }

    def run(self) -> Figures:
        started = time.monotonic()
        try:
            self.note(f"seed {self.seed}: {self.config}")
            self.step_open_writer()
            self.verify_latest()
            for _ in range(self.config.steps):
                table = self.steps()
                names = [n for n, (wt, _) in table.items() if wt > 0]
                name = self.rng.choices(names, [table[n][0] for n in names])[0]
                table[name][1]()
                self.figures.steps += 1
                self.verify_latest()
            self.finish()
        except InvariantViolation as e:
            repro = REPRO.format(seed=self.seed) + (" --two-phase" if self.two_phase else "")
            raise InvariantViolation(f"{repro}  # {e}") from e
        finally:
            self.cleanup()
            if self.two_phase is not None:
                self.two_phase.close()
                txn_file = getattr(self.two_phase.txn, "path", None)
                if txn_file is not None:
                    shutil.rmtree(txn_file.parent, ignore_errors=True)
            self.figures.seconds = time.monotonic() - started
            self.figures.faults = sum(
                1 for kind, _, _ in self.faulty.events if kind.startswith("fail_")
            )
            self.figures.requests = self.faulty.counters.total()
            self.figures.checks += self.rec.checks + self.model.checks
        return self.figures

    # ---- the end of a schedule -------------------------------------------------------------
    def finish(self) -> None:
        self.note("finish: resume every stall, stop faults")
        while self.stalls:
            self.stalls.pop(0).resume()
        self.faulty.clear_rules()
        if self.two_phase is not None:
            self.two_phase.inner.clear_rules()  # type: ignore[attr-defined]
            self.two_phase.txn.clear_rules()  # type: ignore[attr-defined]
        self.verify_latest()
        for w in self.idle_writers():  # zombies must not acknowledge anything new
            if w.state != "zombie" or w.db is None:
                continue
            db = w.db
            issue = self.model.next()
            key = self.rng.choice(m.KEYS)
            value = m.encode(issue, b"z")
            self.model.issue(w.id, [(key, value)])
            self.note(f"zombie w{w.id} writes {key!r} #{issue}")
            self._durable(w, "zombie_put", functools.partial(db.put, key, value))
        if self.writers:
            self._final_writer()
        self._final_maintenance()
        self._end_of_life()

    def _final_writer(self) -> None:
        live = self.live()
        if live is not None and live.db is not None:
            self._close(live, "final_close")
        w = Writer(len(self.writers) + 1)
        self.writers.append(w)
        self.note(f"final writer w{w.id}")
        try:
            db = SimDb.open_manual(DB, self.faulty, self.options)
        except DatabaseNotFound:
            if any(x.db is not None for x in self.writers):
                raise
            return  # no writer ever opened successfully
        self._opened(w, Outcome(value=db))
        state = dict(zip(m.ALL_KEYS, db.get_many(list(m.ALL_KEYS)), strict=True))
        self.figures.checks += 3
        m.check_bank(state, "final writer")
        self.model.check_prefix(state, "final writer")
        self.model.check_durable(state, "final writer")
        self._durable(w, "final_flush", db.flush_memtable)
        db.close()
        w.state = "closed"

    def _final_maintenance(self) -> None:
        if not self.writers or self.verify_reader is None:
            return
        Compactor(DB, self.faulty, self.compactor_options).run_once()
        for _ in range(2):
            Collector(DB, self.faulty, self.gc_options, delete_concurrency=1).run()
        self.verify_latest(final=True)
        for cp in self.checkpoints:
            if cp.deleted:
                continue
            opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.CHECKPOINT)
            try:
                with DbReader.open(DB, self.rec, cp.id, opts) as reader:
                    state = self._read_all(reader)
            except CheckpointNotFound:
                if cp.delete_attempted:
                    continue  # the delete raised after it took effect
                raise
            except SstMissing as e:
                raise InvariantViolation(f"checkpoint {cp.id} lost data after GC: {e}") from e
            self._judge(state, cp, f"checkpoint {cp.id} after GC")
        for c in self.clones:
            if c.finished and not c.destroyed:
                self._verify_clone(c)

    def _end_of_life(self) -> None:
        for reader, _ in self.readers:
            self.attempt("reader_close", reader.close)
        self.readers.clear()
        if self.config.end == "none" or not self.writers or self.verify_reader is None:
            return
        if self.config.end == "soft":
            self.note("soft destroy")
            destroy(DB, self.faulty)
            self.destroyed = True
            for w in self.writers:
                if w.state == "live":
                    w.state = "zombie"
            try:
                SimDb.open_manual(DB, self.faulty, self.options)
            except DatabaseDestroyed:
                self.outcome("open_destroyed", None)
            else:
                raise InvariantViolation("a writer opened a soft-destroyed database")
            return
        self.note("hard destroy of unions, clones, then the database")
        names = [*self.unions, *(c.name for c in self.clones if not c.destroyed), DB]
        for name in names:
            # Hard destroy refuses while checkpoints are active: drop what is left (ours whose
            # create or delete raised after taking effect, ephemeral ones of failed clones and
            # unions); the final checkpoints of clones and unions went with them.
            try:
                for cp in list_checkpoints(name, self.faulty):
                    if cp.writer_epoch is None:
                        delete_checkpoint(name, self.faulty, cp.id)
            except DatabaseNotFound:
                continue
            self.rec.released.add(name)
            try:
                destroy(name, self.faulty, soft=False)
            except DatabaseNotFound:
                continue
            left = [p for p in self.rec.paths_under(name)]
            if left:
                raise InvariantViolation(f"hard destroy of {name} left {left[:5]}")
        self.destroyed = True

    def cleanup(self) -> None:
        self.faulty.release_all()
        for s in self.stalls:
            s.thread.join(5)
        for reader, _ in self.readers:
            try:
                reader.close()
            except SlateDBError:
                pass
        if self.verify_reader is not None:
            try:
                self.verify_reader.close()
            except SlateDBError:
                pass


def run_schedule(
    seed: int, *, trace: Callable[[str], None] | None = None, two_phase: bool = False
) -> Figures:
    """Run one schedule; raises InvariantViolation (message starts with the repro command).
    ``two_phase``: over two-phase CAS (SQLite) on a store without conditional writes."""
    return Simulation(seed, trace=trace, two_phase=two_phase).run()
