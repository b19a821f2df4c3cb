"""GC of two-phase CAS (seed 001 "Transactional Store Deletion"), one database at a time: called
by :mod:`slatedb_core.gc.collector` through
:meth:`slatedb_core.store.twophase.TwoPhaseStore.collect_garbage`.

It rolls forward uncommitted intents, deletes the intents of manifests at or behind the manifest
boundary that no checkpoint pins and of WAL SSTs below the replay point and at or behind the WAL
boundary (a record goes only where a new create is already refused by a boundary check), and
deletes temporary objects older than ``temp_min_age_s`` that no uncommitted intent names.
Temporary names end in ``.<32 hex>.<8 hex>``: the manifest, compactions and WAL listings parse
``^\\d{20}\\.<suffix>$`` and the GC parses ``<ULID>.sst``, so they skip them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from slatedb_core.errors import StoreError
from slatedb_core.layout import join
from slatedb_core.store.checksum import crc32
from slatedb_core.store.objectstore import ObjectMeta, ObjectStore
from slatedb_core.store.twophase_keys import KeyedRows

TEMP = re.compile(r"\.([0-9a-f]{32})\.([0-9a-f]{8})$")
DEFAULT_TEMP_MIN_AGE_S = 24 * 3600.0
"""Seed 001: "any other file ... older than a day"."""


def temp_name(dest: str, data: bytes) -> str:
    return f"{dest}.{uuid.uuid4().hex}.{crc32(data):08x}"


def is_temp_name(path: str) -> bool:
    return TEMP.search(path) is not None


@dataclass
class TwoPhaseGcStats:
    recovered: int = 0
    intents_deleted: int = 0
    temps_deleted: int = 0
    failed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GcWindow:
    """What the GC pass of the database found safe to forget (see the module docstring)."""

    manifest_boundary: int
    keep_manifests: Iterable[int]
    wal_boundary: int
    wal_floor: int
    listed: Iterable[ObjectMeta]
    now_s: float


def collect_garbage(
    rows: KeyedRows,
    inner: ObjectStore,
    recover: Callable[[str], set[str]],
    temp_min_age_s: float,
    db_path: str,
    w: GcWindow,
) -> TwoPhaseGcStats:
    """One pass over the records of ``db_path``; ``recover(prefix)`` completes the uncommitted
    intents under it and returns their sources. ``w.listed`` are object listings the caller
    already made (``wal/``, ``compacted/``); ``manifest/`` and ``compactions/`` are listed here."""
    stats = TwoPhaseGcStats()
    recovered: set[str] = set()
    try:
        recovered = recover(db_path)
    except StoreError as e:
        stats.failed.append(f"recovery: {e}")
    stats.recovered = len(recovered)
    mdir = join(db_path, "manifest")
    if w.manifest_boundary > 0:
        keep = [f"{mdir}/{i:020d}.manifest" for i in sorted(set(w.keep_manifests))]
        stats.intents_deleted += rows.delete_committed_intents(
            mdir, f"{mdir}/{w.manifest_boundary:020d}.manifest", keep
        )
    wal_limit = min(w.wal_boundary, w.wal_floor - 1)
    if wal_limit > 0:
        wdir = join(db_path, "wal")
        stats.intents_deleted += rows.delete_committed_intents(
            wdir, f"{wdir}/{wal_limit:020d}.sst"
        )
    candidates = [m for m in w.listed if is_temp_name(m.path) and m.path not in recovered]
    for sub in ("manifest", "compactions"):
        candidates += [m for m in inner.list(join(db_path, sub)) if is_temp_name(m.path)]
    old = [m for m in candidates if w.now_s - m.last_modified.timestamp() >= temp_min_age_s]
    if old:
        pending = {i.source for i in rows.pending_intents(db_path)}
        for m in old:
            if m.path in pending:
                continue
            try:
                inner.delete(m.path)
                stats.temps_deleted += 1
            except StoreError as e:
                stats.failed.append(f"{m.path}: {e}")
    return stats
