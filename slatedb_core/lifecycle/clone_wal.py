"""WAL helpers of clones and unions (SlateDB RFC 0004, "Clones": the clone's WAL is the parent's tail,
copied): which WAL SSTs hold writes, a WAL SST clipped to a projection, and the copy (step 10)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import CloneConflict, CloneIncomplete, ObjectAlreadyExists, ObjectNotFound
from slatedb_core.keys import KeyRange
from slatedb_core.manifest.model import Manifest
from slatedb_core.sst import SstOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.location import WalLocation
from slatedb_core.wal.log import FENCE, WalLog, encode_wal_sst


def last_with_data(wal: WalLog, ids: Sequence[int], rng: KeyRange | None) -> int | None:
    """The last of ``ids`` whose WAL SST holds writes (in ``rng``), reading from the end: the
    end of a clone's WAL (:func:`slatedb_core.lifecycle.clone.wal_end`). Trailing fences
    (zero-byte objects, left by writers that opened and wrote nothing) are skipped, and so are
    SSTs with nothing in ``rng``: counting them would make an idle, fully flushed database look
    as if it had WAL data, which union refuses. ObjectNotFound when one is gone. (What a
    checkpoint of the latest state covers is :func:`slatedb_core.checkpoints.covered_wal`.)"""
    for wal_id in reversed(ids):
        data = wal.store.get(wal.path(wal_id)).data
        if clip(wal, wal_id, data, rng)[1]:
            return wal_id
    return None


def clip(wal: WalLog, wal_id: int, data: bytes, rng: KeyRange | None) -> tuple[bytes, int]:
    """The WAL SST with only the keys in ``rng``, and how many entries it keeps. A projected
    clone must not replay the parent's writes outside its range: they would reach its L0 SSTs,
    which carry no visible range. The SST is re-encoded with the clone's rows only; one left with
    none becomes a zero-byte object (SlateDB 0.17's fence: a WAL object that holds no rows)."""
    sst = wal.decode(wal_id, data, timestamps=True)  # re-encoded with its rows' timestamps
    rows = sst.entries.num_rows
    if rng is None or rng == KeyRange() or rows == 0:
        return data, rows
    keys = sst.entries.column("key")
    mask = pc.and_(
        pc.greater_equal(keys, pa.scalar(rng.start or b"", keys.type)),
        pc.less(keys, pa.scalar(rng.end, keys.type)) if rng.end is not None else True,
    )
    kept = sst.entries.filter(mask)
    if kept.num_rows == rows:
        return data, rows
    if kept.num_rows == 0:
        return FENCE, 0  # no rows for the clone: a zero-byte object, which holds none
    return encode_wal_sst(kept, SstOptions()), kept.num_rows


def start_over(dest: str) -> str:
    return (
        f"hard-destroy the unfinished {dest!r} (initialized=false; `slatedb destroy --hard`, "
        "which also releases the final checkpoints it took) and create the clone at a new path "
        "(a destroyed path keeps its tombstone, docs/clones-and-destroy.md)"
    )


def copy_wal(
    store: ObjectStore,
    parent: str,
    clone: str,
    m: Manifest,
    parent_wal: WalLocation | None = None,
) -> None:
    """Step 10. Create-if-absent: an earlier attempt's identical object is accepted, anything
    else is not ours and is refused. ``parent_wal``: where the parent's WAL is (its separate WAL
    store, SlateDB RFC 0009); the clone's copy goes to the same store, at the clone's path, as
    SlateDB's clone with a WAL object store does (the clone's manifest records it:
    ``Manifest.separate_wal_store``), so the clone's writers, opened with that WAL store as a
    table's shards are, replay it."""
    where = parent_wal or store
    src, dst = WalLog(where, parent), WalLog(where, clone)
    rng = None if m.key_range is None else KeyRange.of(m.key_range)
    for wal_id in range(m.replay_after_wal_id + 1, m.wal_id_last_seen + 1):
        try:
            data = src.store.get(src.path(wal_id)).data
        except ObjectNotFound:
            raise CloneIncomplete(
                f"WAL SST {src.path(wal_id)} needed by the clone {clone!r} is gone; "
                + start_over(clone)
            ) from None
        if rng is not None:
            data = clip(src, wal_id, data, rng)[0]
        try:
            dst.store.put_if_absent(dst.path(wal_id), data)
        except ObjectAlreadyExists:
            if dst.store.get(dst.path(wal_id)).data != data:
                raise CloneConflict(f"{dst.path(wal_id)} exists with other content") from None
