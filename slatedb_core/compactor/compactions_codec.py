"""``.compactions`` bytes as SlateDB 0.17 writes them: a big-endian u16 format version (2), then a
FlatBuffer whose root is ``CompactionsV1`` (SlateDB's schemas/compactor.fbs, common.fbs and
sst.fbs; docs/format.md, "Compactions").

Slots past every slot 0.17 uses, after a gap left for SlateDB's own growth, hold what is ours;
SlateDB's reader skips them, and its writer drops them when it rewrites the namespace:

* ``CompactionsV1`` 8: a random nonce (16 bytes), so two writers never create byte-identical
  versions (:mod:`slatedb_core.meta.sequenced` settles an ambiguous create by comparing bytes);
  9: a CRC-32 of the whole object with these four bytes zeroed (absent on SlateDB's objects;
  required once any compaction carries our slots).
* ``Compaction`` 16: the output SST ids our compactor announces before writing each one;
  17: kind (0 l0, 1 sorted runs); 18 and 19: created/updated, ms since the epoch; 20: error;
  21: 1 on our running compactions (see below).
* ``SsTableInfo`` 16 and 17: our entry count and size in bytes, as in the manifest.

Our ``running`` compaction is written as SlateDB's ``Submitted`` with our slot 21 set (1). A
SlateDB coordinator can only see it once it has fenced our compactor (it bumps the compactor
epoch first), and it then validates a ``Submitted`` spec against its manifest before anything
else: the spec runs again if its sources are still there and fails if they are gone. Written as
``Running``, a record whose sources were gone (its commit landed, its close did not) was
reclaimed and released by SlateDB's worker forever, and blocked every later L0 compaction
(checked against the wheel; tests/compactor/test_compactions_slatedb.py).
"""

from __future__ import annotations

import os
import struct
import zlib

from ulid import ULID

from slatedb_core.compactor.compactions_model import (
    CompactionContext,
    CompactionRecord,
    CompactionsState,
    Kind,
    Status,
    Subcompaction,
    WorkerSpec,
)
from slatedb_core.compactor.flatbuf import REF, U8, U16, U32, U64, Builder, Malformed, Reader, Table
from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest.model import CompactedSst, SstInfo

FORMAT_VERSION = 2
"""SlateDB 0.17's ``COMPACTIONS_FORMAT_VERSION``; 1 (no explicit destination) is still read."""
SUPPORTED_VERSIONS = frozenset({1, 2})
SUBMITTED = 0
OURS_RUNNING = 1  # in Compaction slot _RUNNING

STATUS_CODE: dict[str, int] = {
    "submitted": 0, "running": 1, "committed": 2, "failed": 3, "compacted": 4, "scheduled": 5,
}
STATUS_OF: dict[int, Status] = {
    0: "submitted", 1: "running", 2: "committed", 3: "failed", 4: "compacted", 5: "scheduled",
}
KIND_CODE: dict[str, int] = {"l0": 0, "sorted-runs": 1}
KIND_OF: dict[int, Kind] = {0: "l0", 1: "sorted-runs"}
TIERED, DRAIN = 1, 2  # the CompactionSpec union's tags
TIERED_CONTEXT = 1  # the CompactionContext union's tag
_U32_MAX = 2**32 - 1
# Our slots, past a gap left for SlateDB's own growth (as the manifest codec leaves one):
_NONCE, _CHECKSUM = 8, 9  # CompactionsV1
_OUTPUTS, _KIND, _CREATED, _UPDATED, _ERROR, _RUNNING = 16, 17, 18, 19, 20, 21  # Compaction
_ENTRIES, _SIZE = 16, 17  # SsTableInfo, as slatedb_core.manifest.sst_info writes them
_VERSION = struct.Struct(">H")


# ---- writing ----------------------------------------------------------------------------------
def _ulid(b: Builder, u: ULID) -> int:
    raw = u.bytes
    return b.table([(0, U64, int.from_bytes(raw[:8], "big")), (1, U64, int.from_bytes(raw[8:], "big"))])


def _ulids(b: Builder, ids: tuple[ULID, ...]) -> int:
    return b.refs([_ulid(b, u) for u in ids])


def _bound(b: Builder, bound: BytesBound) -> int:
    key = None if bound.key is None else b.blob(bound.key)
    return b.table([(0, REF, key), (1, U8, int(bound.kind) + 1)])


def _range(b: Builder, r: BytesRange) -> int:
    start, end = _bound(b, r.start), _bound(b, r.end)
    return b.table([(0, REF, start), (1, REF, end)])


def _sst(b: Builder, sst: CompactedSst) -> int:
    i = sst.info
    first = None if i.first_key is None else b.blob(i.first_key)
    last = None if i.last_key is None else b.blob(i.last_key)
    info = b.table([
        (0, REF, first), (1, U64, i.index_offset), (2, U64, i.index_len),
        (3, U64, i.filter_offset), (4, U64, i.filter_len), (5, U8, i.compression),
        (6, U8, i.sst_type), (7, REF, last), (8, U64, i.stats_offset), (9, U64, i.stats_len),
        (10, U8, i.filter_format), (_ENTRIES, U64, i.entry_count or None),
        (_SIZE, U64, i.size_bytes or None),
    ])
    return b.table([(0, REF, _ulid(b, sst.id)), (1, REF, info), (3, U16, sst.format_version)])


def _ssts(b: Builder, ssts: tuple[CompactedSst, ...]) -> int:
    return b.refs([_sst(b, s) for s in ssts])


def _context(b: Builder, ctx: CompactionContext) -> int:
    subs = None
    if ctx.subcompactions:
        subs = b.refs([
            b.table([
                (0, REF, _range(b, s.range)),
                (1, REF, _ssts(b, s.output_ssts) if s.output_ssts else None),
            ])
            for s in ctx.subcompactions
        ])
    return b.table([(0, REF, subs), (1, U64, ctx.retention_min_seq)])


def _compaction(b: Builder, c: CompactionRecord) -> int:
    if c.destination > _U32_MAX or any(r > _U32_MAX for r in c.source_run_ids):
        raise InvalidArgument(f"compaction {c.id}: sorted run ids are u32 in SlateDB's format")
    views = _ulids(b, c.source_view_ids) if c.source_view_ids else None
    runs = b.u32s(c.source_run_ids) if c.source_run_ids else None
    segment = b.blob(c.segment)
    if c.drain:
        spec = b.table([(0, REF, segment), (1, REF, views), (2, REF, runs)])
    else:
        spec = b.table([(1, REF, runs), (2, REF, views), (3, REF, segment), (4, U32, c.destination)])
    worker = c.worker
    worker_at = None
    if worker is not None:
        worker_at = b.table([(0, REF, b.string(worker.worker_id)), (1, U64, worker.last_heartbeat_ms)])
    ctx = None if c.context is None else _context(b, c.context)
    error = None if c.error is None else b.string(c.error)
    return b.table([
        (0, REF, _ulid(b, c.id)),
        (1, U8, DRAIN if c.drain else TIERED),
        (2, REF, spec),
        (3, U8, SUBMITTED if c.status == "running" else STATUS_CODE[c.status]),
        (4, REF, _ssts(b, c.output_ssts)),
        (5, REF, worker_at),
        (6, U8, None if ctx is None else TIERED_CONTEXT),
        (7, REF, ctx),
        (_OUTPUTS, REF, _ulids(b, c.outputs)),
        (_KIND, U8, KIND_CODE[c.kind]),
        (_CREATED, U64, c.created_at_ms),
        (_UPDATED, U64, c.updated_at_ms),
        (_ERROR, REF, error),
        (_RUNNING, U8, OURS_RUNNING if c.status == "running" else None),
    ])


def encode_state(state: CompactionsState, *, nonce: bytes | None = None) -> bytes:
    """``state`` as SlateDB 0.17's ``.compactions`` bytes, with our fields appended."""
    b = Builder()
    try:
        records = b.refs([_compaction(b, c) for c in state.compactions])
        nonce_at = b.blob(os.urandom(16) if nonce is None else nonce)
        root = b.table([
            (0, U64, state.compactor_epoch), (1, REF, records), (_NONCE, REF, nonce_at),
            (_CHECKSUM, U32, 0),
        ])
        data, fb_len = b.finish(root, _VERSION.pack(FORMAT_VERSION))
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"compactions record has a value that does not fit: {e}") from e
    start = len(data) - fb_len
    at = Reader(data[start:]).root("CompactionsV1").field_offset(_CHECKSUM, U32)
    assert at is not None
    return data[: start + at] + struct.pack("<I", zlib.crc32(data)) + data[start + at + 4 :]


# ---- reading ----------------------------------------------------------------------------------
def _req(value: int | None, what: str) -> int:
    if value is None:
        raise Malformed(f"required field {what} is missing")
    return value


def _read_ulid(r: Reader, pos: int) -> ULID:
    t = r.table(pos, "Ulid")
    high, low = t.scalar(0, U64) or 0, t.scalar(1, U64) or 0
    return ULID(high.to_bytes(8, "big") + low.to_bytes(8, "big"))


def _read_ulids(r: Reader, pos: int | None) -> tuple[ULID, ...]:
    if pos is None:
        return ()
    return tuple(_read_ulid(r, t.pos) for t in r.tables(pos, "Ulid"))


def _read_blob(r: Reader, pos: int | None) -> bytes | None:
    return None if pos is None else r.blob(pos)


def _read_bound(r: Reader, pos: int) -> BytesBound:
    t = r.table(pos, "BytesBound")
    code = t.scalar(1, U8) or 0
    if code not in (1, 2, 3):
        raise Malformed(f"bound type {code} is not Unbounded, Included or Excluded")
    kind = BoundKind(code - 1)
    key = _read_blob(r, t.ref(0))
    if kind == BoundKind.UNBOUNDED:
        return BytesBound.unbounded()
    return BytesBound(kind, b"" if key is None else key)


def _read_range(r: Reader, pos: int) -> BytesRange:
    t = r.table(pos, "BytesRange")
    return BytesRange(
        _read_bound(r, _req(t.ref(0), "start_bound")), _read_bound(r, _req(t.ref(1), "end_bound"))
    )


def _read_sst(r: Reader, t: Table) -> CompactedSst:
    i = r.table(_req(t.ref(1), "CompactedSsTable.info"), "SsTableInfo")
    info = SstInfo(
        first_key=_read_blob(r, i.ref(0)), last_key=_read_blob(r, i.ref(7)),
        index_offset=i.scalar(1, U64) or 0, index_len=i.scalar(2, U64) or 0,
        filter_offset=i.scalar(3, U64) or 0, filter_len=i.scalar(4, U64) or 0,
        compression=i.scalar(5, U8) or 0, sst_type=i.scalar(6, U8) or 0,
        stats_offset=i.scalar(8, U64) or 0, stats_len=i.scalar(9, U64) or 0,
        filter_format=i.scalar(10, U8) or 0,
        entry_count=i.scalar(_ENTRIES, U64) or 0, size_bytes=i.scalar(_SIZE, U64) or 0,
    )
    version = t.scalar(3, U16)
    return CompactedSst(
        id=_read_ulid(r, _req(t.ref(0), "CompactedSsTable.id")), info=info,
        format_version=1 if version is None else version,
    )


def _read_ssts(r: Reader, pos: int | None) -> tuple[CompactedSst, ...]:
    if pos is None:
        return ()
    return tuple(_read_sst(r, t) for t in r.tables(pos, "CompactedSsTable"))


def _read_context(r: Reader, pos: int) -> CompactionContext:
    t = r.table(pos, "TieredCompactionContext")
    subs: list[Subcompaction] = []
    if (subs_at := t.ref(0)) is not None:
        for s in r.tables(subs_at, "Subcompaction"):
            rng = _read_range(r, _req(s.ref(0), "Subcompaction.range"))
            subs.append(Subcompaction(rng, _read_ssts(r, s.ref(1))))
    return CompactionContext(tuple(subs), t.scalar(1, U64) or 0)


def _read_compaction(r: Reader, t: Table, version: int) -> CompactionRecord:
    cid = _read_ulid(r, _req(t.ref(0), "Compaction.id"))
    tag = t.scalar(1, U8) or 0
    if tag not in (TIERED, DRAIN):
        raise Malformed(f"compaction {cid}: unknown spec type {tag}")
    spec = r.table(_req(t.ref(2), "Compaction.spec"), "CompactionSpec")
    if tag == TIERED:
        views = _read_ulids(r, spec.ref(2))
        if spec.ref(2) is None:  # SlateDB's deprecated `ssts`: SST ids in place of view ids
            views = _read_ulids(r, spec.ref(0))
        runs = r.u32s(p) if (p := spec.ref(1)) is not None else ()
        segment = _read_blob(r, spec.ref(3)) or b""
        destination = (spec.scalar(4, U32) or 0) if version >= 2 else min(runs, default=0)
    else:
        segment = r.blob(_req(spec.ref(0), "DrainSegmentSpec.segment"))
        views = _read_ulids(r, spec.ref(1))
        runs = r.u32s(p) if (p := spec.ref(2)) is not None else ()
        destination = 0
    code = t.scalar(3, U8) or 0
    if code not in STATUS_OF:
        raise Malformed(f"compaction {cid}: unknown status {code}")
    ours = t.scalar(_RUNNING, U8)
    if ours is not None and (ours != OURS_RUNNING or code != SUBMITTED):
        raise Malformed(f"compaction {cid}: our running mark {ours} on status {code}")
    status: Status = "running" if ours is not None else STATUS_OF[code]
    worker = None
    if (w := t.ref(5)) is not None:
        wt = r.table(w, "WorkerSpec")
        if (wid := wt.ref(0)) is not None:  # SlateDB: no worker id = unclaimed
            worker = WorkerSpec(r.string(wid), wt.scalar(1, U64) or 0)
    ctx_tag = t.scalar(6, U8) or 0
    if ctx_tag not in (0, TIERED_CONTEXT):
        raise Malformed(f"compaction {cid}: unknown context type {ctx_tag}")
    ctx = t.ref(7)
    kind_code = t.scalar(_KIND, U8)
    if kind_code is not None and kind_code not in KIND_OF:
        raise Malformed(f"compaction {cid}: unknown kind {kind_code}")
    error = t.ref(_ERROR)
    return CompactionRecord(
        id=cid,
        kind=KIND_OF[kind_code] if kind_code is not None else ("l0" if views else "sorted-runs"),
        source_view_ids=views,
        source_run_ids=runs,
        destination=destination,
        outputs=_read_ulids(r, t.ref(_OUTPUTS)),
        status=status,
        created_at_ms=t.scalar(_CREATED, U64) or 0,
        updated_at_ms=t.scalar(_UPDATED, U64) or 0,
        error=None if error is None else r.string(error),
        segment=segment,
        drain=tag == DRAIN,
        worker=worker,
        output_ssts=_read_ssts(r, t.ref(4)),
        context=None if ctx_tag == 0 or ctx is None else _read_context(r, ctx),
    )


def decode_state(data: bytes, name: str) -> CompactionsState:
    """A ``.compactions`` object either engine wrote; damage raises CorruptionError."""
    if len(data) < 2:
        raise CorruptionError(name, f"compactions record of {len(data)} bytes is too short")
    version = _VERSION.unpack_from(data, 0)[0]
    if version not in SUPPORTED_VERSIONS:
        raise CorruptionError(name, f"unsupported compactions format version {version}")
    try:
        r = Reader(data[2:])
        root = r.root("CompactionsV1")
        at = root.field_offset(_CHECKSUM, U32)
        if at is not None:
            stored = struct.unpack_from("<I", data, 2 + at)[0]
            if zlib.crc32(data[: 2 + at] + bytes(4) + data[6 + at :]) != stored:
                raise Malformed("checksum mismatch")
        records = r.tables(_req(root.ref(1), "recent_compactions"), "Compaction")
        if at is None and any(t.ref(_OUTPUTS) is not None for t in records):
            # SlateDB drops all of our fields at once when it rewrites; ours without the
            # checksum is damage (a cut root vtable), not a record SlateDB wrote
            raise Malformed("our compaction fields without our checksum")
        return CompactionsState(
            compactor_epoch=root.scalar(0, U64) or 0,
            compactions=tuple(_read_compaction(r, t, version) for t in records),
        )
    except (Malformed, ValueError, struct.error) as e:
        raise CorruptionError(name, f"malformed compactions record: {e}") from None
