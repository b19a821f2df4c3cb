"""Stalled operations: a writer's flush, memtable flush, checkpoint, durable put or bulk ingest,
an admin checkpoint create or delete, a managed reader's open (which commits its checkpoint), a
compaction pass or a GC pass, parked at a chosen store request while other actors run, resumed
later, possibly only up to a second pause point where it parks again.

Half of the pause points are drawn at random over every namespace; the other half are the
moments RELIABILITY.md found unguarded (:data:`RACES`): between an SST's upload and the manifest
commit that names it, between a sequenced create and its boundary check, between a WAL create
and its check, and before a WAL create. With GC at ``min_age`` 0 and commits by other actors
in between, those are where a commit can name a deleted SST (item 2), be passed by the boundary
and re-applied (item 3), or land in a destroyed and collected database (item 1).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from slatedb_core.checkpoints import create_checkpoint, delete_checkpoint
from slatedb_core.gc.collector import Collector
from slatedb_core.options import CheckpointOptions, CheckpointScope, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from tests.sim import model as m
from tests.sim.actors import Outcome
from tests.sim.maintenance import MaintenanceSteps
from tests.sim.recorder import InvariantViolation
from tests.sim.state import DB, LONG, CompactorActor, Writer

RACES: tuple[tuple[str, str, str], ...] = (
    ("put_if_absent", f"{DB}/compacted/*", "after"),  # SST uploaded, not yet named (item 2)
    ("get", f"{DB}/gc/compacted.boundary", "before"),  # the writer's SST check (item 2)
    ("put_if_absent", f"{DB}/manifest/*", "after"),  # created, not yet checked (item 3)
    ("get", f"{DB}/gc/manifest.boundary", "before"),  # the same moment, seen from the check
    ("put_if_absent", f"{DB}/wal/*", "before"),  # a durable put before its WAL create (item 1)
    ("get", f"{DB}/gc/wal.boundary", "before"),  # a WAL create landed, not yet checked (item 1)
)

UPLOADED, SST_CHECK, CREATED, CREATE_CHECK, WAL_CREATE, WAL_CHECK = RACES
NEXT = {
    UPLOADED: (CREATED, SST_CHECK, CREATE_CHECK),
    SST_CHECK: (CREATED, CREATE_CHECK),
    CREATED: (SST_CHECK, CREATE_CHECK),
    CREATE_CHECK: (SST_CHECK, CREATED),
    WAL_CREATE: (WAL_CHECK, CREATED),
    WAL_CHECK: (CREATED, SST_CHECK),
}
"""Where a resumed operation parked at a race may park next: the moments after it in a commit
(an SST is named by a manifest create, which is checked against the manifest boundary; before
RELIABILITY.md the SST was checked against the compacted boundary only after that)."""

WRITER_OPS = ("flush", "flush_memtable", "checkpoint", "put_durable", "bulk_ingest")
RACE_OPS = (
    "flush_memtable",
    "bulk_ingest",
    "checkpoint",
    "checkpoint_admin",
    "checkpoint_delete",
    "reader_open",
)


class StallSteps(MaintenanceSteps):
    def _pause_point(self) -> tuple[str, str, str]:
        if self.rng.random() < 0.5:
            return self.rng.choice(RACES)
        ns = self.rng.choice(["wal", "manifest", "compacted", "gc", "compactions"])
        op = self.rng.choice(["put_if_absent", "get", "list", "delete"])
        glob = f"{DB}/{ns}*" if op == "list" else f"{DB}/{ns}/*"
        return op, glob, self.rng.choice(["before", "after"])

    def step_stall(self) -> None:
        kind = self.rng.choice(["writer", "writer", "writer", "compactor", "gc", "admin", "reader"])
        pause = self._pause_point()
        if kind == "writer":
            self._stall_writer(pause)
        elif kind == "compactor":
            c = self._idle_compactor()
            if c is None:
                return
            c.busy = True

            def cdone(out: Outcome, c: CompactorActor = c) -> None:
                c.busy = False
                self._compacted(c, out, zombie_at_start=False)

            self._stall(
                f"compactor c{c.id}{' (zombie)' if c.zombie else ''}",
                pause,
                c.compactor.run_once,
                cdone,
                "stalled_compact",
            )
        elif kind == "gc":
            gc = Collector(DB, self.faulty, self.gc_options, delete_concurrency=1)
            self._stall(
                "gc", pause, gc.run, lambda out: self.outcome("stalled_gc", out.error), "stalled_gc"
            )
        elif kind == "admin":
            self._stall_admin(pause)
        else:
            self._stall_managed_reader(pause)

    def step_race(self) -> None:
        """A commit parked at one of the moments of :data:`RACES` it passes through, so that GC
        at ``min_age`` 0, checkpoints and other committers act in it: a memtable flush or a bulk
        ingest between its SST upload and its manifest create, or any commit (those two, a
        writer's or an admin's checkpoint, a checkpoint delete, a managed reader's checkpoint)
        between its manifest create and the boundary check."""
        what = self.rng.choice(RACE_OPS)
        if what in ("flush_memtable", "bulk_ingest"):
            pause = self.rng.choice((UPLOADED, UPLOADED, CREATED, CREATE_CHECK, SST_CHECK))
        else:
            pause = self.rng.choice((CREATED, CREATE_CHECK))
        if what == "checkpoint_admin":
            self._stall_admin(pause, delete=False)
        elif what == "checkpoint_delete":
            self._stall_admin(pause, delete=True)
        elif what == "reader_open":
            self._stall_managed_reader(pause)
        else:
            self._stall_writer(pause, what)

    def _stall_writer(self, pause: tuple[str, str, str], what: str | None = None) -> None:
        w = self.pick_writer()
        if w is None or w.db is None:
            return
        db = w.db
        what = what or self.rng.choice(WRITER_OPS)
        rows: int | None = None  # the model's writer id of a bulk ingest's rows
        if what == "put_durable":
            key = self.rng.choice(m.KEYS)
            issue = self.model.next()
            value = m.encode(issue, b"s")
            self.model.issue(w.id, [(key, value)])
            fn: Callable[[], object] = lambda: db.put(key, value)  # noqa: E731
        elif what == "flush":
            fn = db.flush
        elif what == "flush_memtable":
            # something to flush, so that an L0 SST is uploaded and committed
            key, issue = self.rng.choice(m.KEYS), self.model.next()
            value = m.encode(issue, self.value(self.rng.randint(1, 300)))
            self.model.issue(w.id, [(key, value)])
            if self.attempt("put", lambda: db.put(key, value, await_durable=False)).error:
                return
            fn = db.flush_memtable
        elif what == "bulk_ingest":
            keys = sorted(self.rng.sample(m.KEYS, self.rng.randint(1, 3)))
            issue = self.model.next()
            values = [m.encode(issue, b"bulk") for _ in keys]
            rows = -issue  # not in the WAL: only this call can make these rows durable
            self.model.issue(rows, zip(keys, values, strict=True))
            table = pa.table(
                {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
            )
            fn = lambda: db.bulk_ingest(table)  # noqa: E731
        else:
            fn = lambda: db.create_checkpoint(CheckpointScope.ALL)  # noqa: E731
        had = self.model.has_pending(w.id)
        w.busy = True

        def done(
            out: Outcome, w: Writer = w, what: str = what, had: bool = had, rows: int | None = rows
        ) -> None:
            w.busy = False
            self.outcome(f"stalled_{what}", out.error)
            if out.error is not None:
                if rows is not None:
                    self.model.forget(rows)
                return
            self._acked(w, had, f"stalled {what}")
            if rows is not None:
                if w.fenced_after_issue is not None and -rows >= w.fenced_after_issue:
                    raise InvariantViolation(
                        f"zombie writer w{w.id} acknowledged bulk ingest #{-rows}"
                    )
                self.model.ack(rows)
            if what == "checkpoint":
                self._checkpoint_made(out.value, m.Snapshot({}, 0), full=False, fresh=False)

        self._stall(f"w{w.id} ({w.state}) {what}", pause, fn, done, f"stalled_{what}")

    def _stall_admin(self, pause: tuple[str, str, str], delete: bool | None = None) -> None:
        live = [c for c in self.checkpoints if not c.deleted]
        if delete is None:
            delete = self.rng.random() < 0.5
        if live and delete:
            c = self.rng.choice(live)
            c.deletes += 1

            def ddone(out: Outcome) -> None:
                self.outcome("stalled_checkpoint_delete", out.error)
                self._checkpoint_deleted(c, out)

            self._stall(
                f"delete checkpoint {c.id}",
                pause,
                lambda: delete_checkpoint(DB, self.faulty, c.id),
                ddone,
                "stalled_checkpoint_delete",
            )
            return

        def cdone(out: Outcome) -> None:
            self.outcome("stalled_checkpoint_admin", out.error)
            if out.error is None:
                self._checkpoint_made(out.value, m.Snapshot({}, 0), full=False, fresh=False)

        self._stall(
            "admin checkpoint",
            pause,
            lambda: create_checkpoint(DB, self.faulty, CheckpointOptions(lifetime=None)),
            cdone,
            "stalled_checkpoint_admin",
        )

    def _stall_managed_reader(self, pause: tuple[str, str, str]) -> None:
        """A managed reader's open commits its own checkpoint (review finding 3 of RELIABILITY.md:
        re-applied after GC passed the commit, it left two checkpoints with one id)."""
        opts = DbReaderOptions(
            manifest_poll_interval=LONG, checkpoint_lifetime=None, mode=ReaderMode.MANAGED
        )

        def done(out: Outcome) -> None:
            self.outcome("stalled_reader_open", out.error)
            if out.error is None:
                assert isinstance(out.value, DbReader)
                reader = out.value
                self.readers.append((reader, None))
                got = self.attempt("reader_read", lambda: self._read_all(reader))
                if got.error is None:
                    assert isinstance(got.value, dict)
                    self._judge(got.value, None, f"reader {reader!r}")

        self._stall(
            "managed reader open",
            pause,
            lambda: DbReader.open(DB, self.faulty, None, opts),
            done,
            "stalled_reader_open",
        )

    def step_resume(self) -> None:
        if not self.stalls:
            return
        s = self.stalls.pop(self.rng.randrange(len(self.stalls)))
        at = s.extra.get("pause")
        to: tuple[str, str, str] | None = None
        if at in NEXT and self.rng.random() < 0.6:
            assert isinstance(at, tuple)
            to = self.rng.choice(NEXT[at])
        elif self.rng.random() < 0.2:
            to = self._pause_point()
        self.note(f"resume {s.label}" + ("" if to is None else f" up to {to[2]} {to[0]} {to[1]}"))
        self.resume_stall(s, to)
