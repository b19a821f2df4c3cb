"""ManifestV1 read as SlateDB reads it (issue 38, item 5): objects built by the test-only V1
writer :mod:`tests.manifest.v1_fixture` (straight from SlateDB's ``schemas/manifest.fbs``, not
from our encoder) decode into the model field by field, with SlateDB's defaults for what V1 lacks
(its ``FlatBufferManifestCodec::manifest_v1``), ``wal_object_store_uri`` included; a manifest
built on a V1 one is written as V2. The real-database checks are in
``tests/interop/test_manifest_v1.py``."""

from __future__ import annotations

import dataclasses
import struct
import uuid

import flatbuffers
import pytest
from ulid import ULID

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest.codec import (
    DESTROYED_CHECKPOINT_ID,
    DESTROYED_CHECKPOINT_NAME,
    FORMAT_VERSION,
    decode_manifest,
    decode_stamped_manifest,
    encode_manifest,
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
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore
from tests.manifest.v1_fixture import (
    V1Checkpoint,
    V1ExternalDb,
    V1Manifest,
    V1Run,
    V1Sst,
    encode_v1,
    from_model,
)

NAME = "db/manifest/00000000000000000003.manifest"


def _ulid(n: int) -> ULID:
    return ULID(n.to_bytes(16, "big"))


def _info(n: int) -> SstInfo:
    return SstInfo(
        first_key=b"a%d" % n,
        last_key=b"z%d" % n,
        index_offset=100 + n,
        index_len=20 + n,
        filter_offset=200 + n,
        filter_len=30 + n,
        compression=4,
        sst_type=0,
        stats_offset=300 + n,
        stats_len=40 + n,
        filter_format=1,
    )


RNG = BytesRange(BytesBound.included(b"b"), BytesBound.excluded(b"m"))
CP_A = uuid.UUID(int=0xA)
CP_B = uuid.UUID(int=0xB)


def _full() -> V1Manifest:
    """Every V1 field set, most to values that differ from their defaults."""
    return V1Manifest(
        manifest_id=77,
        external_dbs=[
            V1ExternalDb("src/db", CP_A, CP_B, [_ulid(90), _ulid(91)]),
            V1ExternalDb("other", CP_B, None, []),
        ],
        initialized=False,
        writer_epoch=7,
        compactor_epoch=5,
        replay_after_wal_id=40,
        wal_id_last_seen=44,
        l0_last_compacted=_ulid(3),
        l0=[V1Sst(_ulid(2), _info(2), None, 2), V1Sst(_ulid(1), _info(1), RNG, None)],
        compacted=[
            V1Run(9, [V1Sst(_ulid(10), _info(10), None, 2), V1Sst(_ulid(11), _info(11), RNG, 2)]),
            V1Run(4, [V1Sst(_ulid(5), _info(5))]),
        ],
        last_l0_clock_tick=-12345,
        checkpoints=[
            V1Checkpoint(CP_A, 3, 1_700_000_000, 1_800_000_000, 7, "nightly"),
            V1Checkpoint(CP_B, 2, 1_600_000_000),
        ],
        last_l0_seq=999,
        recent_snapshot_min_seq=321,
        sequence_tracker=b"\x01\x02tracker",
    )


def test_every_v1_field_decodes_as_slatedb_decodes_it() -> None:
    m, stamp = decode_stamped_manifest(encode_v1(_full()), name=NAME)
    assert stamp.version == 1 and stamp.nonce is None and stamp.parent is None
    assert m.writer_epoch == 7 and m.compactor_epoch == 5
    assert m.initialized is False
    assert m.replay_after_wal_id == 40 and m.wal_id_last_seen == 44
    assert m.next_wal_sst_id == 45  # SlateDB: wal_id_last_seen + 1
    # V1 has no view ids: SlateDB names each view after its SST
    assert m.l0 == (SstView(_ulid(2), _ulid(2)), SstView(_ulid(1), _ulid(1), RNG))
    assert m.compacted == (
        SortedRun(9, (SstView(_ulid(10), _ulid(10)), SstView(_ulid(11), _ulid(11), RNG))),
        SortedRun(4, (SstView(_ulid(5), _ulid(5)),)),
    )
    assert {s.id: s for s in m.ssts} == {
        _ulid(2): CompactedSst(_ulid(2), _info(2), 2),
        _ulid(1): CompactedSst(_ulid(1), _info(1), 1),  # absent format_version: SlateDB's 1
        _ulid(10): CompactedSst(_ulid(10), _info(10), 2),
        _ulid(11): CompactedSst(_ulid(11), _info(11), 2),
        _ulid(5): CompactedSst(_ulid(5), _info(5), 1),
    }
    assert m.last_compacted_l0_view_id == _ulid(3)  # V1's SST id doubles as the view id
    assert m.last_l0_clock_tick == -12345
    assert m.checkpoints == (
        Checkpoint(CP_A, 3, 1_700_000_000, 1_800_000_000, 7, "nightly"),
        Checkpoint(CP_B, 2, 1_600_000_000, None, None, None),  # expiry 0: never
    )
    assert m.last_l0_seq == 999
    assert m.recent_snapshot_min_seq == 321
    assert m.sequence_tracker == b"\x01\x02tracker"
    assert m.external_dbs == (
        ExternalDb("src/db", CP_A, CP_B, (_ulid(90), _ulid(91))),
        ExternalDb("other", CP_B, None, ()),
    )
    # what V1 lacks: SlateDB's defaults, and ours as for a manifest SlateDB wrote
    assert m.destroyed_at_s is None
    assert m.max_parallel_writes == 1 and m.key_range is None and m.transactions == ()
    assert m.our_writer_epoch == 0 and m.our_compactor_epoch == 0


def test_an_empty_v1_manifest_decodes_to_the_defaults() -> None:
    m = decode_manifest(encode_v1(V1Manifest()), name=NAME)
    assert m == Manifest(initialized=True, next_wal_sst_id=1)


def test_absent_optional_v1_fields_decode_as_slatedb_defaults() -> None:
    v1 = V1Manifest(initialized=False, wal_id_last_seen=3)
    m = decode_manifest(encode_v1(v1), name=NAME)
    assert m.external_dbs == () and m.last_compacted_l0_view_id is None
    assert m.sequence_tracker is None and m.initialized is False
    assert m.next_wal_sst_id == 4


def test_an_sst_in_two_places_is_one_sst_with_two_views() -> None:
    """A V1 manifest repeats an SST's info wherever the SST is seen (e.g. two projections)."""
    low = BytesRange(BytesBound.unbounded(), BytesBound.excluded(b"m"))
    high = BytesRange(BytesBound.included(b"m"), BytesBound.unbounded())
    v1 = V1Manifest(
        compacted=[
            V1Run(2, [V1Sst(_ulid(1), _info(1), high, 2)]),
            V1Run(1, [V1Sst(_ulid(1), _info(1), low, 2)]),
        ]
    )
    m = decode_manifest(encode_v1(v1), name=NAME)
    assert m.ssts == (CompactedSst(_ulid(1), _info(1), 2),)
    assert [r.views for r in m.compacted] == [
        (SstView(_ulid(1), _ulid(1), high),),
        (SstView(_ulid(1), _ulid(1), low),),
    ]


def test_one_sst_with_two_different_infos_is_corruption() -> None:
    v1 = V1Manifest(l0=[V1Sst(_ulid(1), _info(1)), V1Sst(_ulid(1), _info(2))])
    with pytest.raises(CorruptionError, match="ManifestV1") as err:
        decode_manifest(encode_v1(v1), name=NAME)
    assert err.value.name == NAME


def test_the_destroyed_marker_reads_as_in_v2() -> None:
    v1 = V1Manifest(
        checkpoints=[
            V1Checkpoint(DESTROYED_CHECKPOINT_ID, 3, 1_234, 0, None, DESTROYED_CHECKPOINT_NAME)
        ]
    )
    m = decode_manifest(encode_v1(v1), name=NAME)
    assert m.destroyed_at_s == 1_234 and m.checkpoints == ()


@pytest.mark.parametrize("uri", ["", "s3://wal-bucket/wal"])
def test_a_separate_wal_store_in_v1_is_kept(uri: str) -> None:
    """V1's ``wal_object_store_uri`` (SlateDB writes "" when a WAL store is configured) says the
    WAL is elsewhere: it is read as is (openers without a WAL store are refused by
    ``check_wal_present``, tests/wal/test_v1_wal_object_store_uri.py), never dropped; issue 38,
    item 5 (it raised ManifestV1Unrepresentable, so no opener could read it)."""
    m = decode_manifest(encode_v1(V1Manifest(wal_object_store_uri=uri)), name=NAME)
    assert m.wal_object_store_uri == uri


@pytest.mark.parametrize("uri", ["", "s3://wal-bucket/wal"])
def test_our_v2_commit_on_a_v1_wal_store_manifest_keeps_the_mark(uri: str) -> None:
    """ManifestV2 has no ``wal_object_store_uri`` (SlateDB's V2 encoder drops it); our V2 commit
    keeps it in our table, so our later openers still need the WAL store."""
    m = decode_manifest(encode_v1(V1Manifest(writer_epoch=2, wal_object_store_uri=uri)), name=NAME)
    data = encode_manifest(dataclasses.replace(m, compactor_epoch=1))
    again, stamp = decode_stamped_manifest(data, name=NAME)
    assert stamp.version == FORMAT_VERSION
    assert again.wal_object_store_uri == uri and again.compactor_epoch == 1


def test_a_wal_store_id_round_trips_and_is_checked() -> None:
    """Ours (issue 38, item 4): the id of the separate WAL store our writer recorded."""
    sid = bytes(range(16))
    assert (
        decode_manifest(encode_manifest(Manifest(wal_store_id=sid)), name=NAME).wal_store_id == sid
    )
    assert decode_manifest(encode_manifest(Manifest()), name=NAME).wal_store_id is None
    with pytest.raises(InvalidArgument):
        encode_manifest(Manifest(wal_store_id=b"short"))


def test_a_last_seen_wal_id_with_no_successor_is_corruption() -> None:
    with pytest.raises(CorruptionError, match="wal_id_last_seen"):
        decode_manifest(encode_v1(V1Manifest(wal_id_last_seen=2**64 - 1)), name=NAME)


def test_missing_required_v1_vectors_are_corruption() -> None:
    """``l0``, ``compacted`` and ``checkpoints`` are required in ManifestV1: a buffer without
    them (a bare root table) is corrupt, not empty."""
    b = flatbuffers.Builder(64)
    b.StartObject(16)
    b.PrependUint64Slot(3, 1, 0)
    b.Finish(b.EndObject())
    with pytest.raises(CorruptionError, match="ManifestV1"):
        decode_manifest(struct.pack(">H", 1) + bytes(b.Output()), name=NAME)


def test_truncated_v1_manifest_raises_corruption() -> None:
    """Every cut raises CorruptionError naming the object, except cuts of the builder's
    trailing alignment padding, which decode to the same manifest."""
    data = encode_v1(_full())
    whole = decode_manifest(data, name=NAME)
    for n in range(2, len(data)):
        try:
            cut = decode_manifest(data[:n], name=NAME)
        except CorruptionError as err:
            assert err.name == NAME
        else:
            assert cut == whole and not data[n:].strip(b"\0"), n


def test_from_model_round_trips_through_v1() -> None:
    """The fixture's model -> V1 and our V1 decode agree (the interop test relies on it)."""
    ssts = (CompactedSst(_ulid(1), _info(1)), CompactedSst(_ulid(2), _info(2), 1))
    m = Manifest(
        writer_epoch=3,
        compactor_epoch=2,
        wal_id_last_seen=10,
        next_wal_sst_id=11,
        replay_after_wal_id=8,
        ssts=ssts,
        l0=(SstView(_ulid(1), _ulid(1)),),
        compacted=(SortedRun(0, (SstView(_ulid(2), _ulid(2), RNG),)),),
        checkpoints=(Checkpoint(CP_A, 4, 1_700_000_000, None, 3, "x"),),
        last_l0_seq=50,
        last_compacted_l0_view_id=_ulid(0),
        last_l0_clock_tick=9,
        sequence_tracker=b"t",
    )
    assert decode_manifest(encode_v1(from_model(m)), name=NAME) == m


def test_a_commit_on_a_v1_manifest_writes_v2(mem: ObjectStore) -> None:
    store = mem
    ms = ManifestStore(store, "db")
    v1 = _full()
    v1.initialized = True
    store.put("db/manifest/00000000000000000001.manifest", encode_v1(v1))
    latest = ms.read_latest()
    assert latest.version == 1 and latest.nonce is None
    committed = ms.update(lambda m: dataclasses.replace(m, last_l0_seq=m.last_l0_seq + 1))
    data = store.get(ms.seq.path(committed.id)).data
    assert struct.unpack_from(">H", data)[0] == FORMAT_VERSION == 2
    again, stamp = decode_stamped_manifest(data, name="again")
    assert stamp.version == 2 and stamp.parent is None  # built on SlateDB's, nonce-less V1
    assert again == dataclasses.replace(latest.manifest, last_l0_seq=1000)
    assert encode_manifest(again, manifest_id=2)[:2] == b"\x00\x02"
