"""Which compacted SSTs a GC pass may delete: those no live manifest references, older than the
cutoffs, and the one cutoff SlateDB 0.17's GC keeps that ours needs too beside SlateDB's actors.

Our writers and compactors follow the compacted-SST boundary protocol (SlateDB RFC 0026;
docs/gc-and-boundaries.md), so our GC may delete any unreferenced SST at ``min_age`` 0. SlateDB's
do not: they write an SST and only then commit the manifest naming it. While one of them may hold
the database, our GC applies SlateDB's own cutoff too (docs/format.md, "What each engine ignores
of the other's").
"""

from __future__ import annotations

from ulid import ULID

from slatedb_core.compactor.compactions_model import CompactionsState
from slatedb_core.manifest.model import Manifest

_UNBOUNDED_MS = 2**48


def slatedb_cutoff_ms(m: Manifest, record: tuple[int, CompactionsState] | None) -> int:
    """The newest ULID millisecond a compacted SST may have and still be deleted, by SlateDB
    0.17's own GC rule, while a SlateDB writer or compactor may hold the database (its epoch is
    not one our engine took: ``Manifest.our_writer_epoch``). As SlateDB's GC does, keep every SST
    from the newest L0 the manifest names (or, with L0 empty, its last compacted L0 view) onward,
    and from the oldest compaction its record lists onward. No record holds nothing back: a
    compactor records a compaction before writing its outputs, and the record is read after
    ``compacted/`` is listed. Unbounded when only our actors hold the database."""
    cutoff = _UNBOUNDED_MS
    if m.our_writer_epoch != m.writer_epoch:
        newest = max((v.sst_id.milliseconds for v in m.l0), default=None)
        if newest is None and m.last_compacted_l0_view_id is not None:
            newest = m.last_compacted_l0_view_id.milliseconds
        cutoff = min(cutoff, (newest or 0) - 1)
    if m.our_compactor_epoch != m.compactor_epoch and record is not None:
        oldest = min((c.id.milliseconds for c in record[1].compactions), default=None)
        if oldest is not None:
            cutoff = min(cutoff, oldest - 1)
    return cutoff


def referenced(m: Manifest) -> set[ULID]:
    """Every SST id ``m`` references: by id, ``original_id`` or view."""
    live = {sst.id for sst in m.ssts}
    live.update(sst.original_id for sst in m.ssts if sst.original_id is not None)
    live.update(v.sst_id for v in m.l0)
    live.update(v.sst_id for run in m.compacted for v in run.views)
    return live
