"""Maintenance actors: a compactor that restarts (each start fences the previous one), GC with
``min_age`` 0, checkpoint creators (through the writer, scope ALL, and through admin) and
deleters, and readers in checkpoint, managed and follow-latest modes (see
:mod:`tests.sim.harness`)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint
from slatedb_core.compactor import CompactionStats, Compactor
from slatedb_core.errors import CheckpointNotFound, SlateDBError, SstMissing
from slatedb_core.gc.collector import Collector
from slatedb_core.options import CheckpointOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from tests.sim import model as m
from tests.sim.actors import Outcome
from tests.sim.recorder import InvariantViolation
from tests.sim.state import DB, LONG, CheckpointRec, CompactorActor
from tests.sim.writers import WriterSteps


class MaintenanceSteps(WriterSteps):
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
        since = self.rec.mark()
        try:
            out = Outcome(value=c.compactor.run_once())
        except SlateDBError as e:
            out = Outcome(error=e)
        self._compacted(c, out, zombie_at_start=zombie)
        self.judge_outcome("compact", out, threading.current_thread().name, since)

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
        rec = CheckpointRec(cid, snap if full else None)
        rec.deletes = int(cid in self.dropped)  # dropped by a destroy while it was stalled
        self.checkpoints.append(rec)

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
        c.deletes += 1
        out = self.attempt("checkpoint_delete", lambda: delete_checkpoint(DB, self.faulty, c.id))
        self._checkpoint_deleted(c, out)

    def _checkpoint_deleted(self, c: CheckpointRec, out: Outcome) -> None:
        """Only a delete can remove one of our checkpoints (the clock never moves, so none
        expires): its only delete must not report it missing. (RELIABILITY.md, review finding 3: a delete
        whose commit GC passed before its committer checked re-applied itself on a manifest that
        already lacked the checkpoint, and raised CheckpointNotFound though it had committed.)"""
        if out.error is None:
            c.deleted = True
        elif isinstance(out.error, CheckpointNotFound) and c.deletes == 1 and not self.destroyed:
            raise InvariantViolation(
                f"the only delete of checkpoint {c.id} raised CheckpointNotFound: {out.error}"
            )

    def step_reader(self) -> None:
        if self.readers and self.rng.random() < 0.5:
            reader, cp = self.rng.choice(self.readers)
            self.note(f"re-read {reader!r}")
            if reader.mode is not ReaderMode.CHECKPOINT:
                if self.attempt("reader_refresh", reader.refresh).error is not None:
                    return
        else:
            cps = [c for c in self.checkpoints if not c.deleted]
            mode = self.rng.choice(
                [
                    ReaderMode.FOLLOW_LATEST,
                    ReaderMode.MANAGED,
                    ReaderMode.CHECKPOINT,
                    ReaderMode.CHECKPOINT,
                ]
            )
            if self.destroyed:  # the latest state is gone; its checkpoints are kept until deleted
                mode = ReaderMode.CHECKPOINT
                if not cps:
                    return
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
        live = cp is not None and not cp.delete_attempted
        if isinstance(err, SstMissing) and live and not self.damaged:
            assert cp is not None
            raise InvariantViolation(f"checkpoint {cp.id} is live but its data is gone: {err}")
