"""Bytes -> Manifest: the bounds-checked FlatBuffers reader of :mod:`slatedb_core.manifest.codec`."""

from __future__ import annotations

import gc
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import add
from typing import Any

from ulid import ULID

from slatedb_core.errors import CorruptionError
from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest._fb_layout import (
    BOUND,
    CP,
    EXT,
    FMT,
    I32,
    IDENT,
    INFO,
    M1,
    M2,
    MANIFEST_MAGIC,
    RANGE,
    RUN1,
    RUN2,
    SST,
    SUPPORTED_VERSIONS,
    U32,
    VIEW,
    VT_HEAD,
    WCP,
    WIDTH,
    WRITER_CHECKPOINT,
    FbTable,
    Malformed,
    parallel_writes_of,
    picker,
    ulid_of,
    uuid_of,
)
from slatedb_core.manifest.model import (
    Checkpoint,
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.meta import envelope


class _ReadLayout:
    """A vtable as found in the buffer, compiled to one struct call that reads every field."""

    def __init__(self, table: FbTable, offs: Sequence[int], tsize: int) -> None:
        fields = sorted((off, s, table.kinds[s]) for s, off in enumerate(offs) if off)
        fmt, end = ["<"], fields[0][0] if fields else 0
        self.first = end
        index: dict[int, int] = {}
        self.rel: list[tuple[int, int]] = []
        for i, (off, slot, kind) in enumerate(fields):
            if off < end or off + WIDTH[kind] > tsize:
                raise Malformed(f"{table.name} field {slot} overlaps or lies outside its table")
            fmt.append("x" * (off - end) + FMT[kind])
            end = off + WIDTH[kind]
            index[slot] = i
            if kind == "O":
                self.rel.append((slot, off))
        self.struct = struct.Struct("".join(fmt))
        self.tsize = tsize
        n = len(fields)
        self.pick = picker([index.get(s, n + s) for s in range(len(table.kinds))])


class _Reader:
    """Bounds-checked access to one payload; vtable layouts are compiled once and shared."""

    def __init__(self, buf: bytes) -> None:
        self._buf = buf
        self._n = len(buf)
        self._layouts: dict[tuple[str, int], _ReadLayout] = {}

    def root(self, ident: bytes) -> int:
        if self._n < 8:
            raise Malformed(f"payload of {self._n} bytes is too short")
        if self._buf[4:8] != ident:
            raise Malformed(f"file identifier {self._buf[4:8]!r}, expected {ident!r}")
        return int(U32.unpack_from(self._buf, 0)[0])

    def _layout(self, table: FbTable, vt: int) -> _ReadLayout:
        if vt < 0 or vt + 4 > self._n:
            raise Malformed(f"{table.name} vtable at {vt} is out of bounds")
        vsize, tsize = VT_HEAD.unpack_from(self._buf, vt)
        if vsize < 4 or vsize % 2 or vt + vsize > self._n or tsize < 4:
            raise Malformed(f"{table.name} vtable at {vt} is malformed")
        k = min((vsize - 4) // 2, len(table.kinds))
        offs = struct.unpack_from(f"<{k}H", self._buf, vt + 4)
        lay = self._layouts[table.name, vt] = _ReadLayout(table, offs, tsize)
        return lay

    def table(self, table: FbTable, pos: int) -> list[Any]:
        """Field values by slot; offset fields come back as absolute positions, absent ones as the
        schema default (0 for plain scalars, None for optional scalars, offsets and structs)."""
        if pos < 0 or pos + 4 > self._n:
            raise Malformed(f"{table.name} table at {pos} is out of bounds")
        vt = pos - I32.unpack_from(self._buf, pos)[0]
        lay = self._layouts.get((table.name, vt)) or self._layout(table, vt)
        if pos + lay.tsize > self._n:
            raise Malformed(f"{table.name} table at {pos} runs past the payload")
        vals = list(lay.pick(lay.struct.unpack_from(self._buf, pos + lay.first) + table.absent))
        for slot, off in lay.rel:
            vals[slot] += pos + off
        return vals

    def _vector(self, pos: int, width: int) -> tuple[int, int]:
        if pos < 0 or pos + 4 > self._n:
            raise Malformed(f"vector at {pos} is out of bounds")
        count = U32.unpack_from(self._buf, pos)[0]
        if pos + 4 + count * width > self._n:
            raise Malformed(f"vector at {pos} of {count} elements runs past the payload")
        return pos + 4, count

    def tables(self, pos: int | None, what: str) -> list[int]:
        if pos is None:
            raise Malformed(f"required field {what} is missing")
        start, n = self._vector(pos, 4)
        rel = struct.unpack_from(f"<{n}I", self._buf, start)
        return list(map(add, rel, range(start, start + 4 * n, 4)))

    def blob(self, pos: int) -> bytes:
        start, n = self._vector(pos, 1)
        return self._buf[start : start + n]

    def structs16(self, pos: int) -> list[bytes]:
        start, n = self._vector(pos, 16)
        return [self._buf[p : p + 16] for p in range(start, start + 16 * n, 16)]


def _need(value: Any, what: str) -> Any:
    if value is None:
        raise Malformed(f"required field {what} is missing")
    return value


def _read_sst(r: _Reader, pos: int) -> tuple[bytes, CompactedSst]:
    raw, info_pos, fmt_version, orig = r.table(SST, pos)
    fk, lk, io, il, fo, fl, cc, ec, sb = r.table(INFO, _need(info_pos, "CompactedSsTable.info"))
    info = SstInfo(
        None if fk is None else r.blob(fk), None if lk is None else r.blob(lk),
        io, il, fo, fl, cc, ec, sb,
    )
    sst_id = ulid_of(_need(raw, "CompactedSsTable.id"))
    return raw, CompactedSst(sst_id, info, fmt_version, None if orig is None else ulid_of(orig))


def _read_bound(r: _Reader, pos: int | None) -> BytesBound:
    kind, key = r.table(BOUND, _need(pos, "BytesRange bound"))
    if kind > BoundKind.EXCLUDED:
        raise Malformed(f"BoundKind {kind} is out of range")
    return BytesBound(BoundKind(kind), None if key is None else r.blob(key))


def _read_view(r: _Reader, pos: int, ids: dict[bytes, ULID]) -> SstView:
    vid, sid, rng = r.table(VIEW, pos)
    sst_id = ids.get(_need(sid, "CompactedSsTableView.sst_id"))
    if sst_id is None:
        raise Malformed(f"view references SST {ulid_of(sid)}, which is not in ssts")
    view_id = ids.get(_need(vid, "CompactedSsTableView.id"))
    if view_id is None:
        view_id = ulid_of(vid)
    if rng is None:
        return SstView(view_id, sst_id)
    start, end = r.table(RANGE, rng)
    return SstView(view_id, sst_id, BytesRange(_read_bound(r, start), _read_bound(r, end)))


def _read_checkpoint(r: _Reader, pos: int) -> Checkpoint:
    raw, manifest_id, expire, create, tag, meta, name = r.table(CP, pos)
    epoch = None
    if tag == WRITER_CHECKPOINT:
        epoch = r.table(WCP, _need(meta, "Checkpoint.metadata"))[0]
    elif tag != 0:
        raise Malformed(f"CheckpointMetadata type {tag} is out of range")
    return Checkpoint(uuid_of(_need(raw, "Checkpoint.id")), manifest_id, create, expire, epoch,
                      None if name is None else r.blob(name).decode())


def _read_external_db(r: _Reader, pos: int) -> ExternalDb:
    path, source, final, ids = r.table(EXT, pos)
    return ExternalDb(
        r.blob(_need(path, "ExternalDb.path")).decode(),
        uuid_of(_need(source, "ExternalDb.source_checkpoint_id")),
        None if final is None else uuid_of(final),
        tuple(map(ulid_of, r.structs16(_need(ids, "ExternalDb.sst_ids")))),
    )


def _read_head(r: _Reader, head: Sequence[Any], cps: int | None) -> dict[str, Any]:
    """Manifest fields from the eight leading fields V1 and V2 share, plus the checkpoints."""
    exts, initialized, destroyed, writer_epoch, compactor_epoch, replay, seen, next_wal = head
    return {
        "external_dbs": tuple(_read_external_db(r, p)
                              for p in ([] if exts is None else r.tables(exts, "external_dbs"))),
        "initialized": bool(initialized), "destroyed_at_s": destroyed,
        "writer_epoch": writer_epoch, "compactor_epoch": compactor_epoch,
        "replay_after_wal_id": replay, "wal_id_last_seen": seen, "next_wal_sst_id": next_wal,
        "checkpoints": _unique_checkpoints(
            [_read_checkpoint(r, p) for p in r.tables(cps, "checkpoints")]
        ),
    }


def _unique_checkpoints(cps: list[Checkpoint]) -> tuple[Checkpoint, ...]:
    """Checkpoint ids name one checkpoint: a manifest holding an id twice is damaged."""
    if len({c.id for c in cps}) != len(cps):
        seen: set[uuid.UUID] = set()
        for c in cps:
            if c.id in seen:
                raise Malformed(f"checkpoint {c.id} appears twice")
            seen.add(c.id)
    return tuple(cps)


def _decode_v2(r: _Reader) -> Manifest:
    fields = r.table(M2, r.root(IDENT[2]))
    (ssts_pos, l0_pos, runs_pos, cps_pos, last_l0_seq, lc_view, lc_sst, max_parallel,
     range_pos) = fields[8:]
    key_range = None
    if range_pos is not None:
        start, end = r.table(RANGE, range_pos)
        key_range = BytesRange(_read_bound(r, start), _read_bound(r, end))
    ids: dict[bytes, ULID] = {}
    ssts = []
    for pos in r.tables(ssts_pos, "ssts"):
        raw, sst = _read_sst(r, pos)
        if raw in ids:
            raise Malformed(f"SST {sst.id} appears twice in ssts")
        ids[raw] = sst.id
        ssts.append(sst)
    runs = []
    for pos in r.tables(runs_pos, "compacted"):
        run_id, views = r.table(RUN2, pos)
        vs = tuple(_read_view(r, p, ids) for p in r.tables(views, "SortedRunV2.views"))
        runs.append(SortedRun(run_id, vs))
    return Manifest(
        ssts=tuple(ssts), l0=tuple(_read_view(r, p, ids) for p in r.tables(l0_pos, "l0")),
        compacted=tuple(runs), last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=None if lc_view is None else ulid_of(lc_view),
        last_compacted_l0_sst_id=None if lc_sst is None else ulid_of(lc_sst),
        max_parallel_writes=parallel_writes_of(max_parallel), key_range=key_range,
        **_read_head(r, fields[:8], cps_pos),
    )


def _decode_v1(r: _Reader) -> Manifest:
    """Views get their SST's id and no range; ``ssts`` lists SSTs in order of first appearance."""
    fields = r.table(M1, r.root(IDENT[1]))
    last_compacted, l0_pos, runs_pos, cps_pos, last_l0_seq, max_parallel = fields[8:]
    ssts: dict[bytes, CompactedSst] = {}

    def view(pos: int) -> SstView:
        raw, sst = _read_sst(r, pos)
        sst = ssts.setdefault(raw, sst)
        return SstView(sst.id, sst.id)

    l0 = tuple(view(p) for p in r.tables(l0_pos, "l0"))
    runs = []
    for pos in r.tables(runs_pos, "compacted"):
        run_id, inline = r.table(RUN1, pos)
        runs.append(SortedRun(run_id, tuple(view(p) for p in r.tables(inline, "SortedRunV1.ssts"))))
    lc = None if last_compacted is None else ulid_of(last_compacted)
    return Manifest(
        ssts=tuple(ssts.values()), l0=l0, compacted=tuple(runs), last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=lc, last_compacted_l0_sst_id=lc,
        max_parallel_writes=parallel_writes_of(max_parallel), **_read_head(r, fields[:8], cps_pos),
    )


_DECODERS: dict[int, Callable[[_Reader], Manifest]] = {1: _decode_v1, 2: _decode_v2}


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Decoding a 100k-SST manifest allocates ~500k acyclic objects; with the cyclic collector
    running, its repeated full passes over them (and over the previous manifest, still alive) more
    than double the decode time while finding nothing to free. Only re-enables what it disabled."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode_manifest(data: bytes, *, name: str) -> Manifest:
    """Open the envelope and decode its payload; ``name`` (usually the object path) goes into every
    ``CorruptionError`` so an operator knows which object to look at."""
    return decode_sealed_manifest(data, name=name)[0]


def decode_sealed_manifest(data: bytes, *, name: str) -> tuple[Manifest, envelope.Opened]:
    """:func:`decode_manifest`, also returning the envelope (format version, nonce, parent)."""
    opened = envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=name, versions=SUPPORTED_VERSIONS)
    try:
        with _gc_paused():
            return _DECODERS[opened.version](_Reader(opened.payload)), opened
    except (Malformed, struct.error, ValueError, TypeError, OverflowError, IndexError) as e:
        raise CorruptionError(name, f"malformed ManifestV{opened.version} payload: {e}") from e
