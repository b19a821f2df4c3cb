"""Naming, listing and reading WAL SSTs (``<db>/wal/{id:020}.sst``, SlateDB 0.17's layout).

A WAL object is either an SST holding rows (SlateDB 0.17's SST format, ``sst_type`` WAL in
``schemas/sst.fbs``) or a *fence*: a zero-byte object, which is how SlateDB 0.17 fences (its
writer creates one, create-if-absent, at the first free id after bumping ``writer_epoch``; SlateDB
RFC 0001, "Writer Protocol"). A fence holds no rows; every reader of the WAL (replay, readers, the
clone's WAL copy) treats it so.

The objects carry no epoch. A writer that loses a create-if-absent race learns who holds the slot
from the manifest instead (:meth:`WalLog.latest_writer_epoch`): every writer bumps
``writer_epoch`` in the manifest *before* it creates its fence, so once a slot is seen taken, a
newer writer, if there is one, is already in the latest manifest (docs/manifest-and-fencing.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.layout import SST_SUFFIX, wal_dir, wal_sst_name
from slatedb_core.lsm.entries import ENTRY_SCHEMA
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.reader import TS_SCHEMA
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal.location import WalLocation, check_wal_present, listing_can_refuse

FENCE = b""
"""The bytes of a fencing WAL object: none (SlateDB 0.17's fence)."""

Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)

_AS_WRITTEN = None
"""The clock WAL rows are decoded at: none (no row expires at decode; an SST reader given a clock
decodes a row whose expire_ts is at or before it as a tombstone). SlateDB 0.17 applies a TTL
only when its compaction rewrites rows, never on a read nor a WAL replay (checked against the
wheel: an expired row reads from its WAL, memtable and L0), so a row that expired in the WAL still
reads as its value, and so it does here. Merge operands are kept as rows of their kind: reads
fold them (:mod:`slatedb_core.lsm.merge_operator`)."""

_NAME = re.compile(r"^(\d{20})" + re.escape(SST_SUFFIX) + "$")


def encode_wal_sst(
    entries: pa.RecordBatch | pa.Table, options: SstOptions, create_ts: int | None = None
) -> bytes:
    """One WAL SST holding ``entries`` (at least one row, in any order; a key may repeat): SlateDB
    0.17's WAL SST (``sst_type`` WAL in ``schemas/sst.fbs``), its rows in seq order.

    ``create_ts`` (ms since the epoch) stamps every row that has none. SlateDB 0.17 stamps each
    row it writes with its clock's tick and, replaying a WAL, carries the newest tick into the
    memtable it flushes; a replayed memtable with no tick at all fails its flush ("invalid clock
    tick, must be monotonic"), so every WAL row of ours carries one."""
    rows = in_seq_order(entries)
    if create_ts is not None and rows.num_rows:
        stamp = pa.array(np.full(rows.num_rows, create_ts, dtype=np.int64))
        at = rows.schema.get_field_index("create_ts")
        if at < 0:
            rows = rows.append_column(pa.field("create_ts", pa.int64()), stamp)
        else:
            col = rows.column(at)
            rows = rows.set_column(at, "create_ts", pc.coalesce(col, stamp))
    return encode_sst(rows, options, wal=True)[0]


def in_seq_order(rows: Rows) -> Rows:
    """``rows`` ordered by seq (stable). SlateDB 0.17 writes a WAL SST's rows in seq order and may
    repeat a key in it; replay applies rows in order, so the last row of a key must be its newest
    (SlateDB's replay keeps the highest seq). Ours are written the same way
    (one row per write, in seq order, see ``WalBuffer.to_batch``)."""
    if rows.num_rows < 2:
        return rows
    seqs = np.asarray(rows.column("seq").to_numpy(), dtype=np.uint64)  # no nulls: no copy
    if bool(np.all(seqs[1:] >= seqs[:-1])):
        return rows
    return rows.take(pa.array(np.argsort(seqs, kind="stable")))


@dataclass(frozen=True, slots=True)
class WalSst:
    id: int
    entries: pa.Table
    is_fence: bool = False
    """A zero-byte object: some writer's fence (SlateDB 0.17's), no rows."""

    @property
    def holds_rows(self) -> bool:
        return bool(self.entries.num_rows)


class WalLog:
    """The WAL of the database at ``db_path``, in the store ``where`` names (a
    :class:`~slatedb_core.wal.location.WalLocation`; a bare store: its main store holds the WAL).
    ``store`` is the store of WAL objects, ``main`` the database's main store (manifests)."""

    def __init__(self, where: WalLocation | ObjectStore, db_path: str) -> None:
        self.where = where if isinstance(where, WalLocation) else WalLocation(where)
        self.store = self.where.store
        self.main = self.where.main
        self.db_path = db_path
        self.dir = wal_dir(db_path)

    def path(self, wal_id: int) -> str:
        return f"{self.dir}/{wal_sst_name(wal_id)}"

    def parse(self, path: str) -> int | None:
        if not path.startswith(self.dir + "/"):
            return None
        m = _NAME.match(path[len(self.dir) + 1 :])
        if m is None:
            return None
        wal_id = int(m.group(1))
        return wal_id if wal_id < 2**64 else None  # 20 digits reach past u64: not a WAL SST

    def list_ids(self, after: int = 0) -> list[int]:
        """WAL ids greater than ``after``, ascending."""
        start = self.path(after) if after > 0 else None
        ids = []
        for meta in self.store.list(self.dir, start_after=start):
            wal_id = self.parse(meta.path)
            if wal_id is not None and wal_id > after:
                ids.append(wal_id)
        return ids

    def check_before_bump(self, m: Manifest) -> None:
        """:func:`~slatedb_core.wal.location.check_wal_present` for a writer about to bump the
        epoch of the latest manifest ``m``, with a LIST only when one can change the answer
        (:func:`~slatedb_core.wal.location.listing_can_refuse`): reopening a database our
        writer closed cleanly then costs no request more than before the WAL store existed."""
        if listing_can_refuse(m):
            self.list_live(m)
        else:
            check_wal_present(self.db_path, self.where, m, (), at_replay_point=None)

    def list_live(self, m: Manifest, *, latest: bool = True) -> list[int]:
        """WAL ids after ``m.replay_after_wal_id``, ascending, from one LIST that starts at the
        replay point itself; raises :class:`~slatedb_core.errors.WalStoreMissing` when they are
        not in this store (:func:`~slatedb_core.wal.location.check_wal_present`). ``latest``:
        ``m`` is the latest manifest as some writer left it (not with the caller's own bump on
        top, which hides who wrote before)."""
        r = m.replay_after_wal_id
        start = self.path(r - 1) if r > 1 else None
        ids: list[int] = []
        at_replay_point = False
        for meta in self.store.list(self.dir, start_after=start):
            wal_id = self.parse(meta.path)
            if wal_id is None:
                continue
            if wal_id > r:
                ids.append(wal_id)
            elif wal_id == r:
                at_replay_point = True
        check_wal_present(
            self.db_path,
            self.where,
            m,
            ids,
            at_replay_point=at_replay_point if latest else None,
        )
        return ids

    def check_present(self, m: Manifest, after_replay_point: Sequence[int]) -> None:
        """:func:`~slatedb_core.wal.location.check_wal_present` for a manifest that may not be
        the latest (a checkpoint's): only what ``m`` records is checked."""
        check_wal_present(self.db_path, self.where, m, after_replay_point, at_replay_point=None)

    def decode(self, wal_id: int, data: bytes, *, timestamps: bool = False) -> WalSst:
        """The WAL object ``data``: a fence, or its rows in seq order (see :func:`in_seq_order`);
        ``timestamps``: with SlateDB's ``expire_ts`` and ``create_ts`` columns (to re-encode)."""
        if len(data) == 0:
            # made here, not at import: building a pyarrow table imports pandas (about a third of
            # a second of every ``import slatedb_core``)
            empty = (TS_SCHEMA if timestamps else ENTRY_SCHEMA).empty_table()
            return WalSst(wal_id, empty, is_fence=True)
        name = self.path(wal_id)
        reader = SstReader.from_bytes(data, name, now_ms=_AS_WRITTEN)
        rows = reader.read_all(timestamps=timestamps)
        return WalSst(wal_id, in_seq_order(rows))

    def read(self, wal_id: int) -> WalSst:
        return self.decode(wal_id, self.store.get(self.path(wal_id)).data)

    def latest_writer_epoch(self) -> int:
        """``writer_epoch`` of the latest manifest: who may hold a WAL slot we found taken."""
        return ManifestStore(self.main, self.db_path).read_latest().manifest.writer_epoch
