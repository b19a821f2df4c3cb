"""Manifest -> bytes: the FlatBuffers writer of :mod:`slatedb_core.manifest.codec`."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from operator import is_not
from typing import Any

from ulid import ULID

from slatedb_core.errors import InvalidArgument
from slatedb_core.keys import BytesBound
from slatedb_core.manifest._fb_layout import (
    ALIGN,
    BOUND,
    CP,
    DEFAULT_FORMAT_VERSION,
    EXT,
    FMT,
    IDENT,
    INFO,
    M1,
    M2,
    MANIFEST_MAGIC,
    NONES,
    RANGE,
    RUN1,
    RUN2,
    SST,
    SUPPORTED_VERSIONS,
    U32,
    VIEW,
    WCP,
    WIDTH,
    WRITER_CHECKPOINT,
    FbTable,
    picker,
    swap_halves,
)
from slatedb_core.manifest.model import MAX_PARALLEL_WRITES, CompactedSst, Manifest, SstView
from slatedb_core.meta import envelope


class WriteLayout:
    """How a table with a given set of present fields is packed: one struct call per table."""

    def __init__(self, table: FbTable, present: tuple[bool, ...]) -> None:
        slots = [s for s, p in enumerate(present) if p]
        order = sorted(slots, key=lambda s: (ALIGN[table.kinds[s]] != 4, -ALIGN[table.kinds[s]]))
        fmt, pos, offs = ["<i"], 4, [0] * (max(slots) + 1 if slots else 0)
        self.rel: list[tuple[int, int]] = []  # (index in packing order, position) of offset fields
        for i, s in enumerate(order):
            kind = table.kinds[s]
            pad = -pos % ALIGN[kind]
            fmt.append("x" * pad + FMT[kind])
            pos += pad
            offs[s] = pos
            if kind == "O":
                self.rel.append((i, pos))
            pos += WIDTH[kind]
        self.pick = picker(order)
        self.struct = struct.Struct("".join(fmt))
        self.align = 8 if any(ALIGN[table.kinds[s]] == 8 for s in slots) else 4
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

    def table(self, table: FbTable, values: Sequence[Any]) -> int:
        """Children (offset values) must already be written; ``None`` leaves a field absent."""
        present = tuple(map(is_not, values, NONES))
        lay = table.layouts.get(present)
        if lay is None:
            lay = table.layouts[present] = WriteLayout(table, present)
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
        return self._put(U32.pack(len(data)) + data, 4)

    def string(self, text: str) -> int:
        data = text.encode("utf-8")
        return self._put(U32.pack(len(data)) + data + b"\0", 4)

    def structs16(self, raws: Sequence[bytes]) -> int:
        return self._put(U32.pack(len(raws)) + b"".join(raws), 8, shift=4)

    def finish(self, root: int, ident: bytes) -> bytes:
        start = self._size + (-self._size - 8) % 8 + 8
        self._put(U32.pack(start - root) + ident, 8)
        return b"".join(reversed(self._chunks))


def _write_sst(w: _Writer, sst: CompactedSst) -> int:
    i = sst.info
    fk = None if i.first_key is None else w.blob(i.first_key)
    lk = None if i.last_key is None else w.blob(i.last_key)
    info = w.table(INFO, (fk, lk, i.index_offset, i.index_len, i.filter_offset, i.filter_len,
                           i.compression, i.entry_count, i.size_bytes))
    orig = None if sst.original_id is None else swap_halves(sst.original_id.bytes)
    return w.table(SST, (swap_halves(sst.id.bytes), info, sst.format_version, orig))


def _write_bound(w: _Writer, bound: BytesBound) -> int:
    key = None if bound.key is None else w.blob(bound.key)
    return w.table(BOUND, (int(bound.kind), key))


def _write_view(w: _Writer, view: SstView) -> int:
    rng = view.visible_range
    r = None
    if rng is not None:
        start, end = _write_bound(w, rng.start), _write_bound(w, rng.end)
        r = w.table(RANGE, (start, end))
    return w.table(VIEW, (swap_halves(view.view_id.bytes), swap_halves(view.sst_id.bytes), r))


def _write_head(w: _Writer, m: Manifest) -> tuple[Any, ...]:
    """The first eight fields, which ManifestV1 and V2 share; also writes the checkpoints vector,
    which both store alike, and returns its offset last."""
    exts = []
    for e in m.external_dbs:
        final = None if e.final_checkpoint_id is None else swap_halves(e.final_checkpoint_id.bytes)
        ids = w.structs16([swap_halves(s.bytes) for s in e.sst_ids])
        path = w.string(e.path)
        exts.append(w.table(EXT, (path, swap_halves(e.source_checkpoint_id.bytes), final, ids)))
    cps = []
    for cp in m.checkpoints:
        name = None if cp.name is None else w.string(cp.name)
        meta = None if cp.writer_epoch is None else w.table(WCP, (cp.writer_epoch,))
        tag = None if meta is None else WRITER_CHECKPOINT
        cps.append(w.table(CP, (swap_halves(cp.id.bytes), cp.manifest_id, cp.expire_time_s,
                                 cp.create_time_s, tag, meta, name)))
    return (w.tables(exts) if exts else None, m.initialized, m.destroyed_at_s, m.writer_epoch,
            m.compactor_epoch, m.replay_after_wal_id, m.wal_id_last_seen, m.next_wal_sst_id,
            w.tables(cps))


def _opt_id(u: ULID | None) -> bytes | None:
    return None if u is None else swap_halves(u.bytes)


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
    runs = w.tables([w.table(RUN2, (r.id, w.tables([_write_view(w, v) for v in r.views])))
                     for r in m.compacted])
    *head, cps = _write_head(w, m)
    key_range = None
    if m.key_range is not None:
        bounds = (_write_bound(w, m.key_range.start), _write_bound(w, m.key_range.end))
        key_range = w.table(RANGE, bounds)
    root = w.table(M2, (*head, ssts, l0, runs, cps, m.last_l0_seq,
                         _opt_id(m.last_compacted_l0_view_id),
                         _opt_id(m.last_compacted_l0_sst_id), m.max_parallel_writes, key_range))
    return w.finish(root, IDENT[2])


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
        w.table(RUN1, (r.id, w.tables([_write_sst(w, known[v.sst_id.bytes]) for v in r.views])))
        for r in m.compacted
    ])
    *head, cps = _write_head(w, m)
    root = w.table(M1, (*head, _opt_id(m.last_compacted_l0_sst_id), l0, runs, cps,
                         m.last_l0_seq, m.max_parallel_writes))
    return w.finish(root, IDENT[1])


def _check_parallel_writes(m: Manifest) -> None:
    if not 1 <= m.max_parallel_writes <= MAX_PARALLEL_WRITES:
        raise InvalidArgument(
            f"max_parallel_writes {m.max_parallel_writes} does not fit 1..{MAX_PARALLEL_WRITES}"
        )


def encode_manifest(
    manifest: Manifest,
    *,
    format_version: int = DEFAULT_FORMAT_VERSION,
    nonce: bytes | None = None,
    parent: bytes | None = None,
) -> bytes:
    """Serialise ``manifest`` as ManifestV1 or V2 inside the manifest envelope.

    V1 (SlateDB RFC 0004, phase 1: "write V1") is refused with ``InvalidArgument`` for anything it would
    silently lose: visible ranges, views whose id is not their SST's id, an SST behind two views or
    behind none, and a last-compacted view id that differs from the last-compacted SST id. External
    databases are kept: ManifestV1 has the same ``external_dbs`` field as V2.
    """
    if format_version not in SUPPORTED_VERSIONS:
        raise InvalidArgument(f"unsupported manifest format version {format_version}")
    _check_parallel_writes(manifest)
    if len({c.id for c in manifest.checkpoints}) != len(manifest.checkpoints):
        raise InvalidArgument("manifest lists a checkpoint id twice")
    try:
        payload = _encode_v1(manifest) if format_version == 1 else _encode_v2(manifest)
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"manifest has a value that does not fit its field: {e}") from e
    return envelope.seal(MANIFEST_MAGIC, format_version, payload, nonce, parent=parent)

