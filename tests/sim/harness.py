"""One seeded schedule: actors interleaved by ``random.Random(seed)`` over a faulty memory store.

Actors (one module each, chained as mixins on :class:`~tests.sim.base.SimBase`):

* :mod:`~tests.sim.writers`: writers opened on one path (the newest fences the others; the older
  ones keep trying as zombies), puts, transfers, bulk ingests, flushes, crashes;
* :mod:`~tests.sim.maintenance`: a compactor that restarts, GC with ``min_age`` 0, checkpoint
  creators and deleters, readers on checkpoints and following the latest state;
* :mod:`~tests.sim.stalls`: any of those operations parked at a chosen store request (half of
  the time one of the races of RELIABILITY.md) and resumed later, possibly up to a second pause point;
* :mod:`~tests.sim.clones`: clones (whole and projected), unions of projected clones;
* :mod:`~tests.sim.destroy_actors`: soft or hard destroy of the database mid-schedule, GC at grace
  0, with operations stalled through it (RELIABILITY.md, review finding 1);
* :mod:`~tests.sim.damage`: objects deleted or corrupted at rest between writer runs (items 5-7);
* :mod:`~tests.sim.ending`: the end of a schedule.

After every step: the recorder's namespace rules, no manifest (latest or checkpointed) naming a
missing object, and a fault-free reader following the latest state that must show every
acknowledged write (see :mod:`tests.sim.model`). At the end every stall is released, faults stop,
and a final writer, compaction, GC, checkpoint readers and clone readers check again; then the
databases may be destroyed (soft, or hard with an emptiness check).

A failure raises :class:`~tests.sim.recorder.InvariantViolation` whose message starts with the
one-line command that replays the schedule.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.sim.ending import EndingSteps
from tests.sim.recorder import InvariantViolation
from tests.sim.state import REPRO, Figures

__all__ = ["Figures", "Simulation", "run_schedule"]


class Simulation(EndingSteps):
    def steps(self) -> dict[str, tuple[int, Callable[[], None]]]:
        sw = self.config.stall_weight
        if self.profile.destroy != "none":
            sw = max(sw, 4)  # something is always in flight when the database goes
        clones = 1 if self.profile.clones else 0
        return {
            "open_writer": (4, self.step_open_writer),
            "put": (10, lambda: self.step_put(False)),
            "put_durable": (8, lambda: self.step_put(True)),
            "delete": (2, self.step_delete),
            "transfer": (8, self.step_transfer),
            "flush": (8, self.step_flush),
            "wal_pipeline": (
                12 if self.options.max_parallel_writes > 1 else 0,
                self.step_wal_pipeline,
            ),
            "bulk_ingest": (2, self.step_bulk_ingest),
            "refresh": (2, self.step_refresh),
            "crash": (2, self.step_crash),
            "close": (1, self.step_close),
            "stall": (sw, self.step_stall),
            "race": (3, self.step_race),
            "resume": (max(sw, 3) if self.stalls else 0, self.step_resume),
            "compactor_start": (2, self.step_compactor_start),
            "compact": (4, self.step_compact),
            "gc": (5, self.step_gc),
            "checkpoint": (3, self.step_checkpoint),
            "checkpoint_delete": (2, self.step_checkpoint_delete),
            "reader": (4, self.step_reader),
            "clone": (2 * clones, self.step_clone),
            "union": (3 * clones, self.step_union),
            "destroy_clone": (clones, self.step_destroy_clone),
            "destroy": (
                6 if self.profile.destroy != "none" and not self.destroyed else 0,
                self.step_destroy,
            ),
            "damage": (4 if self.profile.damage and not self.damaged else 0, self.step_damage),
        }

    def run(self) -> Figures:
        started = time.monotonic()
        try:
            self.note(f"seed {self.seed}: {self.config} {self.profile}")
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
            self.figures.seconds = time.monotonic() - started
            self.figures.faults = sum(
                1 for kind, _, _ in self.faulty.events if kind.startswith("fail_")
            )
            self.figures.requests = self.faulty.counters.total()
            self.figures.checks += self.rec.checks + self.model.checks
        return self.figures


def run_schedule(
    seed: int, *, trace: Callable[[str], None] | None = None, two_phase: bool = False
) -> Figures:
    """Run one schedule; raises InvariantViolation (message starts with the repro command).
    ``two_phase``: over two-phase CAS (SQLite) on a store without conditional writes."""
    return Simulation(seed, trace=trace, two_phase=two_phase).run()
