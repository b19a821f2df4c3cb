"""The manifest codec against SlateDB 0.17's own engine (the slatedb wheel): what it writes we
decode field for field, what we write its Admin and DbReader decode, and what it drops when it
rewrites one of ours (docs/format.md, "Manifest")."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed
from ulid import ULID

from slatedb_core.errors import DatabaseDestroyed, UnsupportedFeature
from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest import model
from slatedb_core.manifest.codec import (
    DESTROYED_CHECKPOINT_ID,
    DESTROYED_CHECKPOINT_NAME,
    decode_manifest,
    decode_stamped_manifest,
)
from slatedb_core.manifest.model import Checkpoint, Manifest, SstInfo, SstView
from slatedb_core.manifest.store import FencedManifest, ManifestStore
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore
from tests.gc import Background
from tests.interop import conftest as interop
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb
# the cross-engine tests' fixtures: a directory both engines open, the wheel on it
oracle = interop.oracle
root = interop.root

CODECS = {None: 0, "SNAPPY": 1, "ZLIB": 2, "LZ4": 3, "ZSTD": 4}


def _manifests(root: Path, db: str = "db") -> dict[int, bytes]:
    return {int(p.stem): p.read_bytes() for p in (root / db / "manifest").glob("*.manifest")}


def _range(r: BytesRange | None) -> tuple[object, ...] | None:
    """Our range as the binding's KeyRange fields (start, start_inclusive, end, end_inclusive)."""
    if r is None:
        return None
    return (
        r.start.key,
        r.start.kind != BoundKind.EXCLUDED,
        r.end.key,
        r.end.kind == BoundKind.INCLUDED,
    )


def _their_range(r: object) -> tuple[object, ...] | None:
    if r is None:
        return None
    return (r.start, r.start_inclusive, r.end, r.end_inclusive)  # type: ignore[attr-defined]


def _same_info(ours: SstInfo, theirs: object) -> None:
    t = theirs
    assert ours.first_key == t.first_entry and ours.last_key == t.last_entry  # type: ignore[attr-defined]
    assert (ours.index_offset, ours.index_len) == (t.index_offset, t.index_len)  # type: ignore[attr-defined]
    assert (ours.filter_offset, ours.filter_len) == (t.filter_offset, t.filter_len)  # type: ignore[attr-defined]
    assert (ours.stats_offset, ours.stats_len) == (t.stats_offset, t.stats_len)  # type: ignore[attr-defined]
    codec = t.compression_codec  # type: ignore[attr-defined]
    assert ours.compression == CODECS[None if codec is None else codec.name]
    assert ours.sst_type == t.sst_type.value and ours.filter_format == t.filter_format.value  # type: ignore[attr-defined]


def _same_views(ours: tuple[SstView, ...], theirs: list[object], m: Manifest) -> None:
    assert len(ours) == len(theirs)
    for v, t in zip(ours, theirs, strict=True):
        assert str(v.view_id) == t.id and str(v.sst_id) == t.sst.id.value  # type: ignore[attr-defined]
        assert _range(v.visible_range) == _their_range(t.visible_range)  # type: ignore[attr-defined]
        sst = m.sst(v.sst_id)
        assert sst is not None
        _same_info(sst.info, t.sst.info)  # type: ignore[attr-defined]


def _same(m: Manifest, t: object) -> None:
    """Our decoding ``m`` says what SlateDB's decoding ``t`` (a VersionedManifest) says."""
    v: object = t
    assert (m.writer_epoch, m.compactor_epoch, m.initialized) == (
        v.writer_epoch,
        v.compactor_epoch,
        v.initialized,
    )  # type: ignore[attr-defined]
    assert (m.replay_after_wal_id, m.next_wal_sst_id, m.last_l0_seq) == (
        v.replay_after_wal_id,
        v.next_wal_sst_id,
        v.last_l0_seq,
    )  # type: ignore[attr-defined]
    assert (m.last_l0_clock_tick, m.recent_snapshot_min_seq) == (
        v.last_l0_clock_tick,
        v.recent_snapshot_min_seq,
    )  # type: ignore[attr-defined]
    last = m.last_compacted_l0_view_id
    assert (None if last is None else str(last)) == v.last_compacted_l0_sst_view_id  # type: ignore[attr-defined]
    _same_views(m.l0, v.l0, m)  # type: ignore[attr-defined]
    assert [r.id for r in m.compacted] == [r.id for r in v.compacted]  # type: ignore[attr-defined]
    for run, theirs in zip(m.compacted, v.compacted, strict=True):  # type: ignore[attr-defined]
        _same_views(run.views, theirs.sst_views, m)
    cps = {str(c.id): c for c in m.checkpoints}
    if m.destroyed_at_s is not None:
        cps[str(DESTROYED_CHECKPOINT_ID)] = Checkpoint(
            DESTROYED_CHECKPOINT_ID, 0, m.destroyed_at_s, None, None, DESTROYED_CHECKPOINT_NAME
        )
    assert set(cps) == {c.id for c in v.checkpoints}  # type: ignore[attr-defined]
    for c in v.checkpoints:  # type: ignore[attr-defined]
        ours = cps[c.id]
        assert (ours.create_time_s, ours.expire_time_s, ours.name) == (
            c.create_time_secs,
            c.expire_time_secs,
            c.name,
        )
        if ours.id != DESTROYED_CHECKPOINT_ID:
            assert ours.manifest_id == c.manifest_id
    assert len(m.external_dbs) == len(v.external_dbs)  # type: ignore[attr-defined]
    for e, te in zip(m.external_dbs, v.external_dbs, strict=True):  # type: ignore[attr-defined]
        assert (e.path, str(e.source_checkpoint_id)) == (te.path, te.source_checkpoint_id)
        final = None if e.final_checkpoint_id is None else str(e.final_checkpoint_id)
        assert final == te.final_checkpoint_id
        assert [str(s) for s in e.sst_ids] == [s.value for s in te.sst_ids]


def test_we_decode_every_manifest_slatedb_writes(oracle: Oracle) -> None:
    db = oracle.open_db(s=settings(compactor=True))
    for batch in range(4):
        for i in range(200):
            db.put(b"key%05d" % i, b"value-%d-%d" % (batch, i))
        db.delete(b"key%05d" % batch)
        db.flush_memtable()
    admin = oracle.admin()
    admin.wait_until(lambda m: bool(m.compacted))
    db.put(b"tail", b"in the WAL")
    db.flush_wal()
    admin.create_checkpoint("named")
    admin.create_checkpoint()
    db.shutdown()
    theirs = {m.id: m for m in admin.manifests()}
    ours = _manifests(oracle.root)
    assert set(ours) == set(theirs) and len(ours) > 5
    for mid, data in ours.items():
        m, stamp = decode_stamped_manifest(data, name=str(mid))
        assert stamp.nonce is None and stamp.parent is None
        assert m.max_parallel_writes == 1 and m.key_range is None
        _same(m, theirs[mid])
    latest = decode_manifest(ours[max(ours)], name="latest")
    assert latest.compacted and latest.last_compacted_l0_view_id is not None
    assert {c.name for c in latest.checkpoints} >= {"named", None}
    assert all(s.format_version == 2 for s in latest.ssts)


def test_we_decode_a_clone_slatedb_writes(oracle: Oracle) -> None:
    db = oracle.open_db(s=settings(compactor=False))
    for i in range(50):
        db.put(b"k%03d" % i, b"v")
    db.flush_memtable()
    db.shutdown()
    admin = oracle.admin()
    builder = admin.admin.create_clone_builder_from_source(
        sdb.CloneSourceSpec(path="db", checkpoint=None, projection_range=None)
    )
    builder.with_clone_path("clone")
    oracle.run(builder.build())
    theirs = oracle.admin("clone").latest()
    ours = _manifests(oracle.root, "clone")
    m = decode_manifest(ours[theirs.id], name="clone")
    assert m.external_dbs and m.external_dbs[0].path == "db"
    _same(m, theirs)


def test_we_refuse_a_segmented_manifest_slatedb_writes(oracle: Oracle) -> None:
    class TwoBytes(sdb.PrefixExtractor):  # type: ignore[misc]
        def name(self) -> str:
            return "two-bytes"

        def prefix_len(self, target: object) -> int:
            return 2

    builder = sdb.DbBuilder("db", oracle.store())
    builder.with_settings(settings(compactor=False))
    builder.with_segment_extractor(TwoBytes())
    db = oracle.run(builder.build())
    oracle.run(db.put(b"aa1", b"x"))
    oracle.run(db.shutdown())
    latest = _manifests(oracle.root)
    with pytest.raises(UnsupportedFeature, match="segment"):
        decode_manifest(latest[max(latest)], name="seg")


def _ulid(n: int) -> ULID:
    return ULID(n.to_bytes(16, "big"))


def _ours() -> Manifest:
    """A manifest with every field SlateDB reads set (no SST objects: Admin reads only the
    manifest)."""
    now = int(time.time())
    ssts = (
        model.CompactedSst(
            _ulid(1), SstInfo(b"a", b"m", 100, 10, 110, 20, 0, 7, 200, 0, 130, 9, 1)
        ),
        model.CompactedSst(
            _ulid(2), SstInfo(b"n", b"z", 50, 5, 55, 0, 4, 3, 90), original_id=_ulid(9)
        ),
    )
    ranged = BytesRange(BytesBound.included(b"b"), BytesBound.excluded(b"k"))
    return Manifest(
        writer_epoch=3,
        compactor_epoch=2,
        replay_after_wal_id=4,
        wal_id_last_seen=4,
        next_wal_sst_id=5,
        ssts=ssts,
        l0=(SstView(_ulid(5), _ulid(1), ranged),),
        compacted=(
            model.SortedRun(
                7,
                (
                    SstView(_ulid(2), _ulid(2)),
                    SstView(
                        _ulid(6),
                        _ulid(1),
                        BytesRange(BytesBound.included(b"k"), BytesBound.unbounded()),
                    ),
                ),
            ),
        ),
        external_dbs=(model.ExternalDb("other", uuid.uuid4(), uuid.uuid4(), (_ulid(2),)),),
        checkpoints=(
            Checkpoint(uuid.uuid4(), 1, now, None, None, "forever"),
            Checkpoint(uuid.uuid4(), 1, now, now + 3600, 3, None),
        ),
        last_l0_seq=40,
        last_compacted_l0_view_id=_ulid(4),
        last_l0_clock_tick=1234,
        recent_snapshot_min_seq=39,
        max_parallel_writes=4,
        key_range=BytesRange(BytesBound.included(b"a"), BytesBound.unbounded()),
    )


def test_slatedb_decodes_what_we_write(oracle: Oracle) -> None:
    ms = ManifestStore(open_store(oracle.root), "db")
    m = _ours()
    ms.create_initial(m)
    theirs = oracle.admin().latest()
    assert theirs.id == 1
    _same(m, theirs)


def test_slatedb_reader_opens_our_checkpoint(oracle: Oracle) -> None:
    ms = ManifestStore(open_store(oracle.root), "db")
    cp = Checkpoint(uuid.uuid4(), 1, int(time.time()), None, None, "ours")
    ms.create_initial(Manifest(writer_epoch=1, checkpoints=(cp,)))
    assert [c.name for c in oracle.admin().checkpoints()] == ["ours"]
    reader = oracle.open_reader(checkpoint=cp.id)
    assert reader.get(b"anything") is None and reader.scan() == []


def test_what_slatedb_drops_when_it_rewrites_ours(oracle: Oracle) -> None:
    ms = ManifestStore(open_store(oracle.root), "db")
    m = dataclasses.replace(_ours(), external_dbs=(), ssts=(), l0=(), compacted=())
    ms.create_initial(m)
    oracle.admin().create_checkpoint("theirs")  # SlateDB writes manifest 2 from ours
    got, stamp = decode_stamped_manifest(_manifests(oracle.root)[2], name="2")
    assert stamp.nonce is None
    assert got.max_parallel_writes == 1 and got.key_range is None
    assert got.next_wal_sst_id == m.wal_id_last_seen + 1
    assert got.sequence_tracker  # SlateDB writes its own (empty) tracker where we had none
    kept = dataclasses.replace(
        got,
        checkpoints=m.checkpoints,
        max_parallel_writes=4,
        key_range=m.key_range,
        next_wal_sst_id=m.next_wal_sst_id,
        sequence_tracker=None,
    )
    assert kept == m  # everything else SlateDB kept, its new checkpoint aside
    assert {c.name for c in got.checkpoints} == {"forever", None, "theirs"}


def test_a_destroyed_database_stays_destroyed_after_slatedb_writes_it(oracle: Oracle) -> None:
    store = open_store(oracle.root)
    ms = ManifestStore(store, "db")
    ms.create_initial(Manifest(writer_epoch=1))
    destroyed_at = int(time.time())
    ms.update(lambda m: dataclasses.replace(m, destroyed_at_s=destroyed_at))
    # SlateDB knows nothing of destroy: its writer opens, writes and rewrites the manifest
    db = oracle.open_db(s=settings(compactor=False))
    db.put(b"k", b"v")
    db.flush_memtable()
    db.shutdown()
    latest = ManifestStore(store, "db").read_latest()
    assert latest.nonce is None  # SlateDB wrote the latest manifest
    assert latest.manifest.destroyed_at_s == destroyed_at
    assert DESTROYED_CHECKPOINT_NAME in {c.name for c in oracle.admin().checkpoints()}
    with pytest.raises(DatabaseDestroyed):
        FencedManifest.init_writer(ManifestStore(store, "db"))


def test_a_commit_gc_passed_whose_successor_slatedb_wrote_is_applied_once(oracle: Oracle) -> None:
    """SlateDB writes no parent nonce, so the successor proves nothing: our create behind the
    boundary is then settled as void and the change re-applied on the latest manifest, where it
    finds its effect already present (SlateDB built on it) and commits nothing."""
    store = open_store(oracle.root)
    ManifestStore(store, "db").create_initial(Manifest(writer_epoch=1))
    ours = Checkpoint(uuid.uuid4(), 1, int(time.time()), None, None, "ours-once")

    def add(m: Manifest) -> Manifest | None:
        if m.checkpoint(ours.id) is not None:
            return None  # already there
        return dataclasses.replace(m, checkpoints=(*m.checkpoints, ours))

    faulty = FaultyStore(store)
    checking = faulty.pause("check", "put_if_absent", "db/manifest/*", when="after")
    committer = Background(lambda: ManifestStore(faulty, "db").update(add))
    assert checking.wait_reached()  # manifest 2 (ours) created, its boundary not yet checked
    oracle.admin().create_checkpoint("theirs")  # SlateDB writes manifest 3 on top of it
    gc = ManifestStore(store, "db")
    gc.advance_boundary(2)  # GC passes our id before our check
    checking.release()
    committer.join()
    assert committer.error is None
    latest = ManifestStore(store, "db").read_latest()
    assert latest.id == 3 and latest.nonce is None  # nothing of ours committed after SlateDB's
    assert not store.exists(gc.seq.path(2)), "settled as void: our object behind the boundary goes"
    assert [c.name for c in latest.manifest.checkpoints].count("ours-once") == 1
    assert {c.name for c in oracle.admin().checkpoints()} == {"ours-once", "theirs"}
