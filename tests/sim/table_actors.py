"""The other actors of the table-level simulation (:mod:`tests.sim.table_harness`): shard writers,
split / merge / overwrite (also parked mid-way at a store request while others act), the Dagster
rescaling policy (the ``rescaling`` asset itself, through its real resources), resume, GC (the
table's own at random ``min_age`` and ``ingest_min_age``, 0 included, and every shard
database's), named snapshots, and the held handles' reads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pyarrow as pa

from slatedb_core.errors import SlateDBError
from slatedb_core.gc.service import run_gc_once
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.table import Table
from tests.sim.actors import Outcome, Stalled, run_stalled
from tests.sim.table_base import ENCODINGS
from tests.sim.table_ingest import IngestSteps
from tests.sim.table_model import KEYS, TableViolation

AGES = (timedelta(0), timedelta(minutes=10), timedelta(hours=1), timedelta(days=7))
"""GC ages: 0 (everything old enough) or longer than any schedule (nothing written in it is).
Table GC judges age by the wall clock, so an age a schedule's run can cross (it lasts 0.2-10 s)
would make what GC deletes depend on how fast the machine ran it: one seed, several schedules
(the long campaign's failing seeds changed from run to run with 1 s here). Four ages, so every
seed draws the steps it drew with 1 s."""


def pause_points(t: str) -> tuple[tuple[str, str, str], ...]:
    """Where a parked rescale waits: sealed, not fenced; inside the fence's writer open (after
    its epoch bump, before its fencing WAL write); mid-clone; before the new map's commit."""
    return (
        ("put_if_absent", f"{t}/shardmap/*", "after"),
        ("put_if_absent", f"{t}/shards/*/manifest/*", "after"),
        ("put_if_absent", f"{t}/shards/*/wal/*", "before"),
        ("list", f"{t}/shards/*/wal*", "before"),
        ("get", f"{t}/shards/*/clone.origin", "before"),
        ("get", f"{t}/shardmap/*", "before"),
    )


class TableSteps(IngestSteps):
    # ---- writers ---------------------------------------------------------------------------
    def step_write(self) -> None:
        t = self.actor()
        keys = sorted(self.rng.sample(KEYS, self.rng.randint(1, 4)))
        shard = t.shard_for(keys[0])
        keys = [k for k in keys if shard.contains(k)]
        self._writes += 1
        rows: dict[bytes, bytes | None] = {
            k: None if self.rng.random() < 0.3 else f"w{self._writes}/{k.decode()}".encode()
            for k in keys
        }
        self.note(
            f"write {len(rows)} row(s) to shard {shard.index} (id {shard.shard_id}) "
            f"through a handle on map {t.shard_map.id}"
        )

        def write() -> None:
            with t.writer(shard.index) as db:
                for k, v in rows.items():
                    if v is None:
                        db.delete(k)
                    else:
                        db.put(k, v)
                # into L0: a table snapshot's checkpoints pin manifests, not the WAL after them
                # (docs/checkpoints-and-readers.md)
                db.flush_memtable()

        if self.attempt("write", write).error is None:
            self.model.apply(rows)

    # ---- rescaling -------------------------------------------------------------------------
    def _rescale_op(self) -> tuple[str, Callable[[], object]] | None:
        t = self.actor()
        shards = t.shards
        if self.rng.random() < 0.55 or len(shards) < 2:
            i = self.rng.randrange(len(shards))
            rng = shards[i].key_range
            inside = [k for k in KEYS if rng.contains(k) and k != rng.start]
            if not inside:
                return None
            at = self.rng.choice(inside)
            return f"split shard {i} at {at.decode()} (map {t.shard_map.id})", lambda: t.split(
                i, at
            )
        i = self.rng.randrange(len(shards) - 1)
        expected = t.shard_map.id if self.rng.random() < 0.5 else None
        return f"merge shards {i},{i + 1} (map {t.shard_map.id})", lambda: t.merge(
            i, expected_map_id=expected
        )

    def step_rescale(self) -> None:
        op = self._rescale_op()
        if op is None:
            return
        label, fn = op
        self.note(label)
        before = self.pending_ids()
        out = self.attempt("rescale", fn)
        self.judge_left_sealed(label, before, out.error)

    def step_stall_rescale(self) -> None:
        """A split, merge or resume parked at a store request (:func:`pause_points`) while the
        other actors go on; resumed by :meth:`step_resume_stall`."""
        if len(self.stalls) >= 2:
            return
        fn: Callable[[], object]
        if self.rng.random() < 0.2:
            t = self.actor()
            label, fn = "resume", t.resume
        else:
            op = self._rescale_op()
            if op is None:
                return
            label, fn = op
        pause = self.rng.choice(pause_points(self.path))
        self.note(f"stall {label} at {pause[2]} {pause[0]} {pause[1]}")
        self._names += 1
        before = self.pending_ids()

        def done(out: Outcome, label: str = label) -> None:
            self.outcome("stalled_rescale", out.error)
            if out.error is not None and not isinstance(out.error, SlateDBError):
                raise out.error
            self.judge_left_sealed(label, before, out.error)

        started = run_stalled(self.faulty, f"stall{self._names}", pause[0], pause[1], pause[2], fn)  # type: ignore[arg-type]  # when: a str literal
        if isinstance(started, Outcome):
            done(started)
            return
        point, thread, box = started
        self.figures.pauses += 1
        self.stalls.append(Stalled(label, point, thread, box, done))

    def step_resume_stall(self) -> None:
        if not self.stalls:
            return
        s = self.stalls.pop(self.rng.randrange(len(self.stalls)))
        self.note(f"resume the stalled {s.label}")
        s.resume()

    def step_resume(self) -> None:
        self.note("Table.resume()")
        self.attempt("resume", self.actor().resume)

    def step_overwrite(self) -> None:
        keys = self.rng.sample(KEYS, self.rng.randint(0, 10))
        self._writes += 1
        rows = {k: f"o{self._writes}/{k.decode()}".encode() for k in sorted(keys)}
        enc = self.rng.choice(ENCODINGS)
        t = self.actor()
        self.note(
            f"overwrite with {len(rows)} rows, encoding {None if enc is None else enc.schema[-30:]}"
        )
        batch = pa.RecordBatch.from_pydict(
            {
                "key": pa.array(list(rows), pa.binary()),
                "value": pa.array(list(rows.values()), pa.binary()),
            }
        )
        before = self.pending_ids()
        out = self.attempt("overwrite", lambda: t.overwrite([batch], value_encoding=enc))
        if out.error is None:
            self.model.replace(rows)
            self.encoding = enc
        else:
            # all or nothing: the table shows the old contents or the new
            seen = dict(self.verifier.scan()) if self.verifier.refresh() else {}
            if seen == rows and seen != self.model.state:
                self.note("  (the failed overwrite took effect)")
                self.model.replace(rows)
                self.encoding = enc
        self.judge_left_sealed("overwrite", before, out.error)

    def step_policy(self) -> None:
        """The Dagster ``rescaling`` asset (orchestration.table_assets), run as Dagster runs it
        for this table's partition: finish pending ops, split shards over ``split_bytes`` at
        their median key, merge neighbours under ``merge_bytes``, then the table's GC with the
        configured ``gc_min_age`` and ``ingest_retention`` (0 included)."""
        import dagster as dg

        from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
        from orchestration.table_assets import rescaling

        logging.getLogger("dagster").setLevel(logging.CRITICAL)
        split_bytes = self.rng.choice((1500, 3000, 6000))
        merge_bytes = self.rng.choice((300, 1000, split_bytes))
        age = self.rng.choice(("0s", "10m", "1h"))  # never one a schedule can cross (AGES)
        retention = self.rng.choice(("0s", "10m", "7d"))
        self.note(
            f"rescaling policy: split_bytes {split_bytes}, merge_bytes {merge_bytes}, "
            f"gc_min_age {age}, ingest_retention {retention}"
        )
        managed = ManagedDatabasesResource(
            tables=[self.path],
            split_bytes=split_bytes,
            merge_bytes=merge_bytes,
            gc_min_age=age,
            ingest_retention=retention,
            max_rescale_operations=2,
        )
        before = self.pending_ids()

        def run() -> object:
            ctx = dg.build_asset_context(partition_key=self.path)
            return rescaling(ctx, store=ObjectStoreResource(url=self.url), managed=managed)

        out = self.attempt("policy", run)
        if out.error is None:
            self.note(f"  -> {out.value.metadata['summary'].text}")  # type: ignore[attr-defined]
        self.judge_left_sealed("rescaling policy", before, out.error)

    # ---- GC --------------------------------------------------------------------------------
    def step_gc(self) -> None:
        age = self.rng.choice(AGES)
        ingest_age = self.rng.choice((timedelta(0), *AGES))  # 0 the most often
        self.note(f"table GC: min_age {age}, ingest_min_age {ingest_age}")
        self.attempt("table_gc", lambda: self.actor().collect_garbage(age, ingest_age))
        if self.rng.random() < 0.5:
            self._shard_gc()

    def _shard_gc(self) -> None:
        m = self.verifier.maps.read_latest()
        grace = self.rng.choice((timedelta(0), timedelta(days=1)))
        opts = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=grace)
        self.note(
            f"shard GC (min_age 0, db_delete_grace {grace}) of {len(m.shards)} shards and "
            f"{len(m.retired)} retired"
        )
        for path in [s.db_path for s in m.shards] + list(m.retired):

            def gc(p: str = path) -> object:
                return run_gc_once(p, self.faulty, opts)

            self.attempt("shard_gc", gc)

    # ---- named snapshots -------------------------------------------------------------------
    def step_snapshot(self) -> None:
        name = f"snap{self.rng.randint(0, 2)}"
        self.note(f"named snapshot {name}")
        out = self.attempt("snapshot", lambda: self.actor().snapshot(None, name=name))
        if out.error is None:
            self.snapshots[name] = (self.encoding, dict(self.model.state))

    def step_snapshot_read(self) -> None:
        """A table opened on a named snapshot holds the rows, and says the value encoding, of
        the moment it was taken (an overwrite since may have changed both)."""
        if self.snapshots:
            self.step_snapshot_read_named(self.rng.choice(sorted(self.snapshots)))

    def step_snapshot_read_named(self, name: str) -> None:
        enc, rows = self.snapshots[name]
        snap = self.verifier.named_snapshot(name)
        if snap is None:
            raise TableViolation("snapshot", f"named snapshot {name} vanished")
        self.note(f"read named snapshot {name}")
        with Table.open(self.path, self.raw, self.options, snapshot=snap) as t:
            got = t.value_encoding
            if got != enc:
                self.breach(
                    TableViolation(
                        "snapshot-encoding",
                        f"a table opened on named snapshot {name} says its values are "
                        f"{None if got is None else got.schema} but they were written as "
                        f"{None if enc is None else enc.schema} (an overwrite changed the encoding "
                        "since): its rows decode with today's encoding",
                    )
                )
            seen = dict(t.scan())
        self.figures.checks += 1
        if seen != rows:
            d = sorted(set(seen.items()) ^ set(rows.items()))[:4]
            raise TableViolation(
                "snapshot", f"named snapshot {name} differs from the table when it was taken: {d}"
            )

    def step_snapshot_delete(self) -> None:
        if not self.snapshots:
            return
        name = self.rng.choice(sorted(self.snapshots))
        self.note(f"delete named snapshot {name}")
        if (
            self.attempt("snapshot_delete", lambda: self.actor().delete_snapshot(name)).error
            is None
        ):
            del self.snapshots[name]

    # ---- held handles ----------------------------------------------------------------------
    def step_held_read(self) -> None:
        i = self.rng.randrange(len(self.held))
        kind = self.rng.choice(("get", "get_many", "scan"))
        keys = sorted(self.rng.sample(KEYS, self.rng.randint(1, 8)))
        self.note(f"held handle h{i} (map {self.held[i].shard_map.id}): {kind} {len(keys)} keys")
        self.held_read(self.held[i], kind, keys, f"held handle h{i}")

    def step_hold_another(self) -> None:
        if len(self.held) < 4:
            self.note(f"open held handle h{len(self.held)}")
            self.held.append(Table.open(self.path, self.raw, self.held_options))
