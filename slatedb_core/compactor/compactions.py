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
the records its predecessors left ``running`` (they can never commit: the manifest fences them) as
``committed`` if their outputs made it into the manifest, ``failed`` otherwise.

Ordering rule for readers such as the GC: read this namespace BEFORE the manifest. A compaction is
marked ``committed`` only after its manifest commit, so "not running here" then implies "already in
the manifest you read next".

Payload: UTF-8 JSON inside ``envelope.seal(b"SDBC", 1, ...)``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ulid import ULID

from slatedb_core.errors import CorruptionError, Fenced
from slatedb_core.layout import COMPACTIONS_DIR, COMPACTIONS_SUFFIX
from slatedb_core.manifest.model import Manifest
from slatedb_core.meta.envelope import open_sealed, seal
from slatedb_core.meta.sequenced import FIRST_ID, SequencedStore
from slatedb_core.meta.versioned import RetryPolicy, VersionedStore
from slatedb_core.store.objectstore import ObjectStore

MAGIC = b"SDBC"
VERSION = 1
KEEP_FINISHED = 32
"""Finished compactions kept in each record, for operators; older ones are dropped."""

Kind = Literal["l0", "sorted-runs"]
Status = Literal["running", "committed", "failed"]
_KINDS = ("l0", "sorted-runs")
_STATUSES = ("running", "committed", "failed")


def now_ms() -> int:
    return int(time.time() * 1000)


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

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "kind": self.kind,
            "source_view_ids": [str(v) for v in self.source_view_ids],
            "source_run_ids": list(self.source_run_ids),
            "destination": self.destination,
            "outputs": [str(o) for o in self.outputs],
            "status": self.status,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "error": self.error,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> CompactionRecord:
        """Strict: exactly the types ``to_json`` writes, so a decoded record re-encodes to itself
        (no ``True`` read as 1, ``1.5`` truncated, ``"12"`` parsed or a 2**64 epoch let through)."""
        kind, status = d["kind"], d["status"]
        if kind not in _KINDS or status not in _STATUSES:
            raise ValueError(f"unknown kind {kind!r} or status {status!r}")
        error = d.get("error")
        if error is not None and type(error) is not str:
            raise ValueError(f"error must be a string or null, got {type(error).__name__}")
        return CompactionRecord(
            id=_ulid(d["id"]),
            kind=kind,
            source_view_ids=tuple(_ulid(v) for v in _list(d["source_view_ids"])),
            source_run_ids=tuple(_u64(r) for r in _list(d["source_run_ids"])),
            destination=_u64(d["destination"]),
            outputs=tuple(_ulid(o) for o in _list(d["outputs"])),
            status=status,
            created_at_ms=_u64(d["created_at_ms"]),
            updated_at_ms=_u64(d["updated_at_ms"]),
            error=error,
        )


def _u64(value: object) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise ValueError(f"expected a u64, got {value!r:.40}")
    return value


def _ulid(value: object) -> ULID:
    if type(value) is not str:
        raise ValueError(f"expected a ULID string, got {type(value).__name__}")
    return ULID.from_str(value)


def _list(value: object) -> list[Any]:
    if type(value) is not list:
        raise ValueError(f"expected a list, got {type(value).__name__}")
    return value


@dataclass(frozen=True, slots=True)
class CompactionsState:
    """One version of the namespace: the holder's epoch and its recent compactions."""

    compactor_epoch: int = 0
    compactions: tuple[CompactionRecord, ...] = ()

    def get(self, compaction_id: ULID) -> CompactionRecord | None:
        return next((c for c in self.compactions if c.id == compaction_id), None)

    def running(self) -> tuple[CompactionRecord, ...]:
        return tuple(c for c in self.compactions if c.status == "running")

    def with_record(self, record: CompactionRecord) -> CompactionsState:
        """Insert or replace ``record``, dropping the oldest finished ones past KEEP_FINISHED."""
        others = [c for c in self.compactions if c.id != record.id]
        merged = [*others, record]
        finished = [c for c in merged if c.status != "running"]
        drop = {c.id for c in finished[: max(0, len(finished) - KEEP_FINISHED)]}
        return dataclasses.replace(
            self, compactions=tuple(c for c in merged if c.id not in drop)
        )


def encode_state(state: CompactionsState) -> bytes:
    body = {
        "compactor_epoch": state.compactor_epoch,
        "compactions": [c.to_json() for c in state.compactions],
    }
    return seal(MAGIC, VERSION, json.dumps(body, sort_keys=True).encode("utf-8"))


def decode_state(data: bytes, name: str) -> CompactionsState:
    opened = open_sealed(data, magic=MAGIC, name=name, versions=frozenset({VERSION}))
    try:
        body = json.loads(opened.payload.decode("utf-8"))
        return CompactionsState(
            compactor_epoch=_u64(body["compactor_epoch"]),
            compactions=tuple(CompactionRecord.from_json(c) for c in _list(body["compactions"])),
        )
    # RecursionError: deeply nested JSON; OverflowError: a float such as Infinity or 1e400.
    except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as e:
        raise CorruptionError(name, f"malformed compactions record: {e}") from None


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
    return {o for c in latest[1].running() for o in c.outputs}


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
                done = sources_gone and all(o in present for o in c.outputs)
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
