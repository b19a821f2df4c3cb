"""The ``.compactions`` namespace: what the compactor is doing, durably, for the GC and operators.

The manifest only learns about a compaction's output SSTs at the very end, in one commit. Until
then those SSTs are unreferenced objects under ``compacted/`` that a garbage collector would delete.
So the compactor records each compaction here first, and announces every output id *before* it
writes the SST; the GC subtracts :func:`in_flight_output_ids` from what it may delete.

Each state change is a new sequenced object ``<db>/compactions/{id:020}.compactions`` created with
create-if-absent and checked against ``gc/compactions.boundary`` (SlateDB RFC 0026), through the
update loop manifests use (:mod:`slatedb_core.meta.versioned`: a loser backs off, then retries on
the latest record).
The record carries the writer's ``compactor_epoch``: a compactor that finds a newer epoch in the
latest record has been replaced and raises :class:`Fenced`. A new compactor's first record closes
the compactions its predecessors left under way (they can never commit: the manifest fences them)
as ``committed`` if their outputs made it into the manifest, ``failed`` otherwise; SlateDB's
``submitted`` requests are left for a SlateDB coordinator to validate.

Ordering rule for readers such as the GC: read this namespace BEFORE the manifest. A compaction is
marked ``committed`` only after its manifest commit, so "not running here" then implies "already in
the manifest you read next".

The bytes are SlateDB 0.17's (:mod:`slatedb_core.compactor.compactions_codec`), so SlateDB's
compactor and ours can take turns on one database (docs/format.md, "Compactions").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from ulid import ULID

from slatedb_core.compactor.compactions_codec import decode_state, encode_state
from slatedb_core.compactor.compactions_model import (
    KEEP_FINISHED,
    CompactionRecord,
    CompactionsState,
    Kind,
    Status,
    now_ms,
)
from slatedb_core.errors import Fenced
from slatedb_core.layout import COMPACTIONS_DIR, COMPACTIONS_SUFFIX
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.sequenced import FIRST_ID, SequencedStore
from slatedb_core.meta.versioned import RetryPolicy, VersionedStore
from slatedb_core.store.objectstore import ObjectStore

__all__ = [
    "KEEP_FINISHED",
    "CompactionRecord",
    "CompactionsState",
    "CompactionsStore",
    "Kind",
    "Status",
    "StoredState",
    "compactions_seq",
    "decode_state",
    "encode_state",
    "in_flight_output_ids",
    "now_ms",
    "read_latest_state",
]


def compactions_seq(store: ObjectStore, db_path: str) -> SequencedStore:
    return SequencedStore(store, db_path, COMPACTIONS_DIR, COMPACTIONS_SUFFIX)


def read_latest_state(store: ObjectStore, db_path: str) -> tuple[int, CompactionsState] | None:
    seq = compactions_seq(store, db_path)
    found = seq.read_latest()
    if found is None:
        return None
    object_id, data = found
    return object_id, decode_state(data, seq.path(object_id))


def in_flight_output_ids(store: ObjectStore, db_path: str) -> set[ULID]:
    """Output SST ids of compactions still running per the latest record (empty if none).

    Call it BEFORE reading the manifest (see the module doc), and keep a min-age rule for
    ``compacted/`` objects too: an id is announced a moment before its SST is written, but a GC
    pass can read this namespace before the announcement and list the object after the write.
    """
    latest = read_latest_state(store, db_path)
    if latest is None:
        return set()
    return {o for c in latest[1].running() for o in c.written_output_ids()}


StateChange = Callable[[CompactionsState], CompactionsState]


class StoredState(NamedTuple):
    """A version of the namespace: its id (0 before the first record) and its state."""

    id: int
    state: CompactionsState


MAX_ATTEMPTS = 50


class CompactionsStore:
    """One compactor's fenced writer of the namespace, optimistic on its last known version."""

    def __init__(
        self,
        store: ObjectStore,
        db_path: str,
        epoch: int,
        *,
        max_attempts: int = MAX_ATTEMPTS,
    ) -> None:
        self.seq = compactions_seq(store, db_path)
        self.epoch = epoch
        self._versions: VersionedStore[StoredState, CompactionsState] = VersionedStore(
            self.seq,
            what=f"compactions update of {db_path!r}",
            read_latest=self._read_latest,
            decode=self._decode,
            encode=lambda object_id, state, _base: (
                encode_state(state),
                StoredState(object_id, state),
            ),
            retry=RetryPolicy(max_attempts=max_attempts),
        )
        self._base: StoredState | None = None

    @property
    def state(self) -> CompactionsState:
        return self._base.state if self._base is not None else CompactionsState()

    def _decode(self, object_id: int, data: bytes) -> StoredState:
        return StoredState(object_id, decode_state(data, self.seq.path(object_id)))

    def _read_latest(self) -> StoredState:
        found = self.seq.read_latest()
        if found is None:
            return StoredState(FIRST_ID - 1, CompactionsState())
        return self._decode(*found)

    def _check_fence(self, base: StoredState) -> None:
        if base.state.compactor_epoch > self.epoch:
            raise Fenced("compactor", self.epoch, base.state.compactor_epoch)

    def update(self, change: StateChange) -> CompactionsState:
        """Commit ``change(latest)`` as the next id, re-applying it to newer versions on conflict
        (after backing off); a record behind the GC boundary is void, deleted and retried."""
        self._base = self._versions.update(
            lambda base: dataclasses.replace(change(base.state), compactor_epoch=self.epoch),
            base=self._base,
            fence=self._check_fence,
        )
        return self._base.state

    def take_over(self, manifest: Manifest) -> CompactionsState:
        """First record of a new holder: stamps our epoch and closes predecessors' running
        compactions, judged against ``manifest`` (read after our epoch bump)."""
        present = {s.id for s in manifest.ssts}
        l0_views = {v.view_id for v in manifest.l0}
        runs = {r.id for r in manifest.compacted}

        def close(state: CompactionsState) -> CompactionsState:
            for c in state.running():
                sources_gone = not any(v in l0_views for v in c.source_view_ids) and not any(
                    r in runs for r in c.source_run_ids
                )
                outputs = c.written_output_ids()
                done = sources_gone and all(o in present for o in outputs)
                state = state.with_record(
                    dataclasses.replace(
                        c,
                        status="committed" if done else "failed",
                        updated_at_ms=now_ms(),
                        error=None if done else "abandoned by a fenced or crashed compactor",
                    )
                )
            return state

        return self.update(close)

    def put(self, record: CompactionRecord) -> CompactionsState:
        return self.update(lambda s: s.with_record(record))
