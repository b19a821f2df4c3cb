"""The end of a schedule: every stall is released, faults stop, zombies try once more, and a final
writer, compaction, GC, checkpoint readers and clone readers check again; then the databases may
be destroyed (soft, or hard with an emptiness check). A database destroyed mid-schedule ends in
:meth:`~tests.sim.destroy_actors.DestroySteps.final_destroyed` instead; one damaged at rest may
answer with typed errors throughout (:mod:`tests.sim.damage`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from slatedb_core.checkpoints import delete_checkpoint, list_checkpoints
from slatedb_core.compactor import Compactor
from slatedb_core.errors import (
    CheckpointNotFound,
    DatabaseDestroyed,
    DatabaseNotFound,
    SlateDBError,
    SstMissing,
)
from slatedb_core.gc.collector import Collector
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from tests.sim import model as m
from tests.sim.actors import Outcome, open_manual
from tests.sim.damage import DamageSteps
from tests.sim.recorder import BOUNDARY, InvariantViolation
from tests.sim.state import DB, LONG, Writer


class EndingSteps(DamageSteps):
    def finish(self) -> None:
        self.note("finish: resume every stall, stop faults")
        self.resume_all()
        self.stop_faults()
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
        if self.destroyed:
            self.final_destroyed()
        elif self.writers:
            self._final_writer()
            self._final_maintenance()
        self._end_of_life()

    def _must(self, step: str, fn: Callable[[], object]) -> Outcome:
        """With faults off, ``fn`` must succeed, unless the database was damaged at rest: then a
        typed error is an answer too."""
        out = self.attempt(step, fn)
        if out.error is not None and not self.damaged:
            raise InvariantViolation(f"{step} failed with faults off: {out.error!r}")
        return out

    def _final_writer(self) -> None:
        live = self.live()
        if live is not None and live.db is not None:
            self._close(live, "final_close")
        w = Writer(len(self.writers) + 1)
        self.writers.append(w)
        self.note(f"final writer w{w.id}")
        try:
            db = open_manual(DB, self.faulty, self.options)
        except DatabaseNotFound:
            if any(x.db is not None for x in self.writers):
                raise
            return  # no writer ever opened successfully
        except SlateDBError as e:
            if not self.damaged:
                raise
            self.outcome("final_open", e)
            return
        self._opened(w, Outcome(value=db))
        got = self._must("final_read", lambda: db.get_many(list(m.ALL_KEYS)))
        if got.error is None:
            assert isinstance(got.value, list)
            state = dict(zip(m.ALL_KEYS, got.value, strict=True))
            self.figures.checks += 3
            m.check_bank(state, "final writer")
            self.model.check_prefix(state, "final writer")
            self.model.check_durable(state, "final writer")
        self._durable(w, "final_flush", db.flush_memtable)
        self._must("final_writer_close", db.close)
        w.state = "closed"

    def _final_maintenance(self) -> None:
        if not self.writers or self.verify_reader is None:
            return
        self._must(
            "final_compact", lambda: Compactor(DB, self.faulty, self.compactor_options).run_once()
        )
        for _ in range(2):
            self._must(
                "final_gc", Collector(DB, self.faulty, self.gc_options, delete_concurrency=1).run
            )
        self.verify_latest(final=True)
        for cp in self.checkpoints:
            if cp.deleted:
                continue
            opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.CHECKPOINT)
            try:
                with DbReader.open(DB, self.rec, cp.id, opts) as reader:
                    state = self._read_all(reader)
            except CheckpointNotFound as e:
                if cp.delete_attempted:
                    continue  # the delete raised after it took effect
                raise InvariantViolation(f"checkpoint {cp.id} vanished: {e}") from e
            except SstMissing as e:
                if cp.delete_attempted or self.damaged:
                    continue
                raise InvariantViolation(f"checkpoint {cp.id} lost data after GC: {e}") from e
            except SlateDBError as e:
                if not self.damaged:
                    raise
                self.outcome("final_checkpoint_read", e)
                continue
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
            if self._must("destroy_soft", lambda: destroy(DB, self.faulty)).error is not None:
                return
            self.destroyed = True
            for w in self.writers:
                if w.state == "live":
                    w.state = "zombie"
            try:
                open_manual(DB, self.faulty, self.options)
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
            except SlateDBError as e:
                if not self.damaged:
                    raise
                self.outcome("hard_destroy_checkpoints", e)
                continue
            self.rec.released.add(name)
            try:
                destroy(name, self.faulty, soft=False)
            except DatabaseNotFound:
                continue
            except SlateDBError as e:
                if not self.damaged:
                    raise
                self.outcome("hard_destroy", e)
                continue
            # the gc/*.boundary files stay, as the tombstone (RELIABILITY.md, review finding 1)
            left = [p for p in self.rec.paths_under(name) if not BOUNDARY.match(p)]
            if left:
                raise InvariantViolation(f"hard destroy of {name} left {left[:5]}")
            self.check_stays_destroyed(name)
        self.destroyed = True
