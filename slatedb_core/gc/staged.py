"""Staged writes a crash left behind: the files a local-disk create stages beside its object
(``<name>#<digits>``, :mod:`slatedb_core.store.local_fs`) and never linked, because the writer
died between the two steps. No listing shows them and nothing references them, so without this
step a compactor killed while streaming a 256 MiB output SST leaks its bytes for good.

A write in progress rewrites its staged file as it goes, so a staged file untouched for longer
than the pass's compacted-SST ``min_age``, and never less than :data:`STAGED_MIN_AGE_S`, belongs
to no live write. Removing one still being written (a writer frozen that long) makes that
write's create fail when it links: nothing is reported written that is not. Stores that stage
nothing (S3, memory) answer without a request (:meth:`~slatedb_core.store.objectstore.
ObjectStore.sweep_staged`).
"""

from __future__ import annotations

from slatedb_core.gc.stats import GcStats
from slatedb_core.store.objectstore import ObjectStore

STAGED_MIN_AGE_S = 3600.0
"""The least age, in seconds, at which a staged file is taken for a crash's leftover, whatever
``min_age`` the pass runs with (tests and operators set 0 to collect at once; a staged file
that young may be a live write's)."""


def sweep_staged(
    stores: list[tuple[ObjectStore, str]], *, min_age_s: float, now_s: float, stats: GcStats
) -> None:
    """Remove the leftover staged files under each (store, prefix): the database's folder, and
    its WAL folder in a separate WAL store. Counted in ``stats.staged``."""
    older_than_s = max(min_age_s, STAGED_MIN_AGE_S)
    for store, prefix in stores:
        files, size = store.sweep_staged(prefix, older_than_s=older_than_s, now_s=now_s)
        stats.staged.deleted += files
        stats.staged.bytes_freed += size
