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
from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.manifest.flatbuf import FbReader, FbTable, FbWriter, Malformed, need, past
from slatedb_core.manifest.model import CompactedSst
from slatedb_core.manifest.sst_info import read_sst_info, write_sst_info
from slatedb_core.manifest.tables import read_range, read_ulid, write_range, write_ulid

FORMAT_VERSION = 2
"""SlateDB 0.17's ``COMPACTIONS_FORMAT_VERSION``; 1 (no explicit destination) is still read."""
SUPPORTED_VERSIONS = frozenset({1, 2})
SUBMITTED = 0
OURS_RUNNING = 1  # in Compaction slot 21

STATUS_CODE: dict[str, int] = {
    "submitted": 0,
    "running": 1,
    "committed": 2,
    "failed": 3,
    "compacted": 4,
    "scheduled": 5,
}
STATUS_OF: dict[int, Status] = {
    0: "submitted",
    1: "running",
    2: "committed",
    3: "failed",
    4: "compacted",
    5: "scheduled",
}
KIND_CODE: dict[str, int] = {"l0": 0, "sorted-runs": 1}
KIND_OF: dict[int, Kind] = {0: "l0", 1: "sorted-runs"}
TIERED, DRAIN = 1, 2  # the CompactionSpec union's tags
TIERED_CONTEXT = 1  # the CompactionContext union's tag
_U32_MAX = 2**32 - 1
_VERSION = struct.Struct(">H")
_GAP = (None,) * 8  # Compaction slots 8-15

# The tables (SlateDB 0.17's schemas/compactor.fbs and sst.fbs), field kinds as in
# slatedb_core.manifest.flatbuf; ours past a gap left for SlateDB's own growth, as the manifest's:
# CompactionsV1: compactor_epoch, recent_compactions; ours from slot 8: nonce, checksum.
CHECKSUM_SLOT = 9
COMPACTIONS = FbTable("CompactionsV1", past("QO", 8, "OI"))
# Compaction: id, spec_type, spec, status, output_ssts, worker, ctx_type, ctx; ours from slot 16:
# outputs, kind, created_at_ms, updated_at_ms, error, running mark.
COMPACTION = FbTable("Compaction", past("OBOBOOBO", 16, "ObQQOb"))
# TieredCompactionSpec: ssts (deprecated: SST ids in place of view ids), sorted_runs,
# l0_view_ids, segment, destination.
TIERED_SPEC = FbTable("TieredCompactionSpec", "OOOOI")
DRAIN_SPEC = FbTable("DrainSegmentSpec", "OOO")  # segment, l0_view_ids, sorted_runs
WORKER = FbTable("WorkerSpec", "OQ")  # worker_id, last_heartbeat_ms
CONTEXT = FbTable("TieredCompactionContext", "OQ")  # subcompactions, retention_min_seq
SUBCOMPACTION = FbTable("Subcompaction", "OO")  # range, output_ssts
# CompactedSsTable (schemas/sst.fbs): id, info, visible_range (not used here), format_version.
COMPACTED_SST = FbTable("CompactedSsTable", "OOxH")


# ---- writing ----------------------------------------------------------------------------------
def _ulids(w: FbWriter, ids: tuple[ULID, ...]) -> int:
    return w.tables([write_ulid(w, u) for u in ids])


def _sst(w: FbWriter, sst: CompactedSst) -> int:
    info = write_sst_info(w, sst.info)
    return w.table(COMPACTED_SST, (write_ulid(w, sst.id), info, None, sst.format_version))


def _ssts(w: FbWriter, ssts: tuple[CompactedSst, ...]) -> int:
    return w.tables([_sst(w, s) for s in ssts])


def _context(w: FbWriter, ctx: CompactionContext) -> int:
    subs = None
    if ctx.subcompactions:
        subs = w.tables(
            [
                w.table(
                    SUBCOMPACTION,
                    (
                        write_range(w, s.range),
                        _ssts(w, s.output_ssts) if s.output_ssts else None,
                    ),
                )
                for s in ctx.subcompactions
            ]
        )
    return w.table(CONTEXT, (subs, ctx.retention_min_seq))


def _compaction(w: FbWriter, c: CompactionRecord) -> int:
    if c.destination > _U32_MAX or any(r > _U32_MAX for r in c.source_run_ids):
        raise InvalidArgument(f"compaction {c.id}: sorted run ids are u32 in SlateDB's format")
    views = _ulids(w, c.source_view_ids) if c.source_view_ids else None
    runs = w.u32s(c.source_run_ids) if c.source_run_ids else None
    segment = w.blob(c.segment)
    if c.drain:
        spec = w.table(DRAIN_SPEC, (segment, views, runs))
    else:
        spec = w.table(TIERED_SPEC, (None, runs, views, segment, c.destination))
    worker = c.worker
    worker_at = None
    if worker is not None:
        worker_at = w.table(WORKER, (w.string(worker.worker_id), worker.last_heartbeat_ms))
    ctx = None if c.context is None else _context(w, c.context)
    error = None if c.error is None else w.string(c.error)
    running = c.status == "running"
    return w.table(
        COMPACTION,
        (
            write_ulid(w, c.id),
            DRAIN if c.drain else TIERED,
            spec,
            SUBMITTED if running else STATUS_CODE[c.status],
            _ssts(w, c.output_ssts),
            worker_at,
            None if ctx is None else TIERED_CONTEXT,
            ctx,
            *_GAP,
            _ulids(w, c.outputs),
            KIND_CODE[c.kind],
            c.created_at_ms,
            c.updated_at_ms,
            error,
            OURS_RUNNING if running else None,
        ),
    )


def encode_state(state: CompactionsState, *, nonce: bytes | None = None) -> bytes:
    """``state`` as SlateDB 0.17's ``.compactions`` bytes, with our fields appended."""
    w = FbWriter()
    try:
        records = w.tables([_compaction(w, c) for c in state.compactions])
        nonce_at = w.blob(os.urandom(16) if nonce is None else nonce)
        root = w.table(
            COMPACTIONS,
            (
                state.compactor_epoch,
                records,
                *(None,) * 6,
                nonce_at,
                0,
            ),
        )
        assert w.last is not None
        crc_at = root - w.last.offs[CHECKSUM_SLOT]  # from the buffer's end
        data = bytearray(_VERSION.pack(FORMAT_VERSION) + w.finish(root))
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"compactions record has a value that does not fit: {e}") from e
    struct.pack_into("<I", data, len(data) - crc_at, zlib.crc32(data))
    return bytes(data)


# ---- reading ----------------------------------------------------------------------------------
def _read_ulids(r: FbReader, pos: int | None) -> tuple[ULID, ...]:
    if pos is None:
        return ()
    return tuple(read_ulid(r, p) for p in r.tables(pos, "[Ulid]"))


def _read_blob(r: FbReader, pos: int | None) -> bytes | None:
    return None if pos is None else r.blob(pos)


def _read_sst(r: FbReader, pos: int) -> CompactedSst:
    sid, info, _, version = r.table(COMPACTED_SST, pos)
    return CompactedSst(
        id=read_ulid(r, need(sid, "CompactedSsTable.id")),
        info=read_sst_info(r, need(info, "CompactedSsTable.info")),
        format_version=1 if version is None else version,
    )


def _read_ssts(r: FbReader, pos: int | None) -> tuple[CompactedSst, ...]:
    if pos is None:
        return ()
    return tuple(_read_sst(r, p) for p in r.tables(pos, "[CompactedSsTable]"))


def _read_context(r: FbReader, pos: int) -> CompactionContext:
    subs_at, retention = r.table(CONTEXT, pos)
    subs: list[Subcompaction] = []
    if subs_at is not None:
        for p in r.tables(subs_at, "subcompactions"):
            rng, outputs = r.table(SUBCOMPACTION, p)
            subs.append(
                Subcompaction(
                    read_range(r, need(rng, "Subcompaction.range")), _read_ssts(r, outputs)
                )
            )
    return CompactionContext(tuple(subs), retention)


def _read_spec(
    r: FbReader, tag: int, pos: int, version: int
) -> tuple[tuple[ULID, ...], tuple[int, ...], bytes, int]:
    """Source views, source runs, segment and destination of either CompactionSpec."""
    if tag == TIERED:
        legacy, runs_at, views_at, segment, destination = r.table(TIERED_SPEC, pos)
        # SlateDB's deprecated `ssts`: SST ids in place of view ids
        views = _read_ulids(r, legacy if views_at is None else views_at)
        runs = () if runs_at is None else r.u32s(runs_at)
        dest = destination if version >= 2 else min(runs, default=0)
        return views, runs, _read_blob(r, segment) or b"", dest
    segment, views_at, runs_at = r.table(DRAIN_SPEC, pos)
    runs = () if runs_at is None else r.u32s(runs_at)
    return _read_ulids(r, views_at), runs, r.blob(need(segment, "DrainSegmentSpec.segment")), 0


def _read_compaction(r: FbReader, pos: int, version: int) -> CompactionRecord:
    (
        cid_at,
        tag,
        spec,
        code,
        outputs_at,
        worker_at,
        ctx_tag,
        ctx,
        *_,
        ours_outputs,
        kind_code,
        created,
        updated,
        error,
        ours,
    ) = r.table(COMPACTION, pos)
    cid = read_ulid(r, need(cid_at, "Compaction.id"))
    if tag not in (TIERED, DRAIN):
        raise Malformed(f"compaction {cid}: unknown spec type {tag}")
    views, runs, segment, destination = _read_spec(r, tag, need(spec, "Compaction.spec"), version)
    if code not in STATUS_OF:
        raise Malformed(f"compaction {cid}: unknown status {code}")
    if ours is not None and (ours != OURS_RUNNING or code != SUBMITTED):
        raise Malformed(f"compaction {cid}: our running mark {ours} on status {code}")
    status: Status = "running" if ours is not None else STATUS_OF[code]
    worker = None
    if worker_at is not None:
        wid, heartbeat = r.table(WORKER, worker_at)
        if wid is not None:  # SlateDB: no worker id = unclaimed
            worker = WorkerSpec(r.string(wid), heartbeat)
    if ctx_tag not in (0, TIERED_CONTEXT):
        raise Malformed(f"compaction {cid}: unknown context type {ctx_tag}")
    if kind_code is not None and kind_code not in KIND_OF:
        raise Malformed(f"compaction {cid}: unknown kind {kind_code}")
    return CompactionRecord(
        id=cid,
        kind=KIND_OF[kind_code] if kind_code is not None else ("l0" if views else "sorted-runs"),
        source_view_ids=views,
        source_run_ids=runs,
        destination=destination,
        outputs=_read_ulids(r, ours_outputs),
        status=status,
        created_at_ms=created,
        updated_at_ms=updated,
        error=None if error is None else r.string(error),
        segment=segment,
        drain=tag == DRAIN,
        worker=worker,
        output_ssts=_read_ssts(r, outputs_at),
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
        r = FbReader(data[2:])
        root = r.root()
        epoch, records_at, *_, stored = r.table(COMPACTIONS, root)
        at = r.slot_position(COMPACTIONS, root, CHECKSUM_SLOT)
        if at is not None and zlib.crc32(data[: 2 + at] + bytes(4) + data[6 + at :]) != stored:
            raise Malformed("checksum mismatch")
        records = r.tables(records_at, "recent_compactions")
        if at is None and any(r.table(COMPACTION, p)[16] is not None for p in records):
            # SlateDB drops all of our fields at once when it rewrites; ours without the
            # checksum is damage (a cut root vtable), not a record SlateDB wrote
            raise Malformed("our compaction fields without our checksum")
        return CompactionsState(
            compactor_epoch=epoch,
            compactions=tuple(_read_compaction(r, p, version) for p in records),
        )
    except (Malformed, ValueError, TypeError, IndexError, OverflowError, struct.error) as e:
        raise CorruptionError(name, f"malformed compactions record: {e}") from None
