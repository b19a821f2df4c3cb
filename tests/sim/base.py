"""The core of a schedule: its stores, options and records, the helpers every actor uses, and
the checks after every step (:meth:`SimBase.verify_latest`). The actors are mixins built on it,
one module each, chained in this order: writers, maintenance (compactor, GC, checkpoints,
readers), stalls, clones, destroy, damage, ending; :mod:`tests.sim.harness` puts them together.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

from slatedb_core.errors import DatabaseNotFound, Fenced, InvalidArgument, SlateDBError
from slatedb_core.options import (
    CompactorOptions,
    DbOptions,
    DbReaderOptions,
    GarbageCollectorOptions,
    ReaderMode,
)
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import OPS, ObjectStore
from slatedb_core.store.twophase import TwoPhaseStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultRule, FaultyStore, When
from tests.sim import model as m
from tests.sim.actors import Outcome, Stalled, run_stalled
from tests.sim.recorder import InvariantViolation, RecordingStore
from tests.sim.state import (
    DB,
    LONG,
    CheckpointRec,
    CloneRec,
    CompactorActor,
    Config,
    Figures,
    Profile,
    Writer,
)
from tests.sim.txnfaults import FaultySqliteTxnStore

ACKNOWLEDGING = frozenset(
    {
        "put_durable",
        "delete",
        "transfer",
        "flush",
        "flush_memtable",
        "bulk_ingest",
        "checkpoint",
        "checkpoint_all",
        "close",
        "zombie_put",
        "bank_open",
    }
)
"""Writer operations whose success acknowledges writes (or a commit) to their caller."""

VALID_INPUT = frozenset(
    {
        "bulk_ingest",
        "checkpoint_admin",
        "checkpoint_all",
        "checkpoint_delete",
        "checkpoint",
        "reader_open",
        "flush",
        "flush_memtable",
        "put",
        "put_durable",
        "delete",
        "transfer",
    }
)
"""Steps the schedule only ever gives valid input: ``InvalidArgument`` from one of them is an
engine bug (RELIABILITY.md, review finding 3: a bulk ingest whose commit GC passed re-applied it on a manifest
that already listed its SST, and raised ``manifest lists SST ... twice``)."""


CROSS_PARK_S = 2.0
"""How long a resumed operation may run before it is taken as parked at another stall's point."""


class SimBase:
    """Stores, options and records of one schedule (see :mod:`tests.sim.harness`)."""

    def __init__(
        self, seed: int, *, trace: Callable[[str], None] | None = None, two_phase: bool = False
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = Config.of(self.rng)
        self.profile = Profile.of(seed)
        rate = self.config.fault_rate
        self.two_phase: TwoPhaseStore | None = None
        self.raw: ObjectStore = open_store("memory://")
        self.mem: ObjectStore = self.raw
        if two_phase:
            # A store that ignores If-None-Match / If-Match, made whole by two-phase CAS over
            # SQLite. Its own PUTs (temporary, copy) and DELETEs fail too, from a second fault
            # layer under the protocol; not its reads, which the fault-free judges go through,
            # and DELETEs only before taking effect: the recorder sits above the protocol and
            # would take a delete that raised after taking effect for one that did nothing.
            rules = (
                [
                    FaultRule("put", fail_before=rate / 2, fail_after=rate / 2),
                    FaultRule("delete", fail_before=rate / 2),
                ]
                if rate
                else []
            )
            self._under = FaultyStore(NoConditionalWrites(self.mem), seed=seed + 1, rules=rules)
            self._under_rules = rules
            txn_dir = Path(tempfile.mkdtemp(prefix="slatedb-sim-txn-"))
            self._txn = FaultySqliteTxnStore(txn_dir / "txn.db", seed=seed + 2, rate=0.0)
            self.two_phase = TwoPhaseStore(self._under, self._txn)
            self._txn.set_rate(rate)  # after the store's own setup (it writes a marker row)
            self.mem = self.two_phase
        self.rec = RecordingStore(self.mem)
        rules = [FaultRule(fail_before=rate / 2, fail_after=rate / 2)] if rate else []
        if rate:
            rules.insert(
                0, FaultRule("put_if_absent", f"{DB}/manifest/*", latency_s=(0, 2e-4), max_hits=3)
            )
        self._rules = rules
        self.faulty = FaultyStore(self.rec, seed=seed, rules=rules, pause_timeout_s=60)
        self.faults_on = True
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
        """The database was destroyed (mid-schedule by tests.sim.destroy_actors, or at the end)."""
        self.dropped: set[uuid.UUID] = set()
        """Ids of checkpoints the destroy actor deleted (one may belong to a stalled create that
        reports success later)."""
        self.damaged = False
        """Objects of the database were damaged at rest (tests.sim.damage): from then on a read
        may raise a typed error, but one that returns must still show every acked write."""
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
            # SlateDB RFC 0001's parallel WAL writes; its own generator, so the rest of a schedule stays
            # what it was before this knob existed
            max_parallel_writes=random.Random(seed * 7919 + 13).choice((1, 1, 2, 4)),
        )
        self.figures.outcomes[f"parallel_writes:{self.options.max_parallel_writes}"] += 1
        self.figures.outcomes[
            f"profile:destroy={self.profile.destroy},damage={self.profile.damage}"
        ] += 1
        self.compactor_options = CompactorOptions(
            poll_interval=LONG,
            l0_trigger=2,
            min_merge_width=2,
            max_sst_size_bytes=2048,
            block_size=512,
        )
        self.gc_options = GarbageCollectorOptions(
            min_age=timedelta(0), db_delete_grace=timedelta(0)
        )

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
        since = self.rec.mark()
        try:
            out = Outcome(value=fn())
        except SlateDBError as e:
            out = Outcome(error=e)
        self.outcome(step, out.error)
        self.judge_outcome(step, out, threading.current_thread().name, since)
        return out

    def judge_outcome(self, step: str, out: Outcome, thread: str, since: int) -> None:
        """Rules about any operation's outcome: no ``InvalidArgument`` for valid input, and no
        success for an operation that committed into the emptied path of a destroyed database
        (RELIABILITY.md, review finding 1: a stalled writer brought it back to life)."""
        base = step.removeprefix("stalled_")
        if isinstance(out.error, InvalidArgument) and base in VALID_INPUT:
            raise InvariantViolation(
                f"{step} raised InvalidArgument on valid input (a committed change applied "
                f"again?): {out.error}"
            )
        if out.error is None and step != "wal_land":  # landing a create acknowledges nothing
            reads = base in ACKNOWLEDGING  # a writer's check of a boundary there must fail it
            late = self.rec.late_creates(DB, thread=thread, since=since, reads=reads)
            if late:
                did = "reading" if "/gc/" in late[0] else "creating"
                raise InvariantViolation(
                    f"{step} reported success after {did} {late[0]} in the destroyed and "
                    f"collected database {DB!r}: the path came back to life"
                )

    def live(self) -> Writer | None:
        for w in reversed(self.writers):
            if w.state == "live":
                return w
        return None

    def idle_writers(self) -> list[Writer]:
        return [
            w
            for w in self.writers
            if w.db is not None and not w.busy and w.state in ("live", "zombie")
        ]

    def pick_writer(self) -> Writer | None:
        idle = self.idle_writers()
        if not idle:
            return None
        live = [w for w in idle if w.state == "live"]
        if live and self.rng.random() < 0.85:
            return live[0]
        return self.rng.choice(idle)

    def value(self, size: int) -> bytes:
        return b"x" * size

    def _reported(self, mid: int, what: str) -> None:
        """A commit reported successful just now is above the manifest boundary."""
        boundary = self.rec.boundary(DB, "manifest")
        self.figures.checks += 1
        if mid <= boundary:
            raise InvariantViolation(
                f"{what} reported manifest {mid} committed, at or behind the boundary {boundary}"
            )

    def _read_all(self, reader: DbReader) -> dict[bytes, bytes | None]:
        return dict(zip(m.ALL_KEYS, reader.get_many(list(m.ALL_KEYS)), strict=True))

    def _judge(
        self, state: dict[bytes, bytes | None], cp: CheckpointRec | None, where: str
    ) -> None:
        self.figures.checks += 3
        m.check_bank(state, where)
        self.model.check_prefix(state, where)
        if cp is not None and cp.snapshot is not None:
            m.check_snapshot(state, cp.snapshot, where)

    def stop_faults(self) -> None:
        self.faults_on = False
        self.faulty.clear_rules()
        if self.two_phase is not None:
            self._under.clear_rules()
            self._txn.clear_rules()

    @contextlib.contextmanager
    def deletes_without_faults(self) -> Iterator[None]:
        """For ``destroy(soft=False)``, which deletes from 16 threads: their draws from the fault
        generators would come in no fixed order, and a seed must replay. Meanwhile deletes (and,
        over two-phase CAS, every request under the protocol) run without faults; the other
        requests, made one at a time, keep them."""
        rate = self.config.fault_rate
        if not self.faults_on or not rate:
            yield
            return
        self.faulty.clear_rules()
        for op in OPS:
            if op != "delete":
                self.faulty.add_rule(FaultRule(op, fail_before=rate / 2, fail_after=rate / 2))
        if self.two_phase is not None:
            self._under.clear_rules()
            self._txn.clear_rules()
        try:
            yield
        finally:
            self.faulty.clear_rules()
            for rule in self._rules:
                self.faulty.add_rule(rule)
            if self.two_phase is not None:
                for rule in self._under_rules:
                    self._under.add_rule(rule)
                self._txn.set_rate(rate)

    # ---- stalled operations ----------------------------------------------------------------
    def _stall(
        self,
        label: str,
        pause: tuple[str, str, str],
        fn: Callable[[], object],
        done: Callable[[Outcome], None],
        step: str = "stalled",
    ) -> None:
        """Run ``fn`` until it reaches ``pause`` (op, glob, before/after) and park it there; its
        outcome goes through :meth:`judge_outcome` (as ``step``), then to ``done``."""
        op, glob, when_s = pause
        when: When = "after" if when_s == "after" else "before"
        name = self.name("stall")
        self.note(f"  stall {label} at {when} {op} {glob}")

        def judged(out: Outcome) -> None:
            self.judge_outcome(step, out, f"sim-{name}", 0)
            done(out)

        parked = run_stalled(self.faulty, name, op, glob, when, fn)
        if isinstance(parked, Outcome):
            self.note("  (finished before reaching the pause)")
            judged(parked)
            return
        point, thread, box = parked
        self.figures.pauses += 1
        self.figures.outcomes[f"pause:{when} {op} {glob}"] += 1
        self.stalls.append(Stalled(label, point, thread, box, judged, extra={"pause": pause}))

    def resume_stall(self, s: Stalled, to: tuple[str, str, str] | None = None) -> None:
        """Let ``s`` go on; with ``to``, only up to that next pause point, where it parks again
        if it gets there (an SST uploaded, then its manifest created, then its boundary check:
        each a moment other actors may act in)."""
        if to is not None:
            op, glob, when_s = to
            when: When = "after" if when_s == "after" else "before"
            if s.run_to(self.faulty, self.name("stall"), op, glob, when):
                self.note(f"  {s.label} parked again at {when} {op} {glob}")
                s.extra["pause"] = to
                self.figures.outcomes[f"pause:{when} {op} {glob}"] += 1
                self.figures.pauses += 1
                self.stalls.append(s)
                return
            self.note("  (finished before reaching the next pause)")
        s.resume()

    def resume_all(self) -> None:
        """Resume every stalled operation, in order. An operation's helper threads (a reader's
        parallel WAL fetches) can park at a later stall's pause point: one still running a while
        after its own release gets every point released, instead of waiting for ever on a
        point that would be released only after it."""
        while self.stalls:
            s = self.stalls.pop(0)
            s.point.release()
            s.thread.join(CROSS_PARK_S)
            if s.thread.is_alive():
                self.faulty.release_all()
            s.resume()

    # ---- checks after every step -----------------------------------------------------------
    def verify_latest(self, *, final: bool = False) -> None:
        new = self.rec.check()
        if new or self.rec.violations:
            raise InvariantViolation("; ".join(self.rec.violations))
        dangling = self.rec.dangling(DB)
        self.figures.checks += 1
        if dangling:
            # No tolerance, not even for a moment: a checkpoint taken then keeps the missing
            # SST forever (RELIABILITY.md, review finding 2; GC commits a barrier before it deletes anything).
            raise InvariantViolation("; ".join(dangling))
        if self.destroyed:
            self._check_not_resurrected()
            return
        if not self.writers:
            return
        if self.verify_reader is None:
            opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
            try:
                self.verify_reader = DbReader.open(DB, self.rec, options=opts)
            except SlateDBError as e:
                if self.damaged or isinstance(e, DatabaseNotFound):
                    self.figures.outcomes[f"verify_open:{type(e).__name__}"] += 1
                    return
                raise InvariantViolation(f"latest state unreadable: {e!r}") from e
        try:
            self.verify_reader.refresh()
            state = self._read_all(self.verify_reader)
        except SlateDBError as e:
            if self.damaged:
                # a typed error for data damaged at rest is an answer; an older value is not
                self.figures.outcomes[f"verify:{type(e).__name__}_after_damage"] += 1
                return
            raise InvariantViolation(f"latest state unreadable: {e!r}") from e
        self.figures.checks += 4
        where = "latest state" + (" (after damage at rest)" if self.damaged else "")
        m.check_bank(state, where)
        self.model.check_prefix(state, where)
        self.model.check_durable(state, where)

    def _check_not_resurrected(self) -> None:
        """While the database is destroyed, no fresh reader opens it (RELIABILITY.md, review finding 1). Which
        error it raises is judged at the end, once every stalled operation has finished."""
        opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
        try:
            reader = DbReader.open(DB, self.rec, options=opts)
        except SlateDBError as e:
            self.figures.outcomes[f"destroyed_reader:{type(e).__name__}"] += 1
            return
        try:
            state: object = self._read_all(reader)
        except SlateDBError as e:
            state = e
        finally:
            reader.close()
        latest = self.rec.latest_manifest(DB)
        raise InvariantViolation(
            f"destroyed database {DB!r} came back: a fresh reader opened it at manifest "
            f"{None if latest is None else latest[0]} and reads {state}"
        )

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
        if self.two_phase is not None:
            self.two_phase.close()
            txn_file = getattr(self.two_phase.txn, "path", None)
            if txn_file is not None:
                shutil.rmtree(txn_file.parent, ignore_errors=True)
