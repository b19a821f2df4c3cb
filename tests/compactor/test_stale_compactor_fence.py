"""A replaced compactor whose base GC collected is fenced, not committed (the manifest update loop)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from ulid import ULID

from slatedb_core.compactor.compactions import CompactionRecord, CompactionsStore, compactions_seq
from slatedb_core.errors import Fenced, ObjectNotFound
from slatedb_core.meta.sequenced import SequencedEntry
from slatedb_core.meta.versioned import collect_old_versions
from slatedb_core.store.objectstore import ObjectStore


# ---- the shared update loop: attacks it survives -----------------------------------------------
def _running_record() -> CompactionRecord:
    return CompactionRecord(
        id=ULID(),
        kind="l0",
        source_view_ids=(),
        source_run_ids=(),
        destination=0,
        outputs=(ULID(),),
    )


def test_held_a_stale_compactor_whose_base_gc_collected_is_fenced_not_committed(
    mem: ObjectStore,
) -> None:
    """A replaced compactor (epoch 1) still holds id 1 as its base; the new one (epoch 2) wrote
    2..4 and GC collected 1..3. The stale put re-creates id 2 behind the boundary: it must be
    void (deleted) and the retry must meet the fence, never report success.

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    stale = CompactionsStore(mem, "db", epoch=1)
    stale.put(_running_record())  # id 1
    newer = CompactionsStore(mem, "db", epoch=2)
    for _ in range(3):
        newer.put(_running_record())  # ids 2, 3, 4
    seq = compactions_seq(mem, "db")
    entries = seq.list()

    def delete(doomed: Sequence[SequencedEntry]) -> None:
        for e in doomed:
            mem.delete(e.path)

    collect_old_versions(
        seq.boundary, entries, entries[-1].id, min_age_s=0, now_s=time.time() + 60, delete=delete
    )
    assert [e.id for e in seq.list()] == [4]
    with pytest.raises(Fenced):
        stale.put(_running_record())
    assert [e.id for e in seq.list()] == [4]
    with pytest.raises(ObjectNotFound):
        seq.read(2)
