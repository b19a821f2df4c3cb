"""Manifest bytes <-> :class:`~slatedb_core.manifest.model.Manifest`, for ManifestV1 and ManifestV2.

Stored manifests are a FlatBuffers payload (``schema/manifest.fbs``) inside the checksummed envelope
of :mod:`slatedb_core.meta.envelope`, whose version field says which root table the payload holds.

Why this module writes and reads FlatBuffers itself instead of calling the flatc output in
``generated/``: that code is correct with the pinned runtime but costs ~25 us per SST per direction
(measured: 2.5 s to encode and 3.6 s to decode only the SST table of a 100k-SST manifest), and a
manifest is rewritten on every flush and compaction. The small writer and reader below implement
just the parts of the format the schema uses (tables with shared vtables, vectors of offsets,
structs and bytes, strings), driven by a per-table list of field kinds that mirrors the schema's
field order. ``tests/manifest/test_codec.py`` checks both directions against the generated bindings,
which stay the reference for the layout.

The reader bounds-checks every offset itself: the Python runtime has no verifier, and Python's
negative indexing would silently wrap a bad offset. Any malformed payload therefore surfaces as
``CorruptionError`` naming the object, never as a raw ``IndexError`` or ``struct.error``.
"""

from __future__ import annotations

import gc
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from operator import add, is_not, itemgetter
from typing import Any

from ulid import ULID

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.manifest.model import (
    MAX_PARALLEL_WRITES,
    BoundKind,
    BytesBound,
    BytesRange,
    Checkpoint,
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from slatedb_core.meta import envelope

MANIFEST_MAGIC = b"SDBM"
SUPPORTED_VERSIONS = frozenset({1, 2})
DEFAULT_FORMAT_VERSION = 2

# FlatBuffers file identifiers: a cheap check that the payload holds the root the header promised.
_IDENT = {1: b"SDM1", 2: b"SDM2"}
_WRITER_CHECKPOINT = 1  # CheckpointMetadata union tag (0 = NONE)

# Field kinds: B u8/bool, I u32, Q u64 (absent = 0), q optional u64 (absent = None), O offset to a
# table/vector/string, D a 16-byte struct (Ulid / Uuid: two little-endian u64 halves, high first).
_WIDTH = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 16}
_ALIGN = {"B": 1, "I": 4, "Q": 8, "q": 8, "O": 4, "D": 8}
_FMT = {"B": "B", "I": "I", "Q": "Q", "q": "Q", "O": "I", "D": "16s"}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_VT_HEAD = struct.Struct("<HH")
_NONES = (None,) * 32


class _Table:
    """One table of manifest.fbs: field kinds in declaration (= vtable slot) order."""

    def __init__(self, name: str, kinds: str) -> None:
        self.name = name
        self.kinds = kinds
        self.absent = tuple(0 if k in "BIQ" else None for k in kinds)
        self.layouts: dict[tuple[bool, ...], _WriteLayout] = {}


# One entry per table of schema/manifest.fbs, fields in declaration order: keep in step with it.
_BOUND = _Table("BytesBound", "BO")
_RANGE = _Table("BytesRange", "OO")
_INFO = _Table("SsTableInfo", "OOQQQQIQQ")
_SST = _Table("CompactedSsTable", "DOID")
_VIEW = _Table("CompactedSsTableView", "DDO")
_RUN2 = _Table("SortedRunV2", "IO")
_EXT = _Table("ExternalDb", "ODDO")
_WCP = _Table("WriterCheckpoint", "Q")
_CP = _Table("Checkpoint", "DQqQBOO")
_M2 = _Table("ManifestV2", "OBqQQQQQOOOOQDDIO")
_RUN1 = _Table("SortedRunV1", "IO")
_M1 = _Table("ManifestV1", "OBqQQQQQDOOOQI")


class _Malformed(Exception):
    """Raised inside the reader; ``decode_manifest`` turns it into CorruptionError."""


def _swap(raw: bytes) -> bytes:
    """Big-endian 16-byte id <-> the schema's (high, low) pair of little-endian u64s (an involution)."""
    return raw[7::-1] + raw[15:7:-1]


def _ulid(raw: bytes) -> ULID:
    return ULID(raw[7::-1] + raw[15:7:-1])


def _uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=_swap(raw))


# ----------------------------------------------------------------------------------------- writer


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """An itemgetter that always returns a tuple, whatever the number of indices."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    if not indices:
        return lambda seq: ()
    return itemgetter(*indices)


class _WriteLayout:
    """How a table with a given set of present fields is packed: one struct call per table."""

    def __init__(self, table: _Table, present: tuple[bool, ...]) -> None:
        slots = [s for s, p in enumerate(present) if p]
        order = sorted(slots, key=lambda s: (_ALIGN[table.kinds[s]] != 4, -_ALIGN[table.kinds[s]]))
        fmt, pos, offs = ["<i"], 4, [0] * (max(slots) + 1 if slots else 0)
        self.rel: list[tuple[int, int]] = []  # (index in packing order, position) of offset fields
        for i, s in enumerate(order):
            kind = table.kinds[s]
            pad = -pos % _ALIGN[kind]
            fmt.append("x" * pad + _FMT[kind])
            pos += pad
            offs[s] = pos
            if kind == "O":
                self.rel.append((i, pos))
            pos += _WIDTH[kind]
        self.pick = _picker(order)
        self.struct = struct.Struct("".join(fmt))
        self.align = 8 if any(_ALIGN[table.kinds[s]] == 8 for s in slots) else 4
        self.vtable = struct.pack(f"<HH{len(offs)}H", 4 + 2 * len(offs), pos, *offs)


class _Writer:
    """A back-to-front FlatBuffers builder; positions are byte counts from the end of the buffer."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._vtables: dict[bytes, int] = {}

    def _put(self, data: bytes, align: int, shift: int = 0) -> int:
        pad = (shift - self._size - len(data)) % align
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(data)
        self._size += pad + len(data)
        return self._size

    def table(self, table: _Table, values: Sequence[Any]) -> int:
        """Children (offset values) must already be written; ``None`` leaves a field absent."""
        present = tuple(map(is_not, values, _NONES))
        lay = table.layouts.get(present)
        if lay is None:
            lay = table.layouts[present] = _WriteLayout(table, present)
        vt = self._vtables.get(lay.vtable)
        if vt is None:
            vt = self._vtables[lay.vtable] = self._put(lay.vtable, 2)
        size = lay.struct.size
        pad = (-self._size - size) % lay.align
        start = self._size + pad + size
        args: Sequence[Any] = lay.pick(values)
        if lay.rel:
            fixed = list(args)
            for i, pos in lay.rel:
                fixed[i] = start - pos - fixed[i]
            args = fixed
        if pad:
            self._chunks.append(bytes(pad))
        self._chunks.append(lay.struct.pack(vt - start, *args))
        self._size = start
        return start

    def tables(self, offsets: Sequence[int]) -> int:
        n = len(offsets)
        start = self._size + (-self._size) % 4 + 4 + 4 * n
        rel = map(int.__sub__, range(start - 4, start - 4 - 4 * n, -4), offsets)
        return self._put(struct.pack(f"<I{n}I", n, *rel), 4)

    def blob(self, data: bytes) -> int:
        return self._put(_U32.pack(len(data)) + data, 4)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        return self._put(_U32.pack(len(data)) + data + b"\0", 4)

    def structs16(self, raws: Sequence[bytes]) -> int:
        return self._put(_U32.pack(len(raws)) + b"".join(raws), 8, shift=4)

    def finish(self, root: int, ident: bytes) -> bytes:
        start = self._size + (-self._size - 8) % 8 + 8
        self._put(_U32.pack(start - root) + ident, 8)
        return b"".join(reversed(self._chunks))


def _write_sst(w: _Writer, sst: CompactedSst) -> int:
    i = sst.info
    fk = None if i.first_key is None else w.blob(i.first_key)
    lk = None if i.last_key is None else w.blob(i.last_key)
    info = w.table(_INFO, (fk, lk, i.index_offset, i.index_len, i.filter_offset, i.filter_len,
                           i.compression, i.entry_count, i.size_bytes))
    orig = None if sst.original_id is None else _swap(sst.original_id.bytes)
    return w.table(_SST, (_swap(sst.id.bytes), info, sst.format_version, orig))


def _write_bound(w: _Writer, bound: BytesBound) -> int:
    key = None if bound.key is None else w.blob(bound.key)
    return w.table(_BOUND, (int(bound.kind), key))


def _write_view(w: _Writer, view: SstView) -> int:
    rng = view.visible_range
    r = None
    if rng is not None:
        start, end = _write_bound(w, rng.start), _write_bound(w, rng.end)
        r = w.table(_RANGE, (start, end))
    return w.table(_VIEW, (_swap(view.view_id.bytes), _swap(view.sst_id.bytes), r))


def _write_head(w: _Writer, m: Manifest) -> tuple[Any, ...]:
    """The first eight fields, which ManifestV1 and V2 share; also writes the checkpoints vector,
    which both store alike, and returns its offset last."""
    exts = []
    for e in m.external_dbs:
        final = None if e.final_checkpoint_id is None else _swap(e.final_checkpoint_id.bytes)
        ids = w.structs16([_swap(s.bytes) for s in e.sst_ids])
        path = w.string(e.path)
        exts.append(w.table(_EXT, (path, _swap(e.source_checkpoint_id.bytes), final, ids)))
    cps = []
    for cp in m.checkpoints:
        name = None if cp.name is None else w.string(cp.name)
        meta = None if cp.writer_epoch is None else w.table(_WCP, (cp.writer_epoch,))
        tag = None if meta is None else _WRITER_CHECKPOINT
        cps.append(w.table(_CP, (_swap(cp.id.bytes), cp.manifest_id, cp.expire_time_s,
                                 cp.create_time_s, tag, meta, name)))
    return (w.tables(exts) if exts else None, m.initialized, m.destroyed_at_s, m.writer_epoch,
            m.compactor_epoch, m.replay_after_wal_id, m.wal_id_last_seen, m.next_wal_sst_id,
            w.tables(cps))


def _opt_id(u: ULID | None) -> bytes | None:
    return None if u is None else _swap(u.bytes)


def _sst_index(m: Manifest) -> dict[bytes, CompactedSst]:
    by_id: dict[bytes, CompactedSst] = {}
    for s in m.ssts:
        if s.id.bytes in by_id:
            raise InvalidArgument(f"manifest lists SST {s.id} twice in ssts")
        by_id[s.id.bytes] = s
    return by_id


def _all_views(m: Manifest) -> Iterable[SstView]:
    yield from m.l0
    for run in m.compacted:
        yield from run.views


def _encode_v2(m: Manifest) -> bytes:
    known = _sst_index(m)
    for v in _all_views(m):
        if v.sst_id.bytes not in known:
            raise InvalidArgument(f"view {v.view_id} references SST {v.sst_id}, not in ssts")
    w = _Writer()
    ssts = w.tables([_write_sst(w, s) for s in m.ssts])
    l0 = w.tables([_write_view(w, v) for v in m.l0])
    runs = w.tables([w.table(_RUN2, (r.id, w.tables([_write_view(w, v) for v in r.views])))
                     for r in m.compacted])
    *head, cps = _write_head(w, m)
    key_range = None
    if m.key_range is not None:
        bounds = (_write_bound(w, m.key_range.start), _write_bound(w, m.key_range.end))
        key_range = w.table(_RANGE, bounds)
    root = w.table(_M2, (*head, ssts, l0, runs, cps, m.last_l0_seq,
                         _opt_id(m.last_compacted_l0_view_id),
                         _opt_id(m.last_compacted_l0_sst_id), m.max_parallel_writes, key_range))
    return w.finish(root, _IDENT[2])


def _check_v1(m: Manifest, known: dict[bytes, CompactedSst]) -> None:
    """V1 stores SSTs inline where the views are, so only a plain one-view-per-SST layout fits."""
    seen: set[bytes] = set()
    for v in _all_views(m):
        if v.visible_range is not None:
            raise InvalidArgument(f"ManifestV1 cannot store view {v.view_id}: it has a visible_range")
        if v.view_id != v.sst_id:
            raise InvalidArgument(
                f"ManifestV1 cannot store view {v.view_id}: its id differs from its SST {v.sst_id}"
            )
        if v.sst_id.bytes not in known:
            raise InvalidArgument(f"view {v.view_id} references SST {v.sst_id}, not in ssts")
        if v.sst_id.bytes in seen:
            raise InvalidArgument(f"ManifestV1 cannot store SST {v.sst_id}: two views reference it")
        seen.add(v.sst_id.bytes)
    if len(seen) != len(known):
        orphans = [str(s.id) for k, s in known.items() if k not in seen]
        raise InvalidArgument(
            f"ManifestV1 cannot store SSTs that no view references: {', '.join(orphans[:5])}"
        )
    if m.key_range is not None:
        raise InvalidArgument("ManifestV1 cannot store a key_range (a projected database)")
    if m.last_compacted_l0_view_id != m.last_compacted_l0_sst_id:
        raise InvalidArgument(
            "ManifestV1 stores one l0_last_compacted id: last_compacted_l0_view_id "
            f"({m.last_compacted_l0_view_id}) must equal last_compacted_l0_sst_id "
            f"({m.last_compacted_l0_sst_id})"
        )


def _encode_v1(m: Manifest) -> bytes:
    known = _sst_index(m)
    _check_v1(m, known)
    w = _Writer()
    l0 = w.tables([_write_sst(w, known[v.sst_id.bytes]) for v in m.l0])
    runs = w.tables([
        w.table(_RUN1, (r.id, w.tables([_write_sst(w, known[v.sst_id.bytes]) for v in r.views])))
        for r in m.compacted
    ])
    *head, cps = _write_head(w, m)
    root = w.table(_M1, (*head, _opt_id(m.last_compacted_l0_sst_id), l0, runs, cps,
                         m.last_l0_seq, m.max_parallel_writes))
    return w.finish(root, _IDENT[1])


def _check_parallel_writes(m: Manifest) -> None:
    if not 1 <= m.max_parallel_writes <= MAX_PARALLEL_WRITES:
        raise InvalidArgument(
            f"max_parallel_writes {m.max_parallel_writes} does not fit 1..{MAX_PARALLEL_WRITES}"
        )


def _parallel_writes(stored: int) -> int:
    """0 is the schema default (what an absent field reads as, and what a writer that predates
    parallel WAL writes stores): one write in flight."""
    if stored == 0:
        return 1
    if stored > MAX_PARALLEL_WRITES:
        raise _Malformed(f"max_parallel_writes {stored} exceeds {MAX_PARALLEL_WRITES}")
    return stored


def encode_manifest(
    manifest: Manifest, *, format_version: int = DEFAULT_FORMAT_VERSION, nonce: bytes | None = None
) -> bytes:
    """Serialise ``manifest`` as ManifestV1 or V2 inside the manifest envelope.

    V1 (seed 003, phase 1: "write V1") is refused with ``InvalidArgument`` for anything it would
    silently lose: visible ranges, views whose id is not their SST's id, an SST behind two views or
    behind none, and a last-compacted view id that differs from the last-compacted SST id. External
    databases are kept: ManifestV1 has the same ``external_dbs`` field as V2.
    """
    if format_version not in SUPPORTED_VERSIONS:
        raise InvalidArgument(f"unsupported manifest format version {format_version}")
    _check_parallel_writes(manifest)
    try:
        payload = _encode_v1(manifest) if format_version == 1 else _encode_v2(manifest)
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"manifest has a value that does not fit its field: {e}") from e
    return envelope.seal(MANIFEST_MAGIC, format_version, payload, nonce)


# ----------------------------------------------------------------------------------------- reader


class _ReadLayout:
    """A vtable as found in the buffer, compiled to one struct call that reads every field."""

    def __init__(self, table: _Table, offs: Sequence[int], tsize: int) -> None:
        fields = sorted((off, s, table.kinds[s]) for s, off in enumerate(offs) if off)
        fmt, end = ["<"], fields[0][0] if fields else 0
        self.first = end
        index: dict[int, int] = {}
        self.rel: list[tuple[int, int]] = []
        for i, (off, slot, kind) in enumerate(fields):
            if off < end or off + _WIDTH[kind] > tsize:
                raise _Malformed(f"{table.name} field {slot} overlaps or lies outside its table")
            fmt.append("x" * (off - end) + _FMT[kind])
            end = off + _WIDTH[kind]
            index[slot] = i
            if kind == "O":
                self.rel.append((slot, off))
        self.struct = struct.Struct("".join(fmt))
        self.tsize = tsize
        n = len(fields)
        self.pick = _picker([index.get(s, n + s) for s in range(len(table.kinds))])


class _Reader:
    """Bounds-checked access to one payload; vtable layouts are compiled once and shared."""

    def __init__(self, buf: bytes) -> None:
        self._buf = buf
        self._n = len(buf)
        self._layouts: dict[tuple[str, int], _ReadLayout] = {}

    def root(self, ident: bytes) -> int:
        if self._n < 8:
            raise _Malformed(f"payload of {self._n} bytes is too short")
        if self._buf[4:8] != ident:
            raise _Malformed(f"file identifier {self._buf[4:8]!r}, expected {ident!r}")
        return int(_U32.unpack_from(self._buf, 0)[0])

    def _layout(self, table: _Table, vt: int) -> _ReadLayout:
        if vt < 0 or vt + 4 > self._n:
            raise _Malformed(f"{table.name} vtable at {vt} is out of bounds")
        vsize, tsize = _VT_HEAD.unpack_from(self._buf, vt)
        if vsize < 4 or vsize % 2 or vt + vsize > self._n or tsize < 4:
            raise _Malformed(f"{table.name} vtable at {vt} is malformed")
        k = min((vsize - 4) // 2, len(table.kinds))
        offs = struct.unpack_from(f"<{k}H", self._buf, vt + 4)
        lay = self._layouts[table.name, vt] = _ReadLayout(table, offs, tsize)
        return lay

    def table(self, table: _Table, pos: int) -> list[Any]:
        """Field values by slot; offset fields come back as absolute positions, absent ones as the
        schema default (0 for plain scalars, None for optional scalars, offsets and structs)."""
        if pos < 0 or pos + 4 > self._n:
            raise _Malformed(f"{table.name} table at {pos} is out of bounds")
        vt = pos - _I32.unpack_from(self._buf, pos)[0]
        lay = self._layouts.get((table.name, vt)) or self._layout(table, vt)
        if pos + lay.tsize > self._n:
            raise _Malformed(f"{table.name} table at {pos} runs past the payload")
        vals = list(lay.pick(lay.struct.unpack_from(self._buf, pos + lay.first) + table.absent))
        for slot, off in lay.rel:
            vals[slot] += pos + off
        return vals

    def _vector(self, pos: int, width: int) -> tuple[int, int]:
        if pos < 0 or pos + 4 > self._n:
            raise _Malformed(f"vector at {pos} is out of bounds")
        count = _U32.unpack_from(self._buf, pos)[0]
        if pos + 4 + count * width > self._n:
            raise _Malformed(f"vector at {pos} of {count} elements runs past the payload")
        return pos + 4, count

    def tables(self, pos: int | None, what: str) -> list[int]:
        if pos is None:
            raise _Malformed(f"required field {what} is missing")
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
        raise _Malformed(f"required field {what} is missing")
    return value


def _read_sst(r: _Reader, pos: int) -> tuple[bytes, CompactedSst]:
    raw, info_pos, fmt_version, orig = r.table(_SST, pos)
    fk, lk, io, il, fo, fl, cc, ec, sb = r.table(_INFO, _need(info_pos, "CompactedSsTable.info"))
    info = SstInfo(
        None if fk is None else r.blob(fk), None if lk is None else r.blob(lk),
        io, il, fo, fl, cc, ec, sb,
    )
    sst_id = _ulid(_need(raw, "CompactedSsTable.id"))
    return raw, CompactedSst(sst_id, info, fmt_version, None if orig is None else _ulid(orig))


def _read_bound(r: _Reader, pos: int | None) -> BytesBound:
    kind, key = r.table(_BOUND, _need(pos, "BytesRange bound"))
    if kind > BoundKind.EXCLUDED:
        raise _Malformed(f"BoundKind {kind} is out of range")
    return BytesBound(BoundKind(kind), None if key is None else r.blob(key))


def _read_view(r: _Reader, pos: int, ids: dict[bytes, ULID]) -> SstView:
    vid, sid, rng = r.table(_VIEW, pos)
    sst_id = ids.get(_need(sid, "CompactedSsTableView.sst_id"))
    if sst_id is None:
        raise _Malformed(f"view references SST {_ulid(sid)}, which is not in ssts")
    view_id = ids.get(_need(vid, "CompactedSsTableView.id"))
    if view_id is None:
        view_id = _ulid(vid)
    if rng is None:
        return SstView(view_id, sst_id)
    start, end = r.table(_RANGE, rng)
    return SstView(view_id, sst_id, BytesRange(_read_bound(r, start), _read_bound(r, end)))


def _read_checkpoint(r: _Reader, pos: int) -> Checkpoint:
    raw, manifest_id, expire, create, tag, meta, name = r.table(_CP, pos)
    epoch = None
    if tag == _WRITER_CHECKPOINT:
        epoch = r.table(_WCP, _need(meta, "Checkpoint.metadata"))[0]
    elif tag != 0:
        raise _Malformed(f"CheckpointMetadata type {tag} is out of range")
    return Checkpoint(_uuid(_need(raw, "Checkpoint.id")), manifest_id, create, expire, epoch,
                      None if name is None else r.blob(name).decode())


def _read_external_db(r: _Reader, pos: int) -> ExternalDb:
    path, source, final, ids = r.table(_EXT, pos)
    return ExternalDb(
        r.blob(_need(path, "ExternalDb.path")).decode(),
        _uuid(_need(source, "ExternalDb.source_checkpoint_id")),
        None if final is None else _uuid(final),
        tuple(map(_ulid, r.structs16(_need(ids, "ExternalDb.sst_ids")))),
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
        "checkpoints": tuple(_read_checkpoint(r, p) for p in r.tables(cps, "checkpoints")),
    }


def _decode_v2(r: _Reader) -> Manifest:
    fields = r.table(_M2, r.root(_IDENT[2]))
    (ssts_pos, l0_pos, runs_pos, cps_pos, last_l0_seq, lc_view, lc_sst, max_parallel,
     range_pos) = fields[8:]
    key_range = None
    if range_pos is not None:
        start, end = r.table(_RANGE, range_pos)
        key_range = BytesRange(_read_bound(r, start), _read_bound(r, end))
    ids: dict[bytes, ULID] = {}
    ssts = []
    for pos in r.tables(ssts_pos, "ssts"):
        raw, sst = _read_sst(r, pos)
        if raw in ids:
            raise _Malformed(f"SST {sst.id} appears twice in ssts")
        ids[raw] = sst.id
        ssts.append(sst)
    runs = []
    for pos in r.tables(runs_pos, "compacted"):
        run_id, views = r.table(_RUN2, pos)
        vs = tuple(_read_view(r, p, ids) for p in r.tables(views, "SortedRunV2.views"))
        runs.append(SortedRun(run_id, vs))
    return Manifest(
        ssts=tuple(ssts), l0=tuple(_read_view(r, p, ids) for p in r.tables(l0_pos, "l0")),
        compacted=tuple(runs), last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=None if lc_view is None else _ulid(lc_view),
        last_compacted_l0_sst_id=None if lc_sst is None else _ulid(lc_sst),
        max_parallel_writes=_parallel_writes(max_parallel), key_range=key_range,
        **_read_head(r, fields[:8], cps_pos),
    )


def _decode_v1(r: _Reader) -> Manifest:
    """Views get their SST's id and no range; ``ssts`` lists SSTs in order of first appearance."""
    fields = r.table(_M1, r.root(_IDENT[1]))
    last_compacted, l0_pos, runs_pos, cps_pos, last_l0_seq, max_parallel = fields[8:]
    ssts: dict[bytes, CompactedSst] = {}

    def view(pos: int) -> SstView:
        raw, sst = _read_sst(r, pos)
        sst = ssts.setdefault(raw, sst)
        return SstView(sst.id, sst.id)

    l0 = tuple(view(p) for p in r.tables(l0_pos, "l0"))
    runs = []
    for pos in r.tables(runs_pos, "compacted"):
        run_id, inline = r.table(_RUN1, pos)
        runs.append(SortedRun(run_id, tuple(view(p) for p in r.tables(inline, "SortedRunV1.ssts"))))
    lc = None if last_compacted is None else _ulid(last_compacted)
    return Manifest(
        ssts=tuple(ssts.values()), l0=l0, compacted=tuple(runs), last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=lc, last_compacted_l0_sst_id=lc,
        max_parallel_writes=_parallel_writes(max_parallel), **_read_head(r, fields[:8], cps_pos),
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
    opened = envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=name, versions=SUPPORTED_VERSIONS)
    try:
        with _gc_paused():
            return _DECODERS[opened.version](_Reader(opened.payload))
    except (_Malformed, struct.error, ValueError, TypeError, OverflowError, IndexError) as e:
        raise CorruptionError(name, f"malformed ManifestV{opened.version} payload: {e}") from e
