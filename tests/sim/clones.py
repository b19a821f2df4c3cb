"""Clone actors: clones of the database (whole and projected, from the latest state or a
checkpoint, resumed after a failure), unions of projected clones, and soft destroy + GC of clones
(see :mod:`tests.sim.harness`)."""

from __future__ import annotations

from slatedb_core.errors import InvalidArgument
from slatedb_core.gc.collector import Collector
from slatedb_core.keys import KeyRange
from slatedb_core.lifecycle.clone import create_clone
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.lifecycle.union import UnionSource, create_union
from slatedb_core.options import DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from tests.sim import model as m
from tests.sim.actors import open_manual
from tests.sim.recorder import InvariantViolation
from tests.sim.stalls import StallSteps
from tests.sim.state import DB, LONG, LOWER, UPPER, CloneRec


class CloneSteps(StallSteps):
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

    def _clone_state(self, path: str, rng: KeyRange | None = None) -> dict[bytes, bytes | None]:
        """The keys inside ``rng`` as the clone holds them; a key outside reads as absent or
        raises InvalidArgument (SlateDB RFC 0004: reads outside a projection fail), never a value."""
        rng = rng or KeyRange()
        inside = [k for k in m.ALL_KEYS if rng.contains(k)]
        opts = DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST)
        with DbReader.open(path, self.rec, options=opts) as reader:
            state = dict(zip(inside, reader.get_many(inside), strict=True))
            for k in m.ALL_KEYS:
                if k in state:
                    continue
                try:
                    outside = reader.get(k)
                except InvalidArgument:
                    continue
                if outside is not None:
                    raise InvariantViolation(
                        f"clone {path}: {k!r} outside the projection {rng} is visible"
                    )
        return state

    def _verify_clone(self, c: CloneRec) -> None:
        state = self._clone_state(c.name, c.projection)
        where = f"clone {c.name}"
        rng = c.projection or KeyRange()
        inside = [k for k in m.ALL_KEYS if rng.contains(k)]
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
                db = open_manual(c.name, self.faulty, self.options)
                try:
                    db.flush_memtable()
                finally:
                    db.close()

            if self.attempt("union_prepare", compact).error is not None:
                return
        expect = {**self._clone_state(b.name, UPPER), **self._clone_state(a.name, LOWER)}
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
