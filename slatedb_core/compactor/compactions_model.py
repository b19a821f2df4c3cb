"""What one version of the ``.compactions`` namespace holds: SlateDB 0.17's ``Compactions`` model
(schemas/compactor.fbs: ``CompactionsV1``, ``Compaction``) with the fields of ours beside it.

A compaction record here is both engines' record. Our compactor fills ``kind``, the sources,
``destination``, ``outputs`` (the output SST ids it announces before writing each one), the
timestamps and ``error``; SlateDB's compactor fills ``segment``, ``worker``, ``output_ssts``
(the outputs of a ``compacted`` or ``committed`` compaction, with their SST info) and ``context``
(subcompactions and their outputs). docs/format.md, "Compactions", maps every field to its slot.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Literal

from ulid import ULID

from slatedb_core.keys import BytesRange
from slatedb_core.manifest.model import CompactedSst

KEEP_FINISHED = 32
"""Finished compactions kept in each record, for operators; older ones are dropped."""

Kind = Literal["l0", "sorted-runs"]
Status = Literal["submitted", "scheduled", "running", "compacted", "committed", "failed"]
"""SlateDB's ``CompactionStatus``; ``committed`` is its ``Completed``. Our compactor writes
``running``, ``committed`` and ``failed``; the other three come from SlateDB's coordinator:
``submitted`` (asked for, not yet validated), ``scheduled`` (validated, for a worker to claim),
``compacted`` (outputs written, the manifest commit still to come)."""

ACTIVE: frozenset[str] = frozenset({"submitted", "scheduled", "running", "compacted"})


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """SlateDB's ``WorkerSpec``: the worker that claimed a compaction and its last heartbeat."""

    worker_id: str
    last_heartbeat_ms: int = 0


@dataclass(frozen=True, slots=True)
class Subcompaction:
    """SlateDB's ``Subcompaction`` (its RFC 0028): a key range of a compaction and its outputs."""

    range: BytesRange
    output_ssts: tuple[CompactedSst, ...] = ()


@dataclass(frozen=True, slots=True)
class CompactionContext:
    """SlateDB's ``TieredCompactionContext``: what a SlateDB worker needs to resume."""

    subcompactions: tuple[Subcompaction, ...] = ()
    retention_min_seq: int = 0


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    id: ULID
    kind: Kind
    source_view_ids: tuple[ULID, ...]
    source_run_ids: tuple[int, ...]
    destination: int
    outputs: tuple[ULID, ...] = ()
    status: Status = "running"
    created_at_ms: int = 0
    updated_at_ms: int = 0
    error: str | None = None
    # SlateDB's, kept as read so a record it wrote survives our rewrite of the namespace:
    segment: bytes = b""
    drain: bool = False  # a DrainSegmentSpec (its RFC 0024) rather than a TieredCompactionSpec
    worker: WorkerSpec | None = None
    output_ssts: tuple[CompactedSst, ...] = ()
    context: CompactionContext | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def written_output_ids(self) -> tuple[ULID, ...]:
        """Every output SST id the record names: ours announced, SlateDB's written."""
        ids = [*self.outputs, *(s.id for s in self.output_ssts)]
        if self.context is not None:
            ids.extend(s.id for sub in self.context.subcompactions for s in sub.output_ssts)
        return tuple(ids)


@dataclass(frozen=True, slots=True)
class CompactionsState:
    """One version of the namespace: the holder's epoch and its recent compactions."""

    compactor_epoch: int = 0
    compactions: tuple[CompactionRecord, ...] = ()

    def get(self, compaction_id: ULID) -> CompactionRecord | None:
        return next((c for c in self.compactions if c.id == compaction_id), None)

    def running(self) -> tuple[CompactionRecord, ...]:
        """Compactions under way: ours running, SlateDB's claimed or written but uncommitted."""
        return tuple(c for c in self.compactions if c.active and c.status != "submitted")

    def with_record(self, record: CompactionRecord) -> CompactionsState:
        """Insert or replace ``record``, dropping the oldest finished ones past KEEP_FINISHED."""
        others = [c for c in self.compactions if c.id != record.id]
        merged = [*others, record]
        finished = [c for c in merged if not c.active]
        drop = {c.id for c in finished[: max(0, len(finished) - KEEP_FINISHED)]}
        return dataclasses.replace(self, compactions=tuple(c for c in merged if c.id not in drop))
