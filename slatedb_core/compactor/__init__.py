"""Compaction: size-tiered scheduling, streamed merges, fenced commits, the ``.compactions`` record.

Layers, each importing only those above it in this list:

* :mod:`~slatedb_core.compactor.compactions`: the ``.compactions`` namespace (what is in flight);
* :mod:`~slatedb_core.compactor.scheduler`: manifest -> next plan, pure;
* :mod:`~slatedb_core.compactor.executor`: plan -> output SSTs -> one fenced manifest commit;
* :mod:`~slatedb_core.compactor.compactor`: epochs, passes, the polling :class:`Compactor`.
"""

from __future__ import annotations

from slatedb_core.compactor.compactions import (
    CompactionRecord,
    CompactionsState,
    CompactionsStore,
    in_flight_output_ids,
    read_latest_state,
)
from slatedb_core.compactor.compactor import CompactionStats, Compactor, run_compaction_once
from slatedb_core.compactor.executor import CompactionExecutor, CompactionResult, apply_compaction
from slatedb_core.compactor.scheduler import CompactionPlan, plan_compaction
from slatedb_core.errors import CompactionCancelled, CompactionSourceChanged

__all__ = [
    "CompactionCancelled",
    "CompactionExecutor",
    "CompactionPlan",
    "CompactionRecord",
    "CompactionResult",
    "CompactionSourceChanged",
    "CompactionStats",
    "CompactionsState",
    "CompactionsStore",
    "Compactor",
    "apply_compaction",
    "in_flight_output_ids",
    "plan_compaction",
    "read_latest_state",
    "run_compaction_once",
]
