"""Manifests as plain JSON-ready dicts, for the CLI, logs and Dagster metadata."""

from __future__ import annotations

from typing import Any

from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest.model import Checkpoint, CompactedSst, Manifest, SstView


def _key(k: bytes | None) -> str | None:
    if k is None:
        return None
    try:
        text = k.decode("ascii")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "0x" + k.hex()


def _bound(b: BytesBound) -> dict[str, Any]:
    return {"kind": BoundKind(b.kind).name.lower(), "key": _key(b.key)}


def _range(r: BytesRange | None) -> dict[str, Any] | None:
    return None if r is None else {"start": _bound(r.start), "end": _bound(r.end)}


def _view(v: SstView) -> dict[str, Any]:
    return {
        "view_id": str(v.view_id),
        "sst_id": str(v.sst_id),
        "visible_range": _range(v.visible_range),
    }


def _sst(s: CompactedSst) -> dict[str, Any]:
    i = s.info
    return {
        "id": str(s.id),
        "original_id": str(s.original_id) if s.original_id else None,
        "format_version": s.format_version,
        "first_key": _key(i.first_key),
        "last_key": _key(i.last_key),
        "entries": i.entry_count,
        "size_bytes": i.size_bytes,
        "sst_type": i.sst_type,
        "compression": i.compression,
    }


def _checkpoint(c: Checkpoint) -> dict[str, Any]:
    return {
        "id": str(c.id),
        "manifest_id": c.manifest_id,
        "create_time_s": c.create_time_s,
        "expire_time_s": c.expire_time_s,
        "writer_epoch": c.writer_epoch,
        "name": c.name,
    }


def manifest_to_dict(manifest_id: int, m: Manifest) -> dict[str, Any]:
    return {
        "id": manifest_id,
        "initialized": m.initialized,
        "destroyed_at_s": m.destroyed_at_s,
        "writer_epoch": m.writer_epoch,
        "compactor_epoch": m.compactor_epoch,
        "replay_after_wal_id": m.replay_after_wal_id,
        "wal_id_last_seen": m.wal_id_last_seen,
        "next_wal_sst_id": m.next_wal_sst_id,
        "last_l0_seq": m.last_l0_seq,
        "last_compacted_l0_view_id": str(m.last_compacted_l0_view_id)
        if m.last_compacted_l0_view_id
        else None,
        "max_parallel_writes": m.max_parallel_writes,
        "last_l0_clock_tick": m.last_l0_clock_tick,
        "recent_snapshot_min_seq": m.recent_snapshot_min_seq,
        "external_dbs": [
            {
                "path": e.path,
                "source_checkpoint_id": str(e.source_checkpoint_id),
                "final_checkpoint_id": str(e.final_checkpoint_id)
                if e.final_checkpoint_id
                else None,
                "sst_ids": [str(s) for s in e.sst_ids],
            }
            for e in m.external_dbs
        ],
        "ssts": [_sst(s) for s in m.ssts],
        "l0": [_view(v) for v in m.l0],
        "compacted": [{"id": r.id, "views": [_view(v) for v in r.views]} for r in m.compacted],
        "checkpoints": [_checkpoint(c) for c in m.checkpoints],
        "transactions": [{"app_id": t.app_id, "version": t.version} for t in m.transactions],
    }
