"""The seqs a table ingest stages its rows at (docs/format.md, "Ingested SSTs").

SlateDB 0.17 orders a key's versions by seq, not by LSM position, so rows a table ingest
commits must carry seqs above everything the shard held before the commit, and ascending with
the order the commit attaches its sources in. A job planned at a shard's ``last_l0_seq`` ``L``
stages run ``r`` of input partition ``p`` at ``base + (p << RUN_BITS) + r`` with ``base``
:data:`SEQ_GAP` above the highest ``L`` of the table's shards; the commit links the staged SSTs
as they are when its writer is still below their seqs
(:meth:`~slatedb_core.writer.ingest.WriterIngest.ingest_ssts`), else re-encodes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from slatedb_core.errors import DatabaseDestroyed
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.table.shardmap import Shard
from slatedb_core.writer.ingest import MAX_STATED_SEQ

__all__ = ["MAX_STATED_SEQ", "RUN_BITS", "SEQ_GAP", "plan_seq_base", "staged_seq", "usable_seqs"]

SEQ_GAP = 1 << 32
"""How far above the shards' ``last_l0_seq`` at planning a job's staged seqs start: the writes a
shard takes while the job runs would have to outnumber it before the commit has to re-encode."""

RUN_BITS = 12
"""A staged SST's seq: the job's base + (partition << RUN_BITS) + run."""

_HEADROOM = 1 << (31 + RUN_BITS + 1)
"""Room above a job's base for the staged seqs of every input partition (Spark numbers them
with 32-bit ints) and their runs: a base closer than this to :data:`MAX_STATED_SEQ` is not
used (the job stages at seq 0 and every commit re-encodes)."""


def plan_seq_base(store: ObjectStore, shards: Sequence[Shard]) -> int:
    """The base of a job's staged seqs: :data:`SEQ_GAP` above the highest ``last_l0_seq`` of
    the ``shards``' latest manifests (read concurrently), or 0 when the staged seqs could pass
    :data:`MAX_STATED_SEQ` from there."""

    def last_seq(shard: Shard) -> int:
        try:
            stored = ManifestStore(store, shard.db_path).try_read_latest()
        except DatabaseDestroyed:
            return 0
        return 0 if stored is None else stored.manifest.last_l0_seq

    with ThreadPoolExecutor(max_workers=min(16, max(1, len(shards)))) as pool:
        highest = max(pool.map(last_seq, shards), default=0)
    base = highest + SEQ_GAP
    return base if base + _HEADROOM <= MAX_STATED_SEQ else 0


def staged_seq(seq_base: int, partition: int, run: int) -> int:
    """The seq of every row run ``run`` of input partition ``partition`` stages (0 without a
    base, or where it would pass :data:`MAX_STATED_SEQ`)."""
    if not seq_base:
        return 0
    seq = seq_base + (partition << RUN_BITS) + run
    return seq if 0 < seq <= MAX_STATED_SEQ else 0


def usable_seqs(seqs: Sequence[int] | None) -> Sequence[int] | None:
    """The staged seqs a commit states to ``Db.ingest_ssts``: None (re-encode) unless every
    source has one it can take."""
    if seqs is None or not all(0 < s <= MAX_STATED_SEQ for s in seqs):
        return None
    return seqs
