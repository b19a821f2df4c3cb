"""What a schedule is made of (:class:`Config`, :class:`Profile`) and the records it keeps about
its actors; shared by every module of the simulation (see :mod:`tests.sim.harness`)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from slatedb_core.compactor import Compactor
from slatedb_core.keys import KeyRange
from slatedb_core.writer.db import Db
from tests.sim import model as m

DB = "db"
LONG = timedelta(days=1)
REPRO = ".venv/bin/python -m tests.sim.run --seed {seed}"
LOWER, UPPER = KeyRange(None, b"k3"), KeyRange(b"k3", None)


@dataclass
class Writer:
    id: int
    db: Db | None = None
    state: str = "opening"  # opening, live, zombie, crashed, closed, failed
    busy: bool = False
    epoch: int = 0
    opened_issue: int = 0
    fenced_after_issue: int | None = None
    """Set when a newer writer finished opening, or the database was destroyed: from then on,
    nothing issued may be acked."""
    fenced_by: str = "a newer writer"


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
    deletes: int = 0
    """Deletes issued (one may have taken effect even if it raised, or still be stalled)."""

    @property
    def delete_attempted(self) -> bool:
        return self.deletes > 0


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


@dataclass(frozen=True)
class Profile:
    """Which of the review actors a schedule runs (each schedule draws its own, from a generator
    of its own so that :class:`Config` stays what the seed gave it before they existed).

    ``destroy``: the database is destroyed mid-schedule (soft, then GC at grace 0; or hard) while
    writers, compactors and GC passes are stalled (:mod:`tests.sim.destroy_actors`).
    ``damage``: objects are deleted or corrupted at rest between writer runs
    (:mod:`tests.sim.damage`). Clones and unions are off in both: they would only see the typed
    errors a destroyed or damaged source gives them."""

    destroy: str  # none, soft, hard
    damage: bool

    @staticmethod
    def of(seed: int) -> Profile:
        rng = random.Random(seed * 7919 + 31)
        destroy = rng.choices(["none", "soft", "hard"], [76, 16, 8])[0]
        damage = destroy == "none" and rng.random() < 0.3
        return Profile(destroy, damage)

    @property
    def clones(self) -> bool:
        return self.destroy == "none" and not self.damage
