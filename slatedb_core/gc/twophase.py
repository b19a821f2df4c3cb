"""GC of two-phase CAS (SlateDB RFC 0001, "Transactional Store Deletion"), one database at a time: called
by :mod:`slatedb_core.gc.collector` for a database whose store is a
:class:`~slatedb_core.store.twophase.TwoPhaseStore`.

It rolls forward uncommitted intents, deletes the intents of manifests at or behind the manifest
boundary that no checkpoint pins and of WAL SSTs below the replay point and at or behind the WAL
boundary (a record goes only where a new create is already refused by a boundary check), and
deletes temporary objects older than ``temp_min_age_s`` that no uncommitted intent names.
Temporary names end in ``.<32 hex>.<8 hex>``: the manifest, compactions and WAL listings parse
``^\\d{20}\\.<suffix>$`` and the GC parses ``<ULID>.sst``, so they skip them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from slatedb_core.errors import StoreError
from slatedb_core.layout import (
    COMPACTIONS_DIR,
    MANIFEST_DIR,
    MANIFEST_SUFFIX,
    join,
    sequenced_name,
    wal_dir,
    wal_sst_name,
)
from slatedb_core.store.objectstore import ObjectMeta
from slatedb_core.store.twophase import TwoPhaseStore
from slatedb_core.store.twophase_keys import is_temp_name


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


def collect_garbage(two_phase: TwoPhaseStore, db_path: str, w: GcWindow) -> TwoPhaseGcStats:
    """One pass over the records of ``db_path``: the uncommitted intents under it are completed
    first. ``w.listed`` are object listings the caller already made (``wal/``, ``compacted/``);
    ``manifest/`` and ``compactions/`` are listed here."""
    rows, inner = two_phase.rows, two_phase.inner
    stats = TwoPhaseGcStats()
    recovered: set[str] = set()
    try:
        recovered = two_phase.recover_sources(db_path)
    except StoreError as e:
        stats.failed.append(f"recovery: {e}")
    stats.recovered = len(recovered)
    mdir = join(db_path, MANIFEST_DIR)
    if w.manifest_boundary > 0:
        keep = [
            join(mdir, sequenced_name(i, MANIFEST_SUFFIX)) for i in sorted(set(w.keep_manifests))
        ]
        stats.intents_deleted += rows.delete_committed_intents(
            mdir, join(mdir, sequenced_name(w.manifest_boundary, MANIFEST_SUFFIX)), keep
        )
    wal_limit = min(w.wal_boundary, w.wal_floor - 1)
    if wal_limit > 0:
        wdir = wal_dir(db_path)
        stats.intents_deleted += rows.delete_committed_intents(
            wdir, join(wdir, wal_sst_name(wal_limit))
        )
    candidates = [m for m in w.listed if is_temp_name(m.path) and m.path not in recovered]
    for sub in (MANIFEST_DIR, COMPACTIONS_DIR):
        candidates += [m for m in inner.list(join(db_path, sub)) if is_temp_name(m.path)]
    old = [
        m for m in candidates if w.now_s - m.last_modified.timestamp() >= two_phase.temp_min_age_s
    ]
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
