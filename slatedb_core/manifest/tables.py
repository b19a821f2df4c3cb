"""The FlatBuffers tables of SlateDB 0.17's manifest and SST info as :mod:`.flatbuf` sees them:
one field-kind string per table, in vtable-slot order (docs/format.md, "Manifest").

The slots are SlateDB 0.17's (its ``schemas/manifest.fbs``, ``schemas/sst.fbs`` and
``schemas/common.fbs``, checked against the bytes the 0.17 wheel writes). What this engine keeps
and SlateDB lacks sits in slots past every slot 0.17 uses (``x`` marks the unused slots in
between), so SlateDB's reader, which ignores slots it does not know, decodes our objects.
"""

from __future__ import annotations

import struct

from ulid import ULID

from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest.flatbuf import FbReader, FbTable, FbWriter, Malformed, need, past

HALVES = struct.Struct(">QQ")
"""A 128-bit id's bytes as its table's two u64 halves (high, low)."""
# Bound kinds: SlateDB's BoundType (schemas/common.fbs) is Unknown = 0, Unbounded, Included,
# Excluded; ours has no Unknown.
BOUND_TYPE = {BoundKind.UNBOUNDED: 1, BoundKind.INCLUDED: 2, BoundKind.EXCLUDED: 3}
BOUND_KIND = {code: kind for kind, code in BOUND_TYPE.items()}

# SlateDB 0.17's schemas/common.fbs: 128-bit ids are tables of two u64 halves (high, low).
ULID_TABLE = FbTable("Ulid", "QQ")
UUID_TABLE = FbTable("Uuid", "QQ")
BOUND = FbTable("BytesBound", "OB")  # key, bound_type
RANGE = FbTable("BytesRange", "OO")  # start_bound, end_bound (both required)

# SlateDB 0.17's schemas/sst.fbs, SsTableInfo: first_entry, index_offset, index_len,
# filter_offset, filter_len, compression_format, sst_type, last_entry, stats_offset, stats_len,
# filter_format (11 slots); ours from slot 16: entry_count, size_bytes.
INFO_OURS = 16
INFO = FbTable("SsTableInfo", past("OQQQQBBOQQB", INFO_OURS, "QQ"))
# CompactedSsTableV2: id, info, format_version (uint16 = null); ours from slot 8: original_id.
SST_OURS = 8
SST = FbTable("CompactedSsTableV2", past("OOH", SST_OURS, "O"))
VIEW = FbTable("CompactedSsTableView", "OOO")  # id, sst_id, visible_range
RUN = FbTable("SortedRunV2", "IO")  # id, ssts (views)
SEGMENT = FbTable("Segment", "OOOO")  # prefix, last_compacted_l0_sst_view_id, l0, compacted
EXT_DB = FbTable("ExternalDb", "OOOO")  # path, source_checkpoint_id, final_checkpoint_id, sst_ids
WRITER_CP = FbTable("WriterCheckpoint", "Q")  # epoch
WRITER_CHECKPOINT = 1  # CheckpointMetadata union tag (0 = NONE)
# Checkpoint: id, manifest_id, expire (u32, 0 = never), create (u32), metadata_type, metadata, name
CP = FbTable("Checkpoint", "OQIIBOO")
# ManifestV2, SlateDB 0.17's 18 slots: manifest_id, external_dbs, initialized, writer_epoch,
# compactor_epoch, replay_after_wal_id, wal_id_last_seen, last_compacted_l0_sst_view_id, ssts,
# l0, compacted, last_l0_clock_tick, checkpoints, last_l0_seq, recent_snapshot_min_seq,
# sequence_tracker, segments, segment_extractor_name; ours: one table at slot 32.
MANIFEST_OURS = 32
MANIFEST = FbTable("ManifestV2", past("QOBQQQQOOOOlOQQOOO", MANIFEST_OURS, "O"))
# Ours (docs/format.md, "Manifest"): max_parallel_writes, key_range, nonce, parent,
# next_wal_sst_id, crc32, our_writer_epoch, our_compactor_epoch, transactions,
# separate_wal_store, wal_store_id (16 bytes), wal_object_store_uri (a V1 manifest's, kept),
# reusable_bytes (the bytes at the buffer's end that only its SSTs, runs and checkpoints use).
OURS = FbTable("SlateDbCoreManifest", "IOOOqIQQOBOOq")
OURS_REUSABLE_SLOT = 12
APP_VERSION = FbTable("AppVersion", "OQ")  # ours: app_id (string), version (u64)
OURS_CRC_SLOT = 5


def write_ulid(w: FbWriter, u: ULID) -> int:
    """A Ulid table (schemas/common.fbs)."""
    return w.pair(ULID_TABLE, *HALVES.unpack(u.bytes))


def read_ulid(r: FbReader, pos: int) -> ULID:
    return ULID(HALVES.pack(*r.pair(ULID_TABLE, pos)))


def write_range(w: FbWriter, rng: BytesRange) -> int:
    """A BytesRange table and its two BytesBound tables (schemas/common.fbs)."""
    return w.table(RANGE, (_write_bound(w, rng.start), _write_bound(w, rng.end)))


def _write_bound(w: FbWriter, bound: BytesBound) -> int:
    key = None if bound.key is None else w.blob(bound.key)
    return w.table(BOUND, (key, BOUND_TYPE[bound.kind]))


def read_range(r: FbReader, pos: int) -> BytesRange:
    start, end = r.table(RANGE, pos)
    return BytesRange(
        _read_bound(r, need(start, "BytesRange.start_bound")),
        _read_bound(r, need(end, "BytesRange.end_bound")),
    )


def _read_bound(r: FbReader, pos: int) -> BytesBound:
    key, kind = r.table(BOUND, pos)
    if kind not in BOUND_KIND:
        raise Malformed(f"BoundType {kind} is out of range")
    return BytesBound(BOUND_KIND[kind], None if key is None else r.blob(key))
