"""The ``.compactions`` records a garbage-collection pass collects: the same boundary-first
procedure as manifests (SlateDB RFC 0026), never the latest record.

The latest record is the compactor's current state (its compactions in flight, which the SlateDB
cutoff of :mod:`slatedb_core.gc.cutoffs` reads), so only older records go. A database no compactor
has run on has no records and no boundary: the step costs nothing there.
"""

from __future__ import annotations

from collections.abc import Sequence

from slatedb_core.gc.deletes import Deleter
from slatedb_core.gc.manifests import delete_entries
from slatedb_core.gc.stats import GcStats
from slatedb_core.meta.sequenced import SequencedEntry, SequencedStore
from slatedb_core.meta.versioned import collect_old_versions


def collect_compactions_records(
    compactions: SequencedStore,
    entries: Sequence[SequencedEntry],
    *,
    min_age_s: float,
    now_s: float,
    deleter: Deleter,
    stats: GcStats,
) -> None:
    """Collect the listed records ``entries`` behind the newest one."""
    if not entries:
        return  # no compactor has run: no boundary to read or move
    boundary = compactions.boundary
    durable = collect_old_versions(
        boundary,
        entries,
        entries[-1].id,
        min_age_s=min_age_s,
        now_s=now_s,
        delete=delete_entries(deleter, stats.compactions),
    )
    stats.compactions_boundary = boundary.read() if durable is None else durable
