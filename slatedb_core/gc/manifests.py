"""The manifests a garbage-collection pass collects: old ones no unexpired checkpoint pins, never
the latest, each deleted only once ``manifest/``'s boundary covers it (SlateDB RFC 0026).

The boundary target is the largest listed id older than ``min_age`` except the latest. It is
advanced *before* any delete: a writer stalled between reading manifest N and creating N+1 could
otherwise "succeed" after this pass deleted the N+1 it should have collided with
(docs/gc-and-boundaries.md). The procedure is
:func:`~slatedb_core.meta.versioned.collect_old_versions`, shared with the compactions records
and the shard map.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from slatedb_core.gc.deletes import Deleter
from slatedb_core.gc.stats import GcStats, KindStats
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.meta.sequenced import SequencedEntry
from slatedb_core.meta.versioned import collect_old_versions


def delete_entries(deleter: Deleter, into: KindStats) -> Callable[[Sequence[SequencedEntry]], None]:
    """A ``delete`` for :func:`~slatedb_core.meta.versioned.collect_old_versions` that deletes
    listed versions through ``deleter``, counted in ``into``."""
    return lambda doomed: deleter.delete([(e.path, e.size) for e in doomed], into)


def collect_manifests(
    manifests: ManifestStore,
    entries: Sequence[SequencedEntry],
    latest_id: int,
    pinned: set[int],
    *,
    min_age_s: float,
    now_s: float,
    deleter: Deleter,
    stats: GcStats,
) -> None:
    """Collect the listed manifests ``entries`` behind ``latest_id``, keeping ``pinned``."""
    # The listed latest stops being the latest once this pass committed a newer manifest
    # (checkpoint removal, a barrier); it can then go in this same pass.
    latest_id = max(latest_id, entries[-1].id)
    boundary = manifests.seq.boundary
    durable = collect_old_versions(
        boundary,
        entries,
        latest_id,
        min_age_s=min_age_s,
        now_s=now_s,
        delete=delete_entries(deleter, stats.manifest),
        keep=pinned,
    )
    stats.manifest_boundary = boundary.read() if durable is None else durable
