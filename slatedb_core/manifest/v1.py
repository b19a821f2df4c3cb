"""ManifestV1 bytes -> :class:`~slatedb_core.manifest.model.Manifest`: the manifest layout
SlateDB wrote before ManifestV2, read as SlateDB 0.17 reads it (docs/format.md, "ManifestV1").

SlateDB's manifest RFC rolls V2 out in phases; from phase 2 on (0.17) it writes V2 and keeps
reading V1 "for backward compatibility with existing manifests on disk", so a database last
written by an earlier SlateDB opens with either engine. This engine never writes V1: a commit
built on a V1 manifest is encoded as V2 (:mod:`slatedb_core.manifest.codec`).

The object is the big-endian u16 ``1``, then a FlatBuffers buffer whose root is ``ManifestV1``
(SlateDB's ``schemas/manifest.fbs``). It differs from V2 in three places, mapped as SlateDB's
``manifest_v1`` decoder maps them:

* ``l0`` and each ``SortedRun.ssts`` are ``CompactedSsTable`` (id, info, visible_range,
  format_version): an SST and its visible range in one table, with no view ids. Each becomes a
  view whose id is the SST's id, and the SST joins ``Manifest.ssts`` once (an SST seen in two
  places with different infos is corrupt: the model holds one info per SST);
* ``l0_last_compacted`` is an SST id; SlateDB uses it as the last compacted L0 view id too;
* ``wal_object_store_uri`` (slot 13) marks a separate WAL object store (SlateDB writes "" for
  any). It is kept as read (``Manifest.wal_object_store_uri``): an opener without a WAL store
  is refused with :class:`~slatedb_core.errors.WalStoreMissing`, as SlateDB's builders refuse
  it (``validate_wal_object_store_uri``), rather than reading a WAL that is not where we look.
  ManifestV2 has no such field; SlateDB's V2 rewrite drops it, ours keeps it in our table.

What V1 lacks reads as SlateDB's defaults (no segments; ``next_wal_sst_id`` is
``wal_id_last_seen + 1``) and as ours for a manifest SlateDB wrote (one write in flight, no key
range, no transactions, our epochs 0). The tables shared with V2 (``SsTableInfo``, ``Checkpoint``,
``ExternalDb``, ``Ulid``, ``Uuid``, ``BytesRange``) are decoded by the V2 reader's functions.
"""

from __future__ import annotations

from ulid import ULID

from slatedb_core.manifest import model
from slatedb_core.manifest._decode import (
    U64_MAX,
    ManifestReader,
    Stamp,
    read_checkpoints,
    read_external_dbs,
)
from slatedb_core.manifest.flatbuf import FbTable, Malformed, need
from slatedb_core.manifest.model import CompactedSst, SstView
from slatedb_core.manifest.sst_info import read_sst_info
from slatedb_core.manifest.tables import read_range

V1_FORMAT_VERSION = 1
"""The u16 in front of a ManifestV1 object."""

# SlateDB's schemas/sst.fbs: CompactedSsTable is id, info, visible_range, format_version
# (uint16 = null); SortedRun is id (u32), ssts [CompactedSsTable].
SST_V1 = FbTable("CompactedSsTable", "OOOH")
RUN_V1 = FbTable("SortedRun", "IO")
# SlateDB's schemas/manifest.fbs, ManifestV1's 16 slots: manifest_id, external_dbs, initialized,
# writer_epoch, compactor_epoch, replay_after_wal_id, wal_id_last_seen, l0_last_compacted, l0,
# compacted, last_l0_clock_tick, checkpoints, last_l0_seq, wal_object_store_uri,
# recent_snapshot_min_seq, sequence_tracker.
MANIFEST_V1 = FbTable("ManifestV1", "QOBQQQQOOOlOQOQO")


class _Tree:
    """The SSTs met while reading V1's trees, one :class:`CompactedSst` per id."""

    def __init__(self, r: ManifestReader) -> None:
        self.r = r
        self.ssts: dict[ULID, CompactedSst] = {}

    def views(self, pos: int | None, what: str) -> tuple[SstView, ...]:
        r = self.r
        out = []
        for p in r.tables(pos, what):
            raw_id, info, rng, version = r.table(SST_V1, p)
            sst_id = r.ulid(need(raw_id, "CompactedSsTable.id"))
            sst = CompactedSst(
                sst_id,
                read_sst_info(r, need(info, "CompactedSsTable.info")),
                1 if version is None else version,  # SlateDB's ORIGINAL_SST_FORMAT_VERSION
            )
            seen = self.ssts.setdefault(sst_id, sst)
            if seen != sst:
                raise Malformed(f"SST {sst_id} appears twice with different info")
            out.append(SstView(sst_id, sst_id, None if rng is None else read_range(r, rng)))
        return tuple(out)


def decode_v1(data: bytes, name: str) -> tuple[model.Manifest, Stamp]:
    """The manifest in the V1 object ``data`` (its u16 prefix included) and its stamp (version
    1, no nonces). Raises ``Malformed`` (the codec names the object)."""
    r = ManifestReader(data[2:])
    (
        _manifest_id,  # neither engine uses it (the object's name is the id)
        exts,
        initialized,
        writer_epoch,
        compactor_epoch,
        replay,
        seen,
        last_compacted,
        l0_pos,
        runs_pos,
        clock_tick,
        cps_pos,
        last_l0_seq,
        wal_store_uri,
        min_seq,
        tracker,
    ) = r.table(MANIFEST_V1, r.root())
    if seen == U64_MAX:
        raise Malformed("wal_id_last_seen is u64 max: there is no next WAL SST id")
    tree = _Tree(r)
    l0 = tree.views(l0_pos, "l0")
    runs = []
    for p in r.tables(runs_pos, "compacted"):
        run_id, ssts = r.table(RUN_V1, p)
        runs.append(model.SortedRun(run_id, tree.views(ssts, "SortedRun.ssts")))
    checkpoints, destroyed = read_checkpoints(r, cps_pos)
    manifest = model.Manifest(
        writer_epoch=writer_epoch,
        compactor_epoch=compactor_epoch,
        initialized=bool(initialized),
        destroyed_at_s=destroyed,
        external_dbs=read_external_dbs(r, exts),
        replay_after_wal_id=replay,
        wal_id_last_seen=seen,
        next_wal_sst_id=seen + 1,
        ssts=tuple(tree.ssts.values()),
        l0=l0,
        compacted=tuple(runs),
        checkpoints=checkpoints,
        last_l0_seq=last_l0_seq,
        last_compacted_l0_view_id=None if last_compacted is None else r.ulid(last_compacted),
        last_l0_clock_tick=clock_tick,
        recent_snapshot_min_seq=min_seq,
        sequence_tracker=None if tracker is None else r.blob(tracker),
        wal_object_store_uri=None if wal_store_uri is None else r.string(wal_store_uri),
    )
    return manifest, Stamp(V1_FORMAT_VERSION)
