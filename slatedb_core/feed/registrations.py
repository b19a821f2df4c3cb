"""A change-feed consumer's registration record: what outlives the consumer's checkpoint, so a
consumer that comes back after its checkpoint lapsed is never taken for one that was there all
along (docs/changes.md, "Retention").

A registered consumer's checkpoint (:mod:`slatedb_core.feed.retention`) keeps its changes, and
each ingest commit marks its rows for every consumer whose checkpoint is live then
(:mod:`slatedb_core.feed.ingests`). So the ingests a consumer's feed can find by their markers
are those committed since its checkpoint last became live: its registration. The record,
``<db>/changes/<sha256 of the name>.consumer`` (:func:`~slatedb_core.layout.consumer_record_path`),
says from where: ``marked_after``, the ``last_l0_seq`` of the manifest its registration was
committed on (every ingest with seqs above it committed later, and is marked for it), the
checkpoint it was written for, and ``floor``, the cursor it last resumed from. A seq gap at or
below ``marked_after`` is settled as an unregistered feed's: the feed goes on when the
manifests prove no ingest committed there, reads an ingest that did from the manifest that
committed it (:func:`~slatedb_core.feed.ingests.unmarked_ingests`), and raises
:class:`~slatedb_core.errors.ChangesCollected` when the GC collected that manifest or its SSTs.

The record is written after the manifest update it describes, and trusted only while the
checkpoint it names is still live: a record that names another (a crash between the two
writes, a checkpoint :func:`~slatedb_core.feed.retention.carry_consumers` added, a record of an
earlier build or none) gives way to the ``last_l0_seq`` of the manifest being updated, which is
never below the truth. A wrong record can make a feed stricter, never let it skip an ingest.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from slatedb_core.errors import ObjectNotFound
from slatedb_core.layout import CONSUMER_SUFFIX, changes_dir, consumer_record_path
from slatedb_core.store.objectstore import ObjectStore

_VERSION = 1


@dataclass(frozen=True, slots=True)
class Registration:
    """A consumer's registration record (see the module docstring)."""

    consumer: str
    checkpoint: uuid.UUID
    """The consumer's checkpoint the record was written for."""
    marked_after: int
    """Every ingest that committed seqs above this since the registration is marked for the
    consumer (the ``last_l0_seq`` of the manifest the registration was committed on)."""
    floor: str | None
    """The encoded cursor the consumer last resumed from when the record was written (its last
    acknowledged position; None: it registered with none, from a snapshot)."""
    updated_s: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": _VERSION,
                "consumer": self.consumer,
                "checkpoint": str(self.checkpoint),
                "marked_after": self.marked_after,
                "floor": self.floor,
                "updated_s": self.updated_s,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Registration | None:
        """The record in ``data``; None for anything else (a record that cannot be read is
        treated as none: stricter, never wrong)."""
        try:
            doc = json.loads(data)
            reg = cls(
                doc["consumer"],
                uuid.UUID(doc["checkpoint"]),
                doc["marked_after"],
                doc["floor"],
                doc["updated_s"],
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        ok = (
            isinstance(doc, dict)
            and doc.get("v") == _VERSION
            and isinstance(reg.consumer, str)
            and type(reg.marked_after) is int
            and reg.marked_after >= 0
            and (reg.floor is None or isinstance(reg.floor, str))
            and type(reg.updated_s) is int
        )
        return reg if ok else None


def read_registration(store: ObjectStore, db_path: str, consumer: str) -> Registration | None:
    """``consumer``'s record in the database at ``db_path`` (None: none, or not one of
    ``consumer``'s)."""
    try:
        data = store.get(consumer_record_path(db_path, consumer)).data
    except ObjectNotFound:
        return None
    reg = Registration.decode(bytes(data))
    return reg if reg is not None and reg.consumer == consumer else None


def write_registration(store: ObjectStore, db_path: str, reg: Registration) -> None:
    """Write ``reg`` as its consumer's record (a plain overwrite: see the module docstring for
    why a lost race is safe)."""
    store.put(consumer_record_path(db_path, reg.consumer), reg.encode())


def delete_registration(store: ObjectStore, db_path: str, consumer: str) -> None:
    """Delete ``consumer``'s record (nothing when there is none)."""
    store.delete(consumer_record_path(db_path, consumer))


def registrations(store: ObjectStore, db_path: str) -> list[Registration]:
    """Every consumer record of the database, by consumer name (a lapsed consumer's too)."""
    out = []
    for meta in store.list(changes_dir(db_path)):
        if not meta.path.endswith(CONSUMER_SUFFIX):
            continue
        try:
            reg = Registration.decode(bytes(store.get(meta.path).data))
        except ObjectNotFound:
            continue
        if reg is not None and meta.path == consumer_record_path(db_path, reg.consumer):
            out.append(reg)
    return sorted(out, key=lambda r: r.consumer)


__all__ = [
    "Registration",
    "delete_registration",
    "read_registration",
    "registrations",
    "write_registration",
]
