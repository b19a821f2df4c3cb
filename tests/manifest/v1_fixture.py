"""A ManifestV1 writer for tests, built straight from SlateDB's ``schemas/manifest.fbs``,
``schemas/sst.fbs`` and ``schemas/common.fbs`` with the ``flatbuffers`` package's Builder (issue
38, item 5).

It shares nothing with :mod:`slatedb_core.manifest` (neither its tables nor its FlatBuffers
writer): every slot number below is the field's position in the ``.fbs`` table, counted from 0.
What it writes is what SlateDB's V1 encoder writes: the big-endian u16 ``1``, then a FlatBuffers
buffer whose root is ``ManifestV1`` (no file identifier).

The input is a :class:`V1Manifest` spelling out the V1 fields; :func:`from_model` fills one
from a decoded :class:`~slatedb_core.manifest.model.Manifest` the way SlateDB's V1 encoder fills
one from its own model (one ``CompactedSsTable`` per view, the view's SST and visible range;
``l0_last_compacted`` the SST of the last compacted L0 view).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

import flatbuffers
from flatbuffers import number_types as N
from ulid import ULID

from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest.model import Manifest, SstInfo

V1_PREFIX = struct.pack(">H", 1)

# --- slots, from the .fbs (field order in each table) ---------------------------------------
# common.fbs
UUID_HIGH, UUID_LOW = 0, 1  # table Uuid / table Ulid: high, low (uint64)
BOUND_KEY, BOUND_TYPE = 0, 1  # table BytesBound: key [ubyte], bound_type BoundType (byte)
RANGE_START, RANGE_END = 0, 1  # table BytesRange: start_bound, end_bound
BOUND_TYPE_CODE = {BoundKind.UNBOUNDED: 1, BoundKind.INCLUDED: 2, BoundKind.EXCLUDED: 3}
# sst.fbs, table SsTableInfo
(
    INFO_FIRST_ENTRY,
    INFO_INDEX_OFFSET,
    INFO_INDEX_LEN,
    INFO_FILTER_OFFSET,
    INFO_FILTER_LEN,
    INFO_COMPRESSION,
    INFO_SST_TYPE,
    INFO_LAST_ENTRY,
    INFO_STATS_OFFSET,
    INFO_STATS_LEN,
    INFO_FILTER_FORMAT,
) = range(11)
INFO_SLOTS = 11
# sst.fbs, table CompactedSsTable: id, info, visible_range, format_version (uint16 = null)
SST_ID, SST_INFO, SST_VISIBLE_RANGE, SST_FORMAT_VERSION = range(4)
# sst.fbs, table SortedRun: id uint32, ssts [CompactedSsTable]
RUN_ID, RUN_SSTS = range(2)
# manifest.fbs, table ExternalDb: path, source_checkpoint_id, final_checkpoint_id, sst_ids
EXT_PATH, EXT_SOURCE, EXT_FINAL, EXT_SST_IDS = range(4)
# manifest.fbs, table WriterCheckpoint: epoch; union CheckpointMetadata { WriterCheckpoint } = 1
WRITER_CP_EPOCH = 0
METADATA_WRITER_CHECKPOINT = 1
# manifest.fbs, table Checkpoint: id, manifest_id, checkpoint_expire_time_s,
# checkpoint_create_time_s, metadata (a union: metadata_type in slot 4, metadata in slot 5), name
CP_ID, CP_MANIFEST_ID, CP_EXPIRE, CP_CREATE, CP_METADATA_TYPE, CP_METADATA, CP_NAME = range(7)
# manifest.fbs, table ManifestV1
(
    M_MANIFEST_ID,
    M_EXTERNAL_DBS,
    M_INITIALIZED,
    M_WRITER_EPOCH,
    M_COMPACTOR_EPOCH,
    M_REPLAY_AFTER_WAL_ID,
    M_WAL_ID_LAST_SEEN,
    M_L0_LAST_COMPACTED,
    M_L0,
    M_COMPACTED,
    M_LAST_L0_CLOCK_TICK,
    M_CHECKPOINTS,
    M_LAST_L0_SEQ,
    M_WAL_OBJECT_STORE_URI,
    M_RECENT_SNAPSHOT_MIN_SEQ,
    M_SEQUENCE_TRACKER,
) = range(16)
MANIFEST_V1_SLOTS = 16


@dataclass
class V1Sst:
    """``CompactedSsTable``: an SST and the part of it this place in the tree sees."""

    id: ULID
    info: SstInfo = field(default_factory=SstInfo)
    visible_range: BytesRange | None = None
    format_version: int | None = None  # None: the field is absent (SlateDB reads 1)


@dataclass
class V1Run:
    """``SortedRun``."""

    id: int
    ssts: list[V1Sst] = field(default_factory=list)


@dataclass
class V1Checkpoint:
    """``Checkpoint``; ``writer_epoch`` set writes ``WriterCheckpoint`` metadata."""

    id: uuid.UUID
    manifest_id: int
    create_time_s: int
    expire_time_s: int = 0  # 0 = never
    writer_epoch: int | None = None
    name: str | None = None


@dataclass
class V1ExternalDb:
    """``ExternalDb``."""

    path: str
    source_checkpoint_id: uuid.UUID
    final_checkpoint_id: uuid.UUID | None = None
    sst_ids: list[ULID] = field(default_factory=list)


@dataclass
class V1Manifest:
    """Every field of ``ManifestV1``, in slot order; None leaves an optional field absent."""

    manifest_id: int = 0
    external_dbs: list[V1ExternalDb] | None = None
    initialized: bool = True
    writer_epoch: int = 0
    compactor_epoch: int = 0
    replay_after_wal_id: int = 0
    wal_id_last_seen: int = 0
    l0_last_compacted: ULID | None = None
    l0: list[V1Sst] = field(default_factory=list)
    compacted: list[V1Run] = field(default_factory=list)
    last_l0_clock_tick: int = 0
    checkpoints: list[V1Checkpoint] = field(default_factory=list)
    last_l0_seq: int = 0
    wal_object_store_uri: str | None = None
    recent_snapshot_min_seq: int = 0
    sequence_tracker: bytes | None = None


class _V1Builder:
    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1024)

    def _id(self, raw: bytes) -> int:
        high, low = struct.unpack(">QQ", raw)
        b = self.b
        b.StartObject(2)
        b.PrependUint64Slot(UUID_HIGH, high, 0)
        b.PrependUint64Slot(UUID_LOW, low, 0)
        return int(b.EndObject())

    def _offsets(self, offsets: list[int]) -> int:
        b = self.b
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return int(b.EndVector())

    def _bound(self, bound: BytesBound) -> int:
        b = self.b
        key = None if bound.key is None else b.CreateByteVector(bound.key)
        b.StartObject(2)
        if key is not None:
            b.PrependUOffsetTRelativeSlot(BOUND_KEY, key, 0)
        b.PrependInt8Slot(BOUND_TYPE, BOUND_TYPE_CODE[bound.kind], 0)
        return int(b.EndObject())

    def _range(self, rng: BytesRange) -> int:
        start, end = self._bound(rng.start), self._bound(rng.end)
        b = self.b
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(RANGE_START, start, 0)
        b.PrependUOffsetTRelativeSlot(RANGE_END, end, 0)
        return int(b.EndObject())

    def _info(self, info: SstInfo) -> int:
        b = self.b
        first = None if info.first_key is None else b.CreateByteVector(info.first_key)
        last = None if info.last_key is None else b.CreateByteVector(info.last_key)
        b.StartObject(INFO_SLOTS)
        if first is not None:
            b.PrependUOffsetTRelativeSlot(INFO_FIRST_ENTRY, first, 0)
        b.PrependUint64Slot(INFO_INDEX_OFFSET, info.index_offset, 0)
        b.PrependUint64Slot(INFO_INDEX_LEN, info.index_len, 0)
        b.PrependUint64Slot(INFO_FILTER_OFFSET, info.filter_offset, 0)
        b.PrependUint64Slot(INFO_FILTER_LEN, info.filter_len, 0)
        b.PrependInt8Slot(INFO_COMPRESSION, info.compression, 0)
        b.PrependInt8Slot(INFO_SST_TYPE, info.sst_type, 0)
        if last is not None:
            b.PrependUOffsetTRelativeSlot(INFO_LAST_ENTRY, last, 0)
        b.PrependUint64Slot(INFO_STATS_OFFSET, info.stats_offset, 0)
        b.PrependUint64Slot(INFO_STATS_LEN, info.stats_len, 0)
        b.PrependInt8Slot(INFO_FILTER_FORMAT, info.filter_format, 0)
        return int(b.EndObject())

    def _sst(self, sst: V1Sst) -> int:
        sid = self._id(sst.id.bytes)
        info = self._info(sst.info)
        rng = None if sst.visible_range is None else self._range(sst.visible_range)
        b = self.b
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(SST_ID, sid, 0)
        b.PrependUOffsetTRelativeSlot(SST_INFO, info, 0)
        if rng is not None:
            b.PrependUOffsetTRelativeSlot(SST_VISIBLE_RANGE, rng, 0)
        if sst.format_version is not None:  # uint16 = null: absent unless given
            b.PrependSlot(N.Uint16Flags, SST_FORMAT_VERSION, sst.format_version, None)
        return int(b.EndObject())

    def _run(self, run: V1Run) -> int:
        ssts = self._offsets([self._sst(s) for s in run.ssts])
        b = self.b
        b.StartObject(2)
        b.PrependUint32Slot(RUN_ID, run.id, 0)
        b.PrependUOffsetTRelativeSlot(RUN_SSTS, ssts, 0)
        return int(b.EndObject())

    def _checkpoint(self, cp: V1Checkpoint) -> int:
        b = self.b
        cid = self._id(cp.id.bytes)
        meta = None
        if cp.writer_epoch is not None:
            b.StartObject(1)
            b.PrependUint64Slot(WRITER_CP_EPOCH, cp.writer_epoch, 0)
            meta = b.EndObject()
        name = None if cp.name is None else b.CreateString(cp.name)
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(CP_ID, cid, 0)
        b.PrependUint64Slot(CP_MANIFEST_ID, cp.manifest_id, 0)
        b.PrependUint32Slot(CP_EXPIRE, cp.expire_time_s, 0)
        b.PrependUint32Slot(CP_CREATE, cp.create_time_s, 0)
        if meta is not None:
            b.PrependUint8Slot(CP_METADATA_TYPE, METADATA_WRITER_CHECKPOINT, 0)
            b.PrependUOffsetTRelativeSlot(CP_METADATA, meta, 0)
        if name is not None:
            b.PrependUOffsetTRelativeSlot(CP_NAME, name, 0)
        return int(b.EndObject())

    def _external_db(self, ext: V1ExternalDb) -> int:
        b = self.b
        path = b.CreateString(ext.path)
        source = self._id(ext.source_checkpoint_id.bytes)
        final = None if ext.final_checkpoint_id is None else self._id(ext.final_checkpoint_id.bytes)
        sst_ids = self._offsets([self._id(u.bytes) for u in ext.sst_ids])
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(EXT_PATH, path, 0)
        b.PrependUOffsetTRelativeSlot(EXT_SOURCE, source, 0)
        if final is not None:
            b.PrependUOffsetTRelativeSlot(EXT_FINAL, final, 0)
        b.PrependUOffsetTRelativeSlot(EXT_SST_IDS, sst_ids, 0)
        return int(b.EndObject())

    def manifest(self, m: V1Manifest) -> bytes:
        b = self.b
        exts = None
        if m.external_dbs is not None:
            exts = self._offsets([self._external_db(e) for e in m.external_dbs])
        last = None if m.l0_last_compacted is None else self._id(m.l0_last_compacted.bytes)
        l0 = self._offsets([self._sst(s) for s in m.l0])
        runs = self._offsets([self._run(r) for r in m.compacted])
        cps = self._offsets([self._checkpoint(c) for c in m.checkpoints])
        uri = None if m.wal_object_store_uri is None else b.CreateString(m.wal_object_store_uri)
        tracker = None if m.sequence_tracker is None else b.CreateByteVector(m.sequence_tracker)
        b.StartObject(MANIFEST_V1_SLOTS)
        b.PrependUint64Slot(M_MANIFEST_ID, m.manifest_id, 0)
        if exts is not None:
            b.PrependUOffsetTRelativeSlot(M_EXTERNAL_DBS, exts, 0)
        b.PrependBoolSlot(M_INITIALIZED, m.initialized, False)
        b.PrependUint64Slot(M_WRITER_EPOCH, m.writer_epoch, 0)
        b.PrependUint64Slot(M_COMPACTOR_EPOCH, m.compactor_epoch, 0)
        b.PrependUint64Slot(M_REPLAY_AFTER_WAL_ID, m.replay_after_wal_id, 0)
        b.PrependUint64Slot(M_WAL_ID_LAST_SEEN, m.wal_id_last_seen, 0)
        if last is not None:
            b.PrependUOffsetTRelativeSlot(M_L0_LAST_COMPACTED, last, 0)
        b.PrependUOffsetTRelativeSlot(M_L0, l0, 0)
        b.PrependUOffsetTRelativeSlot(M_COMPACTED, runs, 0)
        b.PrependInt64Slot(M_LAST_L0_CLOCK_TICK, m.last_l0_clock_tick, 0)
        b.PrependUOffsetTRelativeSlot(M_CHECKPOINTS, cps, 0)
        b.PrependUint64Slot(M_LAST_L0_SEQ, m.last_l0_seq, 0)
        if uri is not None:
            b.PrependUOffsetTRelativeSlot(M_WAL_OBJECT_STORE_URI, uri, 0)
        b.PrependUint64Slot(M_RECENT_SNAPSHOT_MIN_SEQ, m.recent_snapshot_min_seq, 0)
        if tracker is not None:
            b.PrependUOffsetTRelativeSlot(M_SEQUENCE_TRACKER, tracker, 0)
        b.Finish(b.EndObject())
        return V1_PREFIX + bytes(b.Output())


def encode_v1(m: V1Manifest) -> bytes:
    """``m`` as SlateDB stores a ManifestV1 object: u16 BE ``1``, then the FlatBuffers buffer."""
    return _V1Builder().manifest(m)


def from_model(m: Manifest) -> V1Manifest:
    """The V1 fields SlateDB's V1 encoder writes for the state ``m`` holds (what V1 cannot
    hold, such as our own fields, is left out). Our destroyed marker is not written."""
    ssts = {s.id: s for s in m.ssts}

    def v1_sst(view_sst: ULID, rng: BytesRange | None) -> V1Sst:
        s = ssts[view_sst]
        return V1Sst(s.id, s.info, rng, s.format_version)

    # V1 names the last compacted L0 SST by its SST id, V2 by its view id; the view left L0 when
    # it was compacted, so its SST is not known here: the view id stands for it (SlateDB names
    # an L0 view after its SST when it flushes one; a V1 decode maps it back to a view id)
    last = m.last_compacted_l0_view_id
    return V1Manifest(
        external_dbs=[
            V1ExternalDb(e.path, e.source_checkpoint_id, e.final_checkpoint_id, list(e.sst_ids))
            for e in m.external_dbs
        ]
        or None,
        initialized=m.initialized,
        writer_epoch=m.writer_epoch,
        compactor_epoch=m.compactor_epoch,
        replay_after_wal_id=m.replay_after_wal_id,
        wal_id_last_seen=m.wal_id_last_seen,
        l0_last_compacted=last,
        l0=[v1_sst(v.sst_id, v.visible_range) for v in m.l0],
        compacted=[
            V1Run(r.id, [v1_sst(v.sst_id, v.visible_range) for v in r.views]) for r in m.compacted
        ],
        last_l0_clock_tick=m.last_l0_clock_tick,
        checkpoints=[
            V1Checkpoint(
                c.id, c.manifest_id, c.create_time_s, c.expire_time_s or 0, c.writer_epoch, c.name
            )
            for c in m.checkpoints
        ],
        last_l0_seq=m.last_l0_seq,
        recent_snapshot_min_seq=m.recent_snapshot_min_seq,
        sequence_tracker=m.sequence_tracker,
    )
