"""Writer actors: writers opened on one path (the newest fences the others, which keep trying
as zombies), their puts, deletes, bank transfers, bulk ingests, flushes, parallel WAL writes,
manifest refreshes, crashes and closes (see :mod:`tests.sim.harness`)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from slatedb_core.errors import SlateDBError
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.sim import model as m
from tests.sim.actors import Outcome, SimWindow, open_manual, steps
from tests.sim.base import SimBase
from tests.sim.recorder import InvariantViolation
from tests.sim.state import DB, Writer


class WriterSteps(SimBase):
    def _opened(self, w: Writer, out: Outcome) -> None:
        if out.error is not None:
            w.state = "failed"
            self.outcome("open", out.error)
            return
        db = out.value
        assert isinstance(db, Db)
        w.db = db
        w.epoch = db.writer_epoch
        w.opened_issue = issue = self.model.next()
        if self.destroyed:
            # an open stalled through the destroy that then succeeded: it may acknowledge nothing
            w.state, w.fenced_after_issue, w.fenced_by = "zombie", issue, "the destroy"
            self.outcome("open_after_destroy", None)
            return
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
        if self.destroyed:
            return  # the final writer tries, once every stalled operation has finished
        w = Writer(len(self.writers) + 1)
        self.writers.append(w)
        self.note(f"open writer w{w.id}")

        def fn() -> Db:
            return open_manual(DB, self.faulty, self.options)

        if self.config.stall_weight and self.rng.random() < 0.3:
            pause = self.rng.choice(
                [
                    ("put_if_absent", f"{DB}/manifest/*", "after"),
                    ("put_if_absent", f"{DB}/wal/*", "before"),
                    ("list", f"{DB}/wal", "before"),
                ]
            )
            self._stall(
                f"open w{w.id}", pause, fn, lambda out: self._opened(w, out), "stalled_open"
            )
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
            newest = [
                x for x in self.model.pending.get(w.id, []) if x.issue >= w.fenced_after_issue
            ]
            if newest:
                raise InvariantViolation(
                    f"zombie writer w{w.id} acknowledged write #{newest[0].issue} issued after "
                    f"{w.fenced_by} fenced it (step {step})"
                )
        self.model.ack(w.id)

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
        table = pa.table(
            {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
        )
        before = steps(db).manifest_id()
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
            before = steps(db).manifest_id()
            if self._durable(w, kind, db.flush_memtable).error is None:
                self._check_reported(db, before)
        else:  # what the L0 flusher thread would do for memtables frozen by size
            self.attempt(kind, steps(db).flush_memtables)

    def _check_reported(self, db: Db, before: int) -> None:
        """A manifest the writer just committed must be above the manifest boundary."""
        mid = steps(db).manifest_id()
        if mid != before:  # else nothing to flush, nothing committed
            self._reported(mid, "writer's memtable flush")

    def step_wal_pipeline(self) -> None:
        """Parallel WAL writes: a write that goes to the writer's window without waiting for it,
        or one create in flight landing (in a seeded order), so later SSTs land first and holes
        stay open while other actors (readers, new writers, GC, a crash) act."""
        w = self.pick_writer()
        if w is None or w.db is None or not isinstance(steps(w.db).flusher.window, SimWindow):
            return
        db, flusher = w.db, steps(w.db).flusher
        window = flusher.window
        assert isinstance(window, SimWindow)
        if window.queue and self.rng.random() < 0.4:
            self.note(f"wal_land w{w.id} ({w.state}), {len(window.queue)} in flight")
            self.attempt("wal_land", window.run_one)
            return
        key = self.rng.choice(m.KEYS)
        issue = self.model.next()
        value = m.encode(issue, self.value(self.rng.randint(1, 300)))
        self.note(
            f"wal_dispatch w{w.id} ({w.state}) {key!r} #{issue}, {len(window.queue)} in flight"
        )
        self.model.issue(w.id, [(key, value)])
        if self.attempt("put", lambda: db.put(key, value, await_durable=False)).error is None:
            self.attempt("wal_dispatch", lambda: flusher.dispatch(window.size))

    def step_refresh(self) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        self.note(f"refresh w{w.id} ({w.state})")
        self.attempt("refresh", steps(w.db).refresh)

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
        failed_before = steps(db).flusher.error
        out = self.attempt(step, db.close)
        if out.error is None and failed_before is not None:
            # RELIABILITY.md, review finding 8: a fenced writer's close dropped its buffered writes silently
            raise InvariantViolation(
                f"close of w{w.id} returned normally though the writer had failed "
                f"({failed_before!r}): what it buffered was dropped without a word"
            )
        if out.error is None:
            self._acked(w, had, step)
        w.state = "closed"
        self.model.forget(w.id)
