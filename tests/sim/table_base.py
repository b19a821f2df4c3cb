"""The core of a table-level schedule (:mod:`tests.sim.table_harness`): its stores, table handles,
model and records, the helpers every actor uses and the checks after every step.

Stores: a named memory store (``raw``; the Dagster rescaling policy opens it by its URL through
its real resource) under a :class:`FaultyStore` without faults (``faulty``) that the actors use:
its pause points park a split, merge or resume mid-way (:mod:`tests.sim.table_actors`). Handles
that only read (the verifier and the held handles) read ``raw`` directly, so that their readers'
poll threads never claim a pause point nor change what the actors do: the schedule replays.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

from slatedb_core.errors import SlateDBError
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table import Table, TableOptions, ValueEncoding
from slatedb_core.testing import FaultyStore
from tests.sim.actors import Outcome, Stalled
from tests.sim.state import Figures
from tests.sim.table_model import KEYS, SOFT, TableModel, TableViolation

LONG = timedelta(days=1)
HELD_POLL = timedelta(milliseconds=30)
"""The poll interval of the held handles (their shard readers' and, if the table has one, its
map's): a held handle must show every acknowledged write this long after it."""
STALE_S = 1.5
"""How long a held handle may go on showing something else before it is judged stale: its poll
interval many times over (poll threads share two cores with the rest of the machine)."""
REPRO = ".venv/bin/python -m tests.sim.table_run --seed {seed}"

_stores = itertools.count()


def _polling(options: TableOptions, every: timedelta) -> TableOptions:
    """``options`` with every poll interval of the table and its readers set to ``every``
    (whatever the table calls the interval at which a handle re-reads its map)."""
    reader = dataclasses.replace(
        options.reader, manifest_poll_interval=every, mode=ReaderMode.FOLLOW_LATEST
    )
    changes: dict[str, object] = {"reader": reader}
    for f in dataclasses.fields(options):
        if "poll" in f.name and isinstance(getattr(options, f.name), timedelta):
            changes[f.name] = every
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]


ENCODINGS = (
    None,
    ValueEncoding("json", '{"type":"struct","fields":[{"name":"a","type":"long"}]}'),
    ValueEncoding("json", '{"type":"struct","fields":[{"name":"b","type":"string"}]}'),
)


class TableSimBase:
    def __init__(self, seed: int, *, trace: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self._trace = trace
        self.figures = Figures(schedules=1)
        self.url = f"memory://tablesim-{os.getpid()}-{next(_stores)}"
        self.raw: ObjectStore = open_store(self.url)
        self.faulty = FaultyStore(self.raw, seed=seed, rules=[], pause_timeout_s=60)
        self.path = "t"
        self.steps_n = self.rng.randint(30, 70)
        self.options = TableOptions(
            writer=DbOptions(
                flush_interval=timedelta(milliseconds=5),
                manifest_poll_interval=LONG,
                l0_sst_size_bytes=4096,
                block_size=512,
                l0_max_ssts=100_000,
            ),
            reader=DbReaderOptions(manifest_poll_interval=LONG, mode=ReaderMode.FOLLOW_LATEST),
        )
        self.held_options = _polling(self.options, HELD_POLL)
        npoints = self.rng.randint(0, 2)
        points = sorted(self.rng.sample(KEYS[4:-4], npoints))
        Table.create(self.path, self.faulty, points, self.options).close()
        self.actor_tables = [Table.open(self.path, self.faulty, self.options) for _ in range(2)]
        """Handles the actors write and rescale through (refreshed only now and then)."""
        self.held: list[Table] = [
            Table.open(self.path, self.raw, self.held_options) for _ in range(2)
        ]
        """Handles opened early and held across everything; they read only."""
        self.verifier = Table.open(self.path, self.raw, self.options)
        self.model = TableModel()
        self.encoding: ValueEncoding | None = None
        self.stalls: list[Stalled] = []
        self._names = 0
        self._writes = 0
        self.left_pending: list[tuple[str, BaseException]] = []
        self.snapshots: dict[str, tuple[ValueEncoding | None, dict[bytes, bytes]]] = {}
        self.found: list[tuple[str, str]] = []
        """Breaches of soft invariants (``table_model.SOFT``), the first of each."""
        self.note(f"seed {seed}: {self.steps_n} steps, split points {points}")

    # ---- helpers ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        if self._trace is not None:
            self._trace(text)

    def outcome(self, step: str, err: BaseException | None) -> None:
        what = "ok" if err is None else type(err).__name__
        self.figures.outcomes[f"{step}:{what}"] += 1
        if err is not None:
            self.note(f"  -> {what}: {str(err)[:200]}")

    def attempt(self, step: str, fn: Callable[[], object]) -> Outcome:
        """Run ``fn``; typed engine errors are outcomes, anything else (a bug) propagates."""
        try:
            out = Outcome(value=fn())
        except SlateDBError as e:
            out = Outcome(error=e)
        self.outcome(step, out.error)
        return out

    def actor(self) -> Table:
        t = self.rng.choice(self.actor_tables)
        if self.rng.random() < 0.6:
            t.refresh()
        return t

    def read_latest(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """What the table holds now (the verifier, refreshed: the reference reader)."""
        self.verifier.refresh()
        got = self.verifier.get_many(list(keys))
        return {k: v for k, v in zip(keys, got, strict=True) if v is not None}

    # ---- the checks after every step -------------------------------------------------------
    def breach(self, v: TableViolation) -> None:
        """Raise ``v``, or record it and go on if its invariant is soft."""
        if v.invariant not in SOFT:
            raise v
        self.note(f"BREACH {v}")
        if all(inv != v.invariant for inv, _ in self.found):
            self.found.append((v.invariant, v.detail))

    def verify(self) -> None:
        """The table (latest map, fresh readers) holds exactly the model; a split, merge or
        overwrite that failed with nothing else in flight left no shard sealed unless its
        error says to resume."""
        m = self.verifier.refresh()
        seen = dict(self.verifier.scan())
        d = self.model.diff(seen)
        if d:
            raise TableViolation(
                "state",
                f"the table (latest map {m.id}) differs from every "
                f"acknowledged write and applied batch: {d[:5]}",
            )
        self.figures.checks += 1

    def judge_left_sealed(self, label: str, before: set[object], err: BaseException | None) -> None:
        """After a rescale ``label`` returned (``err``: how it failed) with nothing else in
        flight: a pending op it added and left behind (shards sealed: every writer refused) must
        come with an error that says to resume it."""
        if self.stalls:
            return
        m = self.verifier.maps.read_latest()
        left = [op for op in m.pending if op.op_id not in before]
        if not left:
            return
        if err is None:
            raise TableViolation(
                "left-sealed",
                f"{label} succeeded but left {left[0].kind} "
                f"{left[0].op_id} pending: shards {left[0].sources} sealed",
            )
        if "resume" not in str(err).lower():
            raise TableViolation(
                "left-sealed",
                f"{label} raised {type(err).__name__} ({str(err)[:160]}) and left "
                f"{left[0].kind} {left[0].op_id} pending: shards {left[0].sources} stay sealed "
                "(every writer refused) and the error does not say to resume",
            )
        self.left_pending.append((label, err))

    def pending_ids(self) -> set[object]:
        return {op.op_id for op in self.verifier.maps.read_latest().pending}

    def held_read(self, t: Table, kind: str, keys: list[bytes], what: str) -> None:
        """A read of held handle ``what``: it must show the model once its poll interval has
        passed (retried for :data:`STALE_S`: poll threads lag on a busy machine)."""
        # once a schedule has found a handle stale, it does not wait for that again
        patience = 0.0 if any(inv == "stale-handle" for inv, _ in self.found) else STALE_S
        deadline = time.monotonic() + patience
        lo, hi = min(keys), max(keys) + b"\xff"
        while True:
            err: BaseException | None = None
            d: list[str] = []
            try:
                if kind == "get":
                    k = keys[0]
                    v = t.get(k)
                    seen = {} if v is None else {k: v}
                    d = self.model.diff(seen, [k])
                elif kind == "get_many":
                    got = t.get_many(keys)
                    seen = {k: v for k, v in zip(keys, got, strict=True) if v is not None}
                    d = self.model.diff(seen, keys)
                else:
                    seen = dict(t.scan(lo, hi))
                    d = self.model.diff(
                        seen, sorted({k for k in self.model.state if lo <= k < hi} | set(seen))
                    )
            except SlateDBError as e:
                err = e
            if err is None and not d:
                self.figures.checks += 1
                return
            if time.monotonic() > deadline:
                break
            time.sleep(HELD_POLL.total_seconds())
        latest = self.verifier.maps.read_latest().id
        if err is not None:
            self.breach(
                TableViolation(
                    "held-handle-error",
                    f"{what} {kind} raised {type(err).__name__} for {STALE_S}s: {str(err)[:200]}",
                )
            )
            return
        self.breach(
            TableViolation(
                "stale-handle",
                f"{what} (map {t.shard_map.id}, latest {latest}) {kind} still differs from the "
                f"acknowledged writes {STALE_S}s after they were acknowledged (poll interval "
                f"{HELD_POLL.total_seconds() * 1000:.0f} ms): {d[:4]}",
            )
        )

    # ---- the end ---------------------------------------------------------------------------
    def cleanup(self) -> None:
        for s in self.stalls:
            s.point.release()
            s.thread.join(10)
        self.stalls.clear()
        for t in [*self.actor_tables, *self.held, self.verifier]:
            try:
                t.close()
            except SlateDBError:
                pass
        # the named memory store lives as long as the process: leave it empty
        for meta in list(self.raw.list("")):
            try:
                self.raw.delete(meta.path)
            except SlateDBError:
                pass
