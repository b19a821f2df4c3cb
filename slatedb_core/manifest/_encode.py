"""Manifest -> bytes, as SlateDB 0.17 stores a manifest (see :mod:`slatedb_core.manifest.codec`)."""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable

from ulid import ULID

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest import tables as tb
from slatedb_core.manifest.flatbuf import FbWriter
from slatedb_core.manifest.model import (
    MAX_PARALLEL_WRITES,
    WAL_STORE_ID_SIZE,
    Checkpoint,
    CompactedSst,
    Manifest,
    SstView,
)
from slatedb_core.manifest.sst_info import write_sst_info
from slatedb_core.store.checksum import crc32

FORMAT_VERSION = 2
"""The big-endian u16 in front of every manifest: SlateDB's ManifestV2 root (what 0.17 writes)."""
VERSION_PREFIX = struct.pack(">H", FORMAT_VERSION)
NONCE_SIZE = 16
U32_MAX = 2**32 - 1
_SST_GAP = (None,) * (tb.SST_OURS - 3)
_MANIFEST_GAP = (None,) * (tb.MANIFEST_OURS - 18)

DESTROYED_CHECKPOINT_NAME = "slatedb-lakehouse:destroyed"
"""How ``Manifest.destroyed_at_s`` is stored: a checkpoint of this name and id that never expires,
created at ``destroyed_at_s`` and pinning the manifest holding it. SlateDB keeps checkpoints when
it rewrites a manifest, so a database stays destroyed for this engine whoever writes next
(docs/format.md, "Manifest"). It never appears in ``Manifest.checkpoints``."""
DESTROYED_CHECKPOINT_ID = uuid.UUID("afd27f4e-8bc7-5097-a78f-006853901a22")
"""uuid5(NAMESPACE_URL, DESTROYED_CHECKPOINT_NAME)."""


class _Ids:
    """Ulid/Uuid tables, each distinct id written once and shared by every field naming it
    (an SST's id and its views' ``sst_id``): FlatBuffers allows a table to be referenced twice."""

    def __init__(self, w: FbWriter) -> None:
        self._w = w
        self._written: dict[bytes, int] = {}

    def of(self, raw: bytes) -> int:
        pos = self._written.get(raw)
        if pos is None:
            pos = self._written[raw] = self._w.pair(tb.ULID_TABLE, *tb.HALVES.unpack(raw))
        return pos

    def opt(self, u: ULID | None) -> int | None:
        return None if u is None else self.of(u.bytes)


def _write_sst(w: FbWriter, ids: _Ids, sst: CompactedSst) -> int:
    info = write_sst_info(w, sst.info)
    return w.table(
        tb.SST,
        (ids.of(sst.id.bytes), info, sst.format_version, *_SST_GAP, ids.opt(sst.original_id)),
    )


def _write_view(w: FbWriter, ids: _Ids, view: SstView) -> int:
    rng = None if view.visible_range is None else tb.write_range(w, view.visible_range)
    return w.table(tb.VIEW, (ids.of(view.view_id.bytes), ids.of(view.sst_id.bytes), rng))


def _u32(value: int, what: str) -> int:
    if not 0 <= value <= U32_MAX:
        raise InvalidArgument(f"{what} {value} does not fit SlateDB's u32 seconds")
    return value


def _expiry(expire_time_s: int) -> int:
    """SlateDB's u32 expiry: 0 means never, so an expiry at 0 is stored as 1 (still expired);
    one past the last second a u32 holds (2106-02-07) is stored as that second."""
    if expire_time_s < 0:
        raise InvalidArgument(f"expire time {expire_time_s} is negative")
    return min(max(1, expire_time_s), U32_MAX)


def _write_checkpoint(w: FbWriter, cp: Checkpoint) -> int:
    if cp.id == DESTROYED_CHECKPOINT_ID:
        raise InvalidArgument(f"checkpoint id {cp.id} is reserved for {DESTROYED_CHECKPOINT_NAME}")
    name = None if cp.name is None else w.string(cp.name)
    meta = None if cp.writer_epoch is None else w.table(tb.WRITER_CP, (cp.writer_epoch,))
    expire = 0 if cp.expire_time_s is None else _expiry(cp.expire_time_s)
    return w.table(
        tb.CP,
        (
            w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(cp.id.bytes)),
            cp.manifest_id,
            expire,
            _u32(cp.create_time_s, "create time"),
            None if meta is None else tb.WRITER_CHECKPOINT,
            meta,
            name,
        ),
    )


def _destroyed_marker(w: FbWriter, destroyed_at_s: int, manifest_id: int | None) -> int:
    if manifest_id is None:
        raise InvalidArgument("a destroyed manifest is encoded with its id (its marker pins it)")
    return w.table(
        tb.CP,
        (
            w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(DESTROYED_CHECKPOINT_ID.bytes)),
            manifest_id,
            0,
            _u32(destroyed_at_s, "destroyed_at_s"),
            None,
            None,
            w.string(DESTROYED_CHECKPOINT_NAME),
        ),
    )


def _write_external_dbs(w: FbWriter, ids: _Ids, m: Manifest) -> int | None:
    if not m.external_dbs:
        return None
    out = []
    for e in m.external_dbs:
        final = e.final_checkpoint_id
        out.append(
            w.table(
                tb.EXT_DB,
                (
                    w.string(e.path),
                    w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(e.source_checkpoint_id.bytes)),
                    None
                    if final is None
                    else w.pair(tb.UUID_TABLE, *tb.HALVES.unpack(final.bytes)),
                    w.tables([ids.of(s.bytes) for s in e.sst_ids]),
                ),
            )
        )
    return w.tables(out)


def _all_views(m: Manifest) -> Iterable[SstView]:
    yield from m.l0
    for run in m.compacted:
        yield from run.views


def _check(m: Manifest) -> None:
    if not 1 <= m.max_parallel_writes <= MAX_PARALLEL_WRITES:
        raise InvalidArgument(
            f"max_parallel_writes {m.max_parallel_writes} does not fit 1..{MAX_PARALLEL_WRITES}"
        )
    if m.wal_store_id is not None and len(m.wal_store_id) != WAL_STORE_ID_SIZE:
        raise InvalidArgument(f"a WAL store id is {WAL_STORE_ID_SIZE} bytes")
    if len({c.id for c in m.checkpoints}) != len(m.checkpoints):
        raise InvalidArgument("manifest lists a checkpoint id twice")
    known = {s.id.bytes for s in m.ssts}
    if len(known) != len(m.ssts):
        raise InvalidArgument("manifest lists an SST twice in ssts")
    apps = [t.app_id for t in m.transactions]
    if apps != sorted(set(apps)):
        raise InvalidArgument("manifest transactions must be sorted by app id, one per app")
    for v in _all_views(m):
        if v.sst_id.bytes not in known:
            raise InvalidArgument(f"view {v.view_id} references SST {v.sst_id}, not in ssts")


def _write_transactions(w: FbWriter, m: Manifest) -> int | None:
    if not m.transactions:
        return None
    return w.tables(
        [w.table(tb.APP_VERSION, (w.string(t.app_id), t.version)) for t in m.transactions]
    )


def _write_ours(w: FbWriter, m: Manifest, nonce: bytes, parent: bytes | None) -> int:
    rng = None if m.key_range is None else tb.write_range(w, m.key_range)
    parent_pos = None if parent is None else w.blob(parent)
    txns = _write_transactions(w, m)
    store_id = None if m.wal_store_id is None else w.blob(m.wal_store_id)
    v1_uri = None if m.wal_object_store_uri is None else w.string(m.wal_object_store_uri)
    return w.table(
        tb.OURS,
        (
            m.max_parallel_writes,
            rng,
            w.blob(nonce),
            parent_pos,
            m.next_wal_sst_id,
            0,
            m.our_writer_epoch,
            m.our_compactor_epoch,
            txns,
            m.separate_wal_store or None,
            store_id,
            v1_uri,
        ),
    )


def encode_manifest(
    manifest: Manifest,
    *,
    manifest_id: int | None = None,
    nonce: bytes | None = None,
    parent: bytes | None = None,
) -> bytes:
    """``manifest`` as the object ``manifest/{manifest_id:020}.manifest``: SlateDB 0.17's
    version prefix and ManifestV2, with ours in the table at slot 32 (max_parallel_writes,
    key_range, ``nonce``: random if None, ``parent``: the nonce of the manifest this one was
    built on, next_wal_sst_id and a CRC-32 of the whole object). ``manifest_id`` is needed only
    for a destroyed manifest (module :mod:`slatedb_core.manifest.codec`)."""
    _check(manifest)
    for what, value in (("nonce", nonce), ("parent nonce", parent)):
        if value is not None and len(value) != NONCE_SIZE:
            raise InvalidArgument(f"a {what} is {NONCE_SIZE} bytes")
    try:
        return _encode(manifest, manifest_id, nonce or os.urandom(NONCE_SIZE), parent)
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"manifest has a value that does not fit its field: {e}") from e


def _encode(m: Manifest, manifest_id: int | None, nonce: bytes, parent: bytes | None) -> bytes:
    w = FbWriter()
    ids = _Ids(w)
    ssts = w.tables([_write_sst(w, ids, s) for s in m.ssts])
    l0 = w.tables([_write_view(w, ids, v) for v in m.l0])
    runs = w.tables(
        [
            w.table(tb.RUN, (r.id, w.tables([_write_view(w, ids, v) for v in r.views])))
            for r in m.compacted
        ]
    )
    cps = [_write_checkpoint(w, c) for c in m.checkpoints]
    if m.destroyed_at_s is not None:
        cps.append(_destroyed_marker(w, m.destroyed_at_s, manifest_id))
    tracker = None if m.sequence_tracker is None else w.blob(m.sequence_tracker)
    ours = _write_ours(w, m, nonce, parent)
    assert w.last is not None
    crc_at = ours - w.last.offs[tb.OURS_CRC_SLOT]  # from the buffer's end
    root = w.table(
        tb.MANIFEST,
        (
            None,
            _write_external_dbs(w, ids, m),
            m.initialized,
            m.writer_epoch,
            m.compactor_epoch,
            m.replay_after_wal_id,
            m.wal_id_last_seen,
            ids.opt(m.last_compacted_l0_view_id),
            ssts,
            l0,
            runs,
            m.last_l0_clock_tick,
            w.tables(cps),
            m.last_l0_seq,
            m.recent_snapshot_min_seq,
            tracker,
            w.tables([]),
            None,
            *_MANIFEST_GAP,
            ours,
        ),
    )
    data = bytearray(VERSION_PREFIX + w.finish(root))
    struct.pack_into("<I", data, len(data) - crc_at, crc32(data))
    return bytes(data)
