"""The model of a table-level schedule (:mod:`tests.sim.table_harness`): what the table must hold
(every acknowledged write, every applied batch) and the judgements on what it shows.

The schedule is sequential (a stalled rescale is parked while the main thread acts), so the
model is exact: ``state`` is the table's content after every step. Batches of an exactly-once
app (``AppVersion``) are tracked row by row: which keys some job of the batch committed, and
whether the batch was reported applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tests.sim.recorder import InvariantViolation

KEYS: tuple[bytes, ...] = tuple(b"k%03d" % i for i in range(48))
"""The schedule's key space (split points are drawn from it)."""


class TableViolation(InvariantViolation):
    """An invariant of the table layer broke. ``invariant`` names which (the campaign reports
    the first failing seed per name)."""

    def __init__(
        self, invariant: str, message: str, found: list[tuple[str, str]] | None = None
    ) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant
        self.detail = message
        self.found = found if found is not None else [(invariant, message)]
        """Every invariant the schedule broke, in order (soft ones did not stop it)."""


SOFT = frozenset({"stale-handle", "held-handle-error", "snapshot-encoding"})
"""Invariants whose breach leaves the model exact (a read showed something wrong; nothing was
written): the schedule records the first breach of each and goes on, so that one schedule can
find several holes."""


def show(v: bytes | None) -> str:
    return "absent" if v is None else v.decode(errors="replace")


@dataclass
class Batch:
    """One exactly-once batch (app id, version): its rows and which keys its jobs committed."""

    app: str
    version: int
    rows: dict[bytes, bytes | None]
    written: set[bytes] = field(default_factory=set)
    applied: bool = False
    superseded: bool = False
    """An overwrite replaced the table while the batch was partly committed: its remaining rows
    are no longer owed (the overwrite's records say the batch is applied everywhere)."""


@dataclass
class TableModel:
    state: dict[bytes, bytes] = field(default_factory=dict)
    batches: dict[tuple[str, int], Batch] = field(default_factory=dict)
    commits: dict[tuple[str, int], int] = field(default_factory=dict)
    """(job id, shard id) -> the manifest id of that job's commit of that shard."""
    checks: int = 0

    # ---- writes ----------------------------------------------------------------------------
    def apply(self, rows: Mapping[bytes, bytes | None]) -> None:
        for k, v in rows.items():
            if v is None:
                self.state.pop(k, None)
            else:
                self.state[k] = v

    def replace(self, rows: Mapping[bytes, bytes]) -> None:
        """An overwrite committed: the table holds exactly ``rows``."""
        self.state = dict(rows)
        for b in self.batches.values():
            if not b.applied and b.written:
                b.superseded = True

    def batch(self, app: str, version: int, rows: Mapping[bytes, bytes | None]) -> Batch:
        return self.batches.setdefault((app, version), Batch(app, version, dict(rows)))

    def committed(
        self,
        job: str,
        shard_id: int,
        manifest_id: int,
        batch: Batch | None,
        rows: Mapping[bytes, bytes | None],
    ) -> None:
        """A commit of ``job`` reported shard ``shard_id`` written (by this attempt, or by an
        earlier attempt of the job, whose commit is reported again): the first report applies
        the rows; a later one must name the same manifest (0: unknown)."""
        self.checks += 1
        first = self.commits.get((job, shard_id))
        if first is not None:
            if manifest_id and first and manifest_id != first:
                raise TableViolation(
                    "duplicate-apply",
                    f"job {job} committed shard {shard_id} twice (manifests {first} and "
                    f"{manifest_id}): its rows were applied again over later writes",
                )
            return
        self.commits[(job, shard_id)] = manifest_id
        if batch is not None:
            again = batch.written & set(rows)
            if again:
                raise TableViolation(
                    "duplicate-apply",
                    f"batch {batch.app}/{batch.version}: keys {sorted(again)[:4]} committed by a "
                    f"second job (job {job}, shard {shard_id}): the batch applied twice",
                )
            batch.written |= set(rows)
        self.apply(rows)

    def reported_applied(self, batch: Batch, job: str) -> None:
        """A job of ``batch`` finished with every shard written or skipped: each row of the
        batch must have been committed by some job of it."""
        self.checks += 1
        batch.applied = True
        if batch.superseded:
            return
        missing = sorted(set(batch.rows) - batch.written)
        if missing:
            raise TableViolation(
                "batch-lost",
                f"job {job} reported batch {batch.app}/{batch.version} applied, but no job of it "
                f"ever committed keys {[k.decode() for k in missing[:6]]} ({len(missing)} of "
                f"{len(batch.rows)} rows): silently lost",
            )

    # ---- judgements ------------------------------------------------------------------------
    def diff(self, seen: Mapping[bytes, bytes], keys: Iterable[bytes] | None = None) -> list[str]:
        """Differences of ``seen`` (key -> value; absent = no row) from the model, over ``keys``
        (all keys when None)."""
        self.checks += 1
        ks = sorted(set(self.state) | set(seen)) if keys is None else list(keys)
        return [
            f"{k.decode()}: saw {show(seen.get(k))}, expected {show(self.state.get(k))}"
            for k in ks
            if seen.get(k) != self.state.get(k)
        ]
