"""One seeded table-level schedule: a sharded table (``slatedb_core.table``) driven by actors that
one ``random.Random(seed)`` interleaves, over a memory store (issue 37).

Actors (:mod:`tests.sim.table_ingest`, :mod:`tests.sim.table_actors`): staged batch ingests with
and without exactly-once batch records, re-run by new job ids when they fail; stream
micro-batches that fail mid-way and restart; retried and zombie commit attempts; shard writers
through handles that refresh only now and then; split, merge and overwrite, also parked mid-way
(at a store request) while the others act; the Dagster rescaling policy; ``Table.resume``; the
table's GC at every ``min_age`` and ``ingest_min_age`` (0 included) and every shard's database
GC; named snapshots; ``Table`` handles opened early and held across all of it.

Checks (:class:`~tests.sim.table_model.TableViolation` names each):

* ``state``: after every step the table (latest map, a fresh reader) holds exactly every
  acknowledged write and committed batch;
* ``stale-handle`` / ``held-handle-error``: a held handle's get, get_many and scan show the same
  once its poll interval has passed (allowed :data:`~tests.sim.table_base.STALE_S`);
* ``batch-lost``: a batch reported applied had every row committed by some job of it;
* ``duplicate-apply``: no job commits a shard twice, no batch commits a key twice;
* ``snapshot`` / ``snapshot-encoding``: a table opened on a named snapshot holds the rows and
  says the value encoding of the moment it was taken;
* ``left-sealed``: a split, merge or overwrite that fails with nothing else in flight leaves no
  shard sealed, unless its error says to resume;
* ``liveness``: at the end (every parked op released, ``resume`` run if an error said so) the
  writer of every shard opens and every batch can be applied.

A failure raises the violation with the one-line command that replays the schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from slatedb_core.errors import SlateDBError
from slatedb_core.table import Table
from tests.sim.recorder import InvariantViolation
from tests.sim.state import Figures
from tests.sim.table_actors import TableSteps
from tests.sim.table_base import REPRO
from tests.sim.table_model import KEYS, TableViolation

__all__ = ["TableSimulation", "run_table_schedule"]


class TableSimulation(TableSteps):
    def __init__(self, seed: int, *, trace: Callable[[str], None] | None = None) -> None:
        super().__init__(seed, trace=trace)
        self._init_ingests()

    def steps(self) -> dict[str, tuple[int, Callable[[], None]]]:
        return {
            "ingest_start": (6, self.step_ingest_start),
            "ingest": (26, self.step_ingest),
            "zombie_attempt": (3, self.step_zombie_attempt),
            "write": (12, self.step_write),
            "rescale": (6, self.step_rescale),
            "stall_rescale": (5, self.step_stall_rescale),
            "resume_stall": (6 if self.stalls else 0, self.step_resume_stall),
            "resume": (1, self.step_resume),
            "overwrite": (2, self.step_overwrite),
            "policy": (2, self.step_policy),
            "gc": (5, self.step_gc),
            "snapshot": (2, self.step_snapshot),
            "snapshot_read": (3, self.step_snapshot_read),
            "snapshot_delete": (1, self.step_snapshot_delete),
            "held_read": (12, self.step_held_read),
            "hold_another": (1, self.step_hold_another),
        }

    def run(self) -> Figures:
        started = time.monotonic()
        try:
            for _ in range(self.steps_n):
                table = self.steps()
                names = [n for n, (wt, _) in table.items() if wt > 0]
                name = self.rng.choices(names, [table[n][0] for n in names])[0]
                self.note(f"[{self.figures.steps}] {name}")
                table[name][1]()
                self.figures.steps += 1
                self.figures.outcomes[f"step:{name}"] += 1
                self.verify()
            self.finish()
        except InvariantViolation as e:
            raise self._violation(e) from e
        else:
            if self.found:
                raise self._violation(None)
        finally:
            self.cleanup()
            self.figures.seconds = time.monotonic() - started
            self.figures.checks += self.model.checks
        return self.figures

    def _violation(self, e: InvariantViolation | None) -> TableViolation:
        """One violation naming every invariant the schedule broke, the replay command first."""
        found = list(self.found)
        if isinstance(e, TableViolation):
            found.append((e.invariant, e.detail))
        elif e is not None:
            found.append(("other", str(e)))
        repro = REPRO.format(seed=self.seed)
        inv, detail = found[-1] if e is not None else found[0]
        others = "; ".join(f"[{i}] {d}" for i, d in found if (i, d) != (inv, detail))
        return TableViolation(
            inv, f"{repro}  # {detail}" + (f"  (also: {others})" if others else ""), found
        )

    def finish(self) -> None:
        """Release every parked op; resume what an error said to resume; every shard's writer
        opens; every batch is applied; the held handles and named snapshots show the end."""
        self.note("end: release every parked op")
        while self.stalls:
            self.step_resume_stall()
            self.verify()
        t = Table.open(self.path, self.faulty, self.options)
        try:
            m = t.refresh()
            if m.pending:
                said = [e for _, e in self.left_pending]
                if not said:
                    raise TableViolation(
                        "left-sealed",
                        f"at the end, with nothing in flight, map {m.id} holds "
                        f"pending {[op.kind for op in m.pending]} (shards sealed) and no error "
                        "said to resume",
                    )
                self.note("end: Table.resume(), as an error said")
                t.resume()
            for shard in t.refresh().shards:
                try:
                    t.writer(shard.index).close()
                except SlateDBError as e:
                    raise TableViolation(
                        "liveness",
                        f"at the end the writer of shard {shard.index} (id "
                        f"{shard.shard_id}) does not open: {type(e).__name__}: {e}",
                    ) from e
        finally:
            t.close()
        self.verify()
        self.note("end: run every job to its end, re-run every batch not applied")
        self.finish_ingests()
        self.verify()
        for i, h in enumerate(self.held):
            self.held_read(h, "scan", list(KEYS), f"held handle h{i} (at the end)")
        for name in sorted(self.snapshots):
            self.step_snapshot_read_named(name)


def run_table_schedule(seed: int, *, trace: Callable[[str], None] | None = None) -> Figures:
    """Run one schedule; raises InvariantViolation (message starts with the repro command)."""
    return TableSimulation(seed, trace=trace).run()
