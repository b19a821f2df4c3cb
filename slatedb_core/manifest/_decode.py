"""Bytes -> Manifest, for manifests either engine wrote (see :mod:`slatedb_core.manifest.codec`)."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import attrgetter, is_
from typing import Any

import numpy as np
from ulid import ULID

from slatedb_core.errors import CorruptionError, InvalidArgument, UnsupportedFeature
from slatedb_core.manifest import model
from slatedb_core.manifest._encode import DESTROYED_CHECKPOINT_ID, FORMAT_VERSION, Layout
from slatedb_core.manifest.flatbuf import FbReader, Malformed, Positions, gc_paused, need
from slatedb_core.manifest.model import CompactedSst, SstInfo, SstView, builder
from slatedb_core.manifest.sst_info import read_sst_info
from slatedb_core.manifest.tables import (
    APP_VERSION,
    CP,
    EXT_DB,
    HALVES,
    INFO,
    INFO_OURS,
    MANIFEST,
    MANIFEST_OURS,
    OURS,
    OURS_CRC_SLOT,
    OURS_REUSABLE_SLOT,
    RUN,
    SST,
    SST_OURS,
    ULID_TABLE,
    UUID_TABLE,
    VIEW,
    WRITER_CHECKPOINT,
    WRITER_CP,
    read_range,
)
from slatedb_core.store.checksum import crc32

_ZERO_CRC = bytes(4)
U64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a manifest object says about its writing, beside the manifest: the format version
    and, when this engine wrote it, the nonce of this write and of the manifest it was built on
    (None when SlateDB wrote it)."""

    version: int
    nonce: bytes | None = None
    parent: bytes | None = None
    layout: Layout | None = field(default=None, compare=False, repr=False)
    """Where the manifest's items lie, when this engine's encoder wrote it
    (:meth:`~slatedb_core.manifest._encode.ManifestEncoder.seed`)."""


class ManifestReader(FbReader):
    """The generic reader plus id tables, decoded once per position."""

    def __init__(self, buf: bytes) -> None:
        super().__init__(buf)
        self.ulids: dict[int, ULID] = {}
        self.sst_at: dict[int, ULID] = {}
        """SST ids by the position of their id table: our views share it (no hashing)."""
        self.views: set[int] = set()
        """Positions of the view tables read so far: a view appears once in a manifest."""
        self.sst_tables: list[tuple[int, int]] = []
        """Where each SST's table and id table lie, in ``ssts`` order (:class:`Layout`)."""
        self.cp_tables: list[int] = []
        """Where each checkpoint's table lies, the destroyed marker's left out."""

    def ulid(self, pos: int) -> ULID:
        u = self.ulids.get(pos)
        if u is None:
            u = self.ulids[pos] = ULID(HALVES.pack(*self.pair(ULID_TABLE, pos)))
        return u

    def uuid(self, pos: int) -> uuid.UUID:
        return uuid.UUID(bytes=HALVES.pack(*self.pair(UUID_TABLE, pos)))


_make_info = builder(SstInfo)
_make_sst = builder(CompactedSst)
_make_view = builder(SstView)
_BE_HALVES = np.dtype(">u8")


def _ulids(r: ManifestReader, positions: Positions) -> list[ULID] | None:
    """The Ulid tables at ``positions``, read at once (:meth:`FbReader.columns`), each
    position's ULID cached as :meth:`ManifestReader.ulid` caches it; None when they do not
    share one vtable."""
    cols = r.columns(ULID_TABLE, positions)
    if cols is None:
        return None
    halves = np.zeros((len(positions), 2), _BE_HALVES)
    for slot in (0, 1):
        if slot in cols:
            halves[:, slot] = cols[slot]
    raw = halves.tobytes()
    out = list(
        map(
            ULID,
            map(raw.__getitem__, map(slice, range(0, len(raw), 16), range(16, len(raw) + 16, 16))),
        )
    )
    r.ulids.update(zip(positions.tolist(), out, strict=True))
    return out


def _read_ssts_at_once(r: ManifestReader, positions: Positions) -> list[CompactedSst] | None:
    """:func:`_read_ssts`'s SSTs, every table kind read at once (issue 42: the decode of a
    manifest of 10k SSTs, 75 ms, was per-SST calls). None (nothing read) unless every SST,
    every SST info and every id table shares its kind's one vtable, every required field is
    present and no SST has an original id: the caller then reads them one by one."""
    cols = r.columns(SST, positions)
    if cols is None or 0 not in cols or 1 not in cols or SST_OURS in cols:
        return None
    info = r.columns(INFO, cols[1])
    if info is None:
        return None
    raw_ids = cols[0]
    ids = _ulids(r, raw_ids)
    if ids is None:
        return None
    n = len(positions)

    def col(slot: int) -> list[Any]:
        c = info.get(slot)
        return [0] * n if c is None else c.tolist()

    first = r.blobs(info[0]) if 0 in info else [None] * n
    last = r.blobs(info[7]) if 7 in info else [None] * n
    infos = list(
        map(
            _make_info,
            first,
            last,
            *map(col, (1, 2, 3, 4, 5, INFO_OURS, INFO_OURS + 1, 6, 8, 9, 10)),
        )
    )
    versions = repeat(1) if 2 not in cols else cols[2].tolist()
    raw = raw_ids.tolist()
    r.sst_at.update(zip(raw, ids, strict=True))
    r.sst_tables.extend(zip(positions.tolist(), raw, strict=True))
    return list(map(_make_sst, ids, infos, versions, repeat(None, n)))


def _by_bytes(ssts: list[CompactedSst]) -> dict[bytes, ULID]:
    """The SSTs' ids by their bytes (hashed in C: a ULID hashes in Python)."""
    ids = list(map(_ID, ssts))
    return dict(zip(map(_BYTES, ids), ids, strict=True))


_ID = attrgetter("id")
_BYTES = attrgetter("bytes")


def _read_ssts(r: ManifestReader, pos: int | None) -> tuple[list[CompactedSst], dict[bytes, ULID]]:
    positions = r.positions(pos, "ssts")
    fast = _read_ssts_at_once(r, positions)
    if fast is not None:
        ids = _by_bytes(fast)
        if len(ids) != len(fast):
            raise Malformed("an SST appears twice in ssts")
        return fast, ids
    ssts: list[CompactedSst] = []
    for p in positions.tolist():
        raw_id, info, version, *rest = r.table(SST, p)
        orig = rest[SST_OURS - 3]
        sst_id = r.sst_at[raw_id] = r.ulid(need(raw_id, "CompactedSsTableV2.id"))
        r.sst_tables.append((p, raw_id))
        ssts.append(
            CompactedSst(
                sst_id,
                read_sst_info(r, need(info, "CompactedSsTableV2.info")),
                1 if version is None else version,
                None if orig is None else r.ulid(orig),
            )
        )
    ids = _by_bytes(ssts)
    if len(ids) != len(ssts):
        raise Malformed("an SST appears twice in ssts")
    return ssts, ids


def _read_views(
    r: ManifestReader, pos: int | None, what: str, ids: dict[bytes, ULID]
) -> tuple[SstView, ...]:
    out = []
    positions = r.tables(pos, what)
    seen = len(r.views)
    r.views.update(positions)
    if len(r.views) != seen + len(positions):
        raise Malformed(f"{what} names a view table another view offset names too")
    fast = _read_views_at_once(r, positions)
    if fast is not None:
        return fast
    for p in positions:
        vid, sid, rng = r.table(VIEW, p)
        sst_id = r.sst_at.get(sid) or ids.get(
            r.ulid(need(sid, "CompactedSsTableView.sst_id")).bytes
        )
        if sst_id is None:
            raise Malformed(f"a view references SST {r.ulid(sid)}, which is not in ssts")
        view_id = r.ulid(need(vid, "CompactedSsTableView.id"))
        out.append(SstView(view_id, sst_id, None if rng is None else read_range(r, rng)))
    return tuple(out)


def _any_none(items: list[Any]) -> bool:
    """Whether ``items`` holds None, by identity (``None in`` a list of ULIDs calls
    ``ULID.__eq__``, in Python, on each)."""
    return any(map(is_, items, repeat(None)))


def _read_views_at_once(r: ManifestReader, positions: list[int]) -> tuple[SstView, ...] | None:
    """:func:`_read_views`'s views read at once; None (nothing read) unless they share one
    vtable without a visible range, each names an id table an SST of ``ssts`` has (the usual
    case: a writer writes a view's SST id as its SST's own table) and each has an id."""
    if not positions:
        return ()
    at = np.array(positions, np.int64)
    cols = r.columns(VIEW, at)
    if cols is None or 0 not in cols or 1 not in cols or 2 in cols:
        return None
    ssts = list(map(r.sst_at.get, cols[1].tolist()))
    if _any_none(ssts):
        return None
    vids = cols[0]
    cached = list(map(r.ulids.get, vids.tolist()))
    view_ids = _ulids(r, vids) if _any_none(cached) else cached
    if view_ids is None:
        return None
    return tuple(map(_make_view, view_ids, ssts, repeat(None, len(positions))))


_make_checkpoint = builder(model.Checkpoint)
_DESTROYED = DESTROYED_CHECKPOINT_ID.int
_CHECKPOINT_ID = attrgetter("id.int")


_AT_ONCE = 32
"""Checkpoints from which :func:`_plain_checkpoints` reads them at once."""
_uuid_of_int = partial(uuid.UUID, None, None, None, None)


def _plain_checkpoints(r: FbReader, positions: list[int]) -> dict[int, model.Checkpoint]:
    """The checkpoints at ``positions`` that share the most common vtable, read at once
    (issue 42: an open at 1,000 checkpoints spent 70% of its Python steps in their decode),
    by their index; none unless that vtable has an id and neither metadata nor a name, no
    metadata type is set and none is the destroyed marker (the rest: one by one)."""
    at = np.array(positions, np.int64)
    vts = r.vtable_positions(CP, at)
    values, counts = np.unique(vts, return_counts=True)
    idx = np.flatnonzero(vts == values[counts.argmax()])
    cols = r.columns(CP, at[idx])
    if cols is None or 0 not in cols or 5 in cols or 6 in cols:
        return {}
    if 4 in cols and bool(cols[4].any()):
        return {}
    halves = r.columns(UUID_TABLE, cols[0])
    if halves is None:
        return {}
    n = len(idx)
    high = halves[0].tolist() if 0 in halves else [0] * n
    low = halves[1].tolist() if 1 in halves else [0] * n
    ints = [(h << 64) | lo for h, lo in zip(high, low, strict=True)]
    if _DESTROYED in ints:
        return {}
    zeros = [0] * n
    manifest_ids = cols[1].tolist() if 1 in cols else zeros
    creates = cols[3].tolist() if 3 in cols else zeros
    expires = [e or None for e in cols[2].tolist()] if 2 in cols else [None] * n
    cps = map(
        _make_checkpoint,
        map(_uuid_of_int, ints),
        manifest_ids,
        creates,
        expires,
        repeat(None),
        repeat(None),
    )
    return dict(zip(idx.tolist(), cps, strict=True))


def read_checkpoints(
    r: ManifestReader, pos: int | None
) -> tuple[tuple[model.Checkpoint, ...], int | None]:
    """The checkpoints, and ``destroyed_at_s`` from the destroyed marker among them."""
    cps: list[model.Checkpoint] = []
    destroyed = None
    positions = r.tables(pos, "checkpoints")
    plain = _plain_checkpoints(r, positions) if len(positions) >= _AT_ONCE else {}
    for i, p in enumerate(positions):
        cp = plain.get(i)
        if cp is not None:
            if isinstance(r, ManifestReader):
                r.cp_tables.append(p)
            cps.append(cp)
            continue
        raw, manifest_id, expire, create, tag, meta, name = r.table(CP, p)
        high, low = r.pair(UUID_TABLE, need(raw, "Checkpoint.id"))
        cid = (high << 64) | low
        if cid == _DESTROYED:  # ints compared in C (a UUID compares in Python)
            destroyed = create
            continue
        epoch = None
        if tag == WRITER_CHECKPOINT:
            epoch = r.table(WRITER_CP, need(meta, "Checkpoint.metadata"))[0]
        elif tag != 0:
            raise Malformed(f"CheckpointMetadata type {tag} is out of range")
        if isinstance(r, ManifestReader):
            r.cp_tables.append(p)
        cps.append(
            _make_checkpoint(  # model.Checkpoint(...), without its frozen __init__'s cost
                uuid.UUID(int=cid),
                manifest_id,
                create,
                expire or None,
                epoch,
                None if name is None else r.string(name),
            )
        )
    if len(set(map(_CHECKPOINT_ID, cps))) != len(cps):
        raise Malformed("a checkpoint id appears twice")
    return tuple(cps), destroyed


def read_external_dbs(r: ManifestReader, pos: int | None) -> tuple[model.ExternalDb, ...]:
    if pos is None:
        return ()
    out = []
    for p in r.tables(pos, "external_dbs"):
        path, source, final, sst_ids = r.table(EXT_DB, p)
        out.append(
            model.ExternalDb(
                r.string(need(path, "ExternalDb.path")),
                r.uuid(need(source, "ExternalDb.source_checkpoint_id")),
                None if final is None else r.uuid(final),
                tuple(map(r.ulid, r.tables(sst_ids, "ExternalDb.sst_ids"))),
            )
        )
    return tuple(out)


def _read_transactions(r: ManifestReader, pos: int | None) -> tuple[model.AppVersion, ...]:
    if pos is None:
        return ()
    out = []
    for p in r.tables(pos, "transactions"):
        app_id, version = r.table(APP_VERSION, p)
        try:
            out.append(model.AppVersion(r.string(need(app_id, "AppVersion.app_id")), version))
        except InvalidArgument as e:
            raise Malformed(f"transaction record: {e}") from e
    apps = [t.app_id for t in out]
    if apps != sorted(set(apps)):
        raise Malformed("transaction records are not sorted by app id, one per app")
    return tuple(out)


def _check_crc(data: bytes, r: ManifestReader, ours: int, stored: int) -> None:
    at = r.slot_position(OURS, ours, OURS_CRC_SLOT)
    if at is None:
        raise Malformed("our table has no checksum")
    at += 2  # the version prefix
    crc = crc32(data[at + 4 :], crc32(_ZERO_CRC, crc32(data[:at])))
    if crc != stored:
        raise Malformed("checksum mismatch")


def _refuse_segments(r: ManifestReader, segments: int | None, extractor: int | None) -> None:
    if extractor is not None or (segments is not None and r.tables(segments, "segments")):
        raise UnsupportedFeature(
            "segmented manifests (SlateDB RFC 0024)",
            "the manifest has segments or a segment extractor; this engine does not split its "
            "LSM tree by key prefix",
        )


def _decode(data: bytes) -> tuple[model.Manifest, Stamp]:
    r = ManifestReader(data[2:])
    f = r.table(MANIFEST, r.root())
    (
        _,
        exts,
        initialized,
        writer_epoch,
        compactor_epoch,
        replay,
        seen,
        last_view,
        ssts_pos,
        l0_pos,
        runs_pos,
        clock_tick,
        cps_pos,
        last_l0_seq,
        min_seq,
        tracker,
        segments,
        extractor,
    ) = f[:18]
    ours = f[MANIFEST_OURS]
    ours_fields = None if ours is None else r.table(OURS, ours)
    if ours_fields is not None:  # our checksum first: then every other check reads sound bytes
        _check_crc(data, r, ours, ours_fields[OURS_CRC_SLOT])
    _refuse_segments(r, segments, extractor)
    ssts, ids = _read_ssts(r, ssts_pos)
    runs = []
    run_tables = r.tables(runs_pos, "compacted")
    for p in run_tables:
        run_id, views = r.table(RUN, p)
        runs.append(model.SortedRun(run_id, _read_views(r, views, "SortedRunV2.ssts", ids)))
    checkpoints, destroyed = read_checkpoints(r, cps_pos)
    extra: dict[str, Any] = {"next_wal_sst_id": seen + 1}
    if ours_fields is None and seen == U64_MAX:
        raise Malformed("wal_id_last_seen is u64 max: there is no next WAL SST id")
    stamp = Stamp(FORMAT_VERSION)
    if ours_fields is not None:
        (parallel, key_range, nonce, parent, next_wal, _, our_writer, our_compactor, txns) = (
            ours_fields[:9]
        )
        extra["separate_wal_store"] = bool(ours_fields[9])
        if ours_fields[10] is not None:
            extra["wal_store_id"] = store_id = r.blob(ours_fields[10])
            if len(store_id) != model.WAL_STORE_ID_SIZE:
                raise Malformed(f"a WAL store id of {len(store_id)} bytes")
        if ours_fields[11] is not None:
            extra["wal_object_store_uri"] = r.string(ours_fields[11])
        extra["transactions"] = _read_transactions(r, txns)
        extra["our_writer_epoch"] = our_writer or 0
        extra["our_compactor_epoch"] = our_compactor or 0
        if not 0 <= parallel <= model.MAX_PARALLEL_WRITES:
            raise Malformed(f"max_parallel_writes {parallel} exceeds {model.MAX_PARALLEL_WRITES}")
        extra["max_parallel_writes"] = parallel or 1
        if key_range is not None:
            extra["key_range"] = read_range(r, key_range)
        if next_wal is not None:
            extra["next_wal_sst_id"] = next_wal
        reusable = ours_fields[OURS_REUSABLE_SLOT]
        layout = None
        if reusable is not None:
            size = len(data) - 2
            layout = Layout(size, reusable, r.sst_tables, run_tables, r.cp_tables, r.vtables())
        stamp = Stamp(
            FORMAT_VERSION,
            None if nonce is None else r.blob(nonce),
            None if parent is None else r.blob(parent),
            layout,
        )
    manifest = model.Manifest(
        writer_epoch=writer_epoch,
        compactor_epoch=compactor_epoch,
        initialized=bool(initialized),
        destroyed_at_s=destroyed,
        external_dbs=read_external_dbs(r, exts),
        replay_after_wal_id=replay,
        wal_id_last_seen=seen,
        ssts=tuple(ssts),
        l0=_read_views(r, l0_pos, "l0", ids),
        compacted=tuple(runs),
        checkpoints=checkpoints,
        last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=None if last_view is None else r.ulid(last_view),
        last_l0_clock_tick=clock_tick,
        recent_snapshot_min_seq=min_seq,
        sequence_tracker=None if tracker is None else r.blob(tracker),
        **extra,
    )
    return manifest, stamp


_gc_paused = gc_paused


def decode_stamped_manifest(data: bytes, *, name: str) -> tuple[model.Manifest, Stamp]:
    """The manifest in ``data`` and its :class:`Stamp`; ``name`` (usually the object path) goes
    into every ``CorruptionError``. A segmented manifest raises ``UnsupportedFeature``."""
    if len(data) < 2:
        raise CorruptionError(name, f"truncated: {len(data)} bytes")
    version = struct.unpack_from(">H", data, 0)[0]
    if version != FORMAT_VERSION:
        raise CorruptionError(
            name, f"unsupported manifest format version {version} (SlateDB 0.17 writes 2)"
        )
    try:
        with _gc_paused():
            return _decode(bytes(data))
    except (Malformed, struct.error, ValueError, TypeError, OverflowError, IndexError) as e:
        raise CorruptionError(name, f"malformed ManifestV2: {e}") from e


def decode_manifest(data: bytes, *, name: str) -> model.Manifest:
    """:func:`decode_stamped_manifest` without the stamp."""
    return decode_stamped_manifest(data, name=name)[0]
