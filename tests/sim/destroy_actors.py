"""Destroying the database in the middle of a schedule (RELIABILITY.md, review finding 1), in schedules whose
:class:`~tests.sim.state.Profile` says so: soft destroy (then GC at ``db_delete_grace`` 0
collects it once its checkpoints are gone) or hard destroy, while writers, compactors and GC
passes may be stalled anywhere, e.g. a durable put before its WAL create or between the create
and its boundary check, a memtable flush between its SST upload and its manifest commit.

What must hold, and where it is judged:

* no operation that committed into the emptied path reports success
  (:meth:`~tests.sim.base.SimBase.judge_outcome`, for every step and every resumed stall);
* nothing a writer issues after the destroy is acknowledged (``Writer.fenced_after_issue``);
* no fresh reader opens the path while it is destroyed
  (:meth:`~tests.sim.base.SimBase._check_not_resurrected`, after every step);
* live checkpoints of a soft-destroyed database stay readable until deleted, and GC collects
  it once they are gone (:meth:`DestroySteps.final_destroyed`);
* at the end, with every stall over, ``Db.open`` and ``DbReader.open`` of the path raise
  ``DatabaseDestroyed``: the path remembers it was destroyed and never comes back by itself
  (:meth:`DestroySteps.check_stays_destroyed`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from slatedb_core.checkpoints import delete_checkpoint, list_checkpoints
from slatedb_core.errors import CheckpointNotFound, DatabaseDestroyed, SlateDBError, SstMissing
from slatedb_core.gc.collector import Collector
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.writer.db import Db
from tests.sim.actors import open_manual
from tests.sim.clones import CloneSteps
from tests.sim.recorder import InvariantViolation
from tests.sim.state import DB, LONG


class DestroySteps(CloneSteps):
    def step_destroy(self) -> None:
        if self.destroyed:
            return
        hard = self.profile.destroy == "hard"
        collect = hard or self.rng.random() < 0.75
        self.note(f"{'hard' if hard else 'soft'} destroy{' and collect' if collect else ''}")
        if collect:
            self.drop_checkpoints()
        with self.deletes_without_faults():
            out = self.attempt(
                f"destroy_{'hard' if hard else 'soft'}",
                lambda: destroy(DB, self.faulty, soft=not hard),
            )
        if not self.rec.dbs[DB].destroyed:
            return  # it raised before taking effect: the schedule goes on, and may try again
        self._now_destroyed(fences=not hard or out.error is None)
        if collect and not hard:
            gc = Collector(DB, self.faulty, self.gc_options, delete_concurrency=1)
            self.attempt("gc_destroyed", gc.run)

    def _now_destroyed(self, *, fences: bool) -> None:
        """From now on the database is gone. A soft destroy fences the writers (epoch bump and
        WAL fence) before it marks the database destroyed, and a hard destroy that returned has
        written the tombstone and deleted everything: either way nothing issued from now on may
        be acknowledged. (A hard destroy that raised midway fences nothing: it is the caller's
        job to stop writers first; what lands after collection is judged by judge_outcome.)"""
        self.destroyed = True
        issue = self.model.next()
        for w in self.writers:
            if w.state == "live":
                w.state = "zombie"
            if fences and w.fenced_after_issue is None:
                w.fenced_after_issue, w.fenced_by = issue, "the destroy"
        if self.verify_reader is not None:
            self.attempt("reader_close", self.verify_reader.close)
            self.verify_reader = None

    def drop_checkpoints(self) -> None:
        """Delete every checkpoint but the writers' (ours, managed readers'): GC collects a
        destroyed database only once none is left, and hard destroy refuses until then."""
        out = self.attempt("list_checkpoints", lambda: list_checkpoints(DB, self.faulty))
        if out.error is not None:
            return
        assert isinstance(out.value, list)
        ours = {c.id: c for c in self.checkpoints}
        for cp in out.value:
            if cp.writer_epoch is not None:
                continue
            self.dropped.add(cp.id)
            rec = ours.get(cp.id)
            if rec is not None:
                rec.deletes += 1
            done = self.attempt(
                "checkpoint_delete", functools.partial(delete_checkpoint, DB, self.faulty, cp.id)
            )
            if rec is not None:
                self._checkpoint_deleted(rec, done)

    def final_destroyed(self) -> None:
        """The end of a schedule whose database was destroyed (every stall is over, faults are
        off): its live checkpoints read as taken; once they are dropped GC collects it; then the
        path stays destroyed."""
        for cp in self.checkpoints:
            if cp.delete_attempted:
                continue
            opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.CHECKPOINT)
            try:
                with DbReader.open(DB, self.rec, cp.id, opts) as reader:
                    state = self._read_all(reader)
            except (SstMissing, CheckpointNotFound) as e:
                raise InvariantViolation(
                    f"checkpoint {cp.id} of the destroyed database is live but unreadable: {e!r}"
                ) from e
            self._judge(state, cp, f"checkpoint {cp.id} of the destroyed database")
        self.drop_checkpoints()
        for _ in range(2):
            self.attempt(
                "gc_destroyed",
                Collector(DB, self.faulty, self.gc_options, delete_concurrency=1).run,
            )
        if not self.rec.collected(DB) and self.profile.destroy == "hard":
            # A hard destroy that failed midway fenced no writer, and one that kept committing
            # holds a writer checkpoint GC waits for (hard destroy's caller must stop writers):
            # the operator runs the hard destroy again.
            self.attempt("destroy_hard", lambda: destroy(DB, self.faulty, soft=False))
        if not self.rec.collected(DB):
            raise InvariantViolation(
                f"GC (grace 0) did not collect the destroyed database {DB!r} once its "
                "checkpoints were gone"
            )
        self.check_stays_destroyed(DB)

    def check_stays_destroyed(self, path: str) -> None:
        """Opening a destroyed and collected path raises DatabaseDestroyed (RELIABILITY.md, review finding 1:
        not DatabaseNotFound, and never a new or resurrected database)."""
        opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
        openers: dict[str, Callable[[], Db | DbReader]] = {
            "Db.open": lambda: open_manual(path, self.faulty, self.options),
            "DbReader.open": lambda: DbReader.open(path, self.faulty, options=opts),
        }
        for what, opener in openers.items():
            self.figures.checks += 1
            try:
                opened = opener()
            except DatabaseDestroyed:
                self.outcome(f"{what}_destroyed", None)
                continue
            except SlateDBError as e:
                raise InvariantViolation(
                    f"{what} of the destroyed and collected path {path!r} raised {e!r}, not "
                    "DatabaseDestroyed: the path forgot it was destroyed"
                ) from e
            opened.close()
            raise InvariantViolation(
                f"{what} of the destroyed and collected path {path!r} succeeded: a database "
                "is back at a destroyed path"
            )
