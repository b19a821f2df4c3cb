"""Manifest codec (SlateDB 0.17's ManifestV2 behind its u16 version prefix, docs/format.md
"Manifest"): round trips, what goes where, refusals, corruption. The cross-engine checks against
the slatedb 0.17 wheel are in ``test_codec_slatedb.py``."""

from __future__ import annotations

import dataclasses
import os
import struct
import time
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.errors import CorruptionError, InvalidArgument, UnsupportedFeature
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
    MAX_PARALLEL_WRITES,
    Checkpoint,
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)
from tests.manifest.fbtools import drop_slot, root_slots, table_slots, with_one_segment

NAME = "db/manifest/00000000000000000007.manifest"
U64 = 2**64 - 1
U32 = 2**32 - 1


def _ulid(n: int) -> ULID:
    return ULID(n.to_bytes(16, "big"))


def _sst(n: int, **info: Any) -> CompactedSst:
    return CompactedSst(_ulid(n), SstInfo(first_key=b"a%d" % n, last_key=b"z%d" % n, **info))


def _plain_views(ssts: tuple[CompactedSst, ...] | list[CompactedSst]) -> tuple[SstView, ...]:
    return tuple(SstView(s.id, s.id) for s in ssts)


def _full_manifest() -> Manifest:
    """Every field set, most of them to values that differ from their defaults."""
    ssts = (
        CompactedSst(
            _ulid(1), SstInfo(b"", b"\xff" * 3, 1, 2, 3, 4, 4, 6, U64, 1, 7, 8, 1), 7, _ulid(99)
        ),
        CompactedSst(_ulid(2), SstInfo(None, None), 0),
        _sst(3, index_offset=U64, compression=255),
        _sst(4),
    )
    ranged = BytesRange(BytesBound.included(b"b"), BytesBound.excluded(b""))
    return Manifest(
        writer_epoch=U64,
        compactor_epoch=3,
        initialized=False,
        destroyed_at_s=None,
        external_dbs=(
            ExternalDb(
                "s3://b/other",
                uuid.UUID(int=5),
                uuid.UUID(int=U64 << 64),
                (_ulid(10), _ulid(2**127)),
            ),
            ExternalDb("relative/ü", uuid.uuid4()),
        ),
        replay_after_wal_id=11,
        wal_id_last_seen=12,
        next_wal_sst_id=13,
        ssts=ssts,
        l0=(SstView(_ulid(50), _ulid(1), ranged), SstView(_ulid(2), _ulid(2))),
        compacted=(
            SortedRun(
                U32, (SstView(_ulid(3), _ulid(3)), SstView(_ulid(51), _ulid(1), BytesRange()))
            ),
            SortedRun(0, ()),
            SortedRun(
                5, (SstView(_ulid(4), _ulid(4), BytesRange(end=BytesBound.included(b"\x00"))),)
            ),
        ),
        checkpoints=(
            Checkpoint(uuid.uuid4(), 6, 100, None, 4, "writer"),
            Checkpoint(uuid.UUID(int=0), 0, 0, 1, None, ""),
            Checkpoint(uuid.UUID(int=2**128 - 1), U64, U32, U32, 0, None),
        ),
        last_l0_seq=14,
        last_compacted_l0_view_id=_ulid(50),
        last_l0_clock_tick=-5,
        recent_snapshot_min_seq=U64,
        sequence_tracker=b"\x01\x02",
        max_parallel_writes=MAX_PARALLEL_WRITES,
        key_range=BytesRange(BytesBound.included(b"a"), BytesBound.unbounded()),
    )


# ------------------------------------------------------------------------------ round trips


def test_format_version_prefix_is_slatedbs() -> None:
    data = encode_manifest(Manifest())
    assert FORMAT_VERSION == 2 and data[:2] == b"\x00\x02"


def test_round_trips_every_field() -> None:
    m = _full_manifest()
    assert decode_manifest(encode_manifest(m), name=NAME) == m


def test_default_manifest_round_trips() -> None:
    assert decode_manifest(encode_manifest(Manifest()), name=NAME) == Manifest()


def test_keeps_absent_distinct_from_zero_and_empty() -> None:
    m = Manifest(
        ssts=(CompactedSst(_ulid(1), SstInfo(b"", None)),),
        checkpoints=(Checkpoint(uuid.UUID(int=1), 0, 0, None, 0, ""),),
        sequence_tracker=b"",
    )
    got = decode_manifest(encode_manifest(m), name=NAME)
    assert got.ssts[0].info.first_key == b"" and got.ssts[0].info.last_key is None
    assert got.checkpoints[0].writer_epoch == 0 and got.checkpoints[0].name == ""
    assert got.checkpoints[0].expire_time_s is None and got.sequence_tracker == b""


def test_expiry_at_time_zero_stays_expired() -> None:
    """SlateDB's 0 means "never expires", so an expiry at 0 is stored as 1: still expired."""
    m = Manifest(checkpoints=(Checkpoint(uuid.UUID(int=1), 1, 0, 0),))
    cp = decode_manifest(encode_manifest(m), name=NAME).checkpoints[0]
    assert cp.expire_time_s == 1 and cp.is_expired(2)


def test_expiry_past_what_u32_holds_is_stored_as_its_last_second() -> None:
    m = Manifest(checkpoints=(Checkpoint(uuid.UUID(int=1), 1, 0, 2**40),))
    assert decode_manifest(encode_manifest(m), name=NAME).checkpoints[0].expire_time_s == U32


def test_stamp_carries_nonce_and_parent() -> None:
    nonce, parent = bytes(range(16)), bytes(range(16, 32))
    _, stamp = decode_stamped_manifest(
        encode_manifest(Manifest(), nonce=nonce, parent=parent), name=NAME
    )
    assert (stamp.version, stamp.nonce, stamp.parent) == (2, nonce, parent)
    assert decode_stamped_manifest(encode_manifest(Manifest()), name=NAME)[1].parent is None


def test_encoding_is_deterministic_for_a_given_nonce() -> None:
    m = _full_manifest()
    nonce = bytes(range(16))
    assert encode_manifest(m, nonce=nonce) == encode_manifest(m, nonce=nonce)


def test_two_encodings_of_same_manifest_differ_by_nonce() -> None:
    a, b = encode_manifest(_full_manifest()), encode_manifest(_full_manifest())
    assert a != b
    sa, sb = (decode_stamped_manifest(x, name=NAME)[1] for x in (a, b))
    assert sa.nonce != sb.nonce


def test_decodes_a_100k_sst_manifest_quickly() -> None:
    ssts = tuple(
        CompactedSst(
            ULID(os.urandom(16)),
            SstInfo(b"k%07d" % i, b"k%07dz" % i, i, 64, i + 64, 32, 1, 1000, 1 << 20),
        )
        for i in range(100_000)
    )
    runs = tuple(SortedRun(r, _plain_views(ssts[10_000 + r :: 9])) for r in range(9))
    m = Manifest(ssts=ssts, l0=_plain_views(ssts[:10_000]), compacted=runs)
    started = time.perf_counter()
    data = encode_manifest(m)
    got = decode_manifest(data, name=NAME)
    elapsed = time.perf_counter() - started
    assert got == m
    assert len(got.ssts) == 100_000 and got.sst(ssts[-1].id) == ssts[-1]
    assert elapsed < 20  # generous: a few seconds on a loaded 2-core machine


def test_an_ssts_id_table_is_shared_with_its_views() -> None:
    """Each distinct id is written once and referenced from the SST and its views."""
    ssts = tuple(_sst(n) for n in range(1, 201))
    plain = Manifest(ssts=ssts)
    viewed = Manifest(ssts=ssts, l0=_plain_views(ssts))
    per_view = (len(encode_manifest(viewed)) - len(encode_manifest(plain))) / len(ssts)
    assert per_view <= 20  # a view table and its vector slot: no id tables of its own


# ------------------------------------------------------------------------------ where ours go


def test_ours_sit_in_one_table_past_slateDBs_slots() -> None:
    slots = root_slots(encode_manifest(_full_manifest()))
    assert len(slots) == 33 and slots[32]  # ours at slot 32
    assert not any(slots[18:32])  # SlateDB 0.17's ManifestV2 uses slots 0-17
    assert not slots[0] and not slots[17]  # manifest_id, segment_extractor_name: never written
    assert slots[16]  # segments: an empty vector, as SlateDB writes it


def test_sst_original_id_sits_past_slateDBs_slots() -> None:
    data = encode_manifest(Manifest(ssts=(CompactedSst(_ulid(1), SstInfo(), 2, _ulid(9)),)))
    ssts_vector = 8
    sst = table_slots(data, [ssts_vector, 0])
    assert len(sst) == 9 and sst[8] and not any(sst[3:8])


def test_without_our_table_it_decodes_as_slatedb_means_it() -> None:
    """What remains after SlateDB rewrote one of ours: its own fields, and no table of ours."""
    m = _full_manifest()
    got, stamp = decode_stamped_manifest(drop_slot(encode_manifest(m), 32), name=NAME)
    assert stamp.nonce is None and stamp.parent is None
    assert got.max_parallel_writes == 1 and got.key_range is None
    assert got.next_wal_sst_id == m.wal_id_last_seen + 1
    assert got == dataclasses.replace(
        m, max_parallel_writes=1, key_range=None, next_wal_sst_id=m.wal_id_last_seen + 1
    )


def test_destroyed_is_a_checkpoint_slatedb_keeps() -> None:
    m = dataclasses.replace(_full_manifest(), destroyed_at_s=1_700_000_000)
    data = encode_manifest(m, manifest_id=41)
    assert decode_manifest(data, name=NAME) == m
    # without our table (SlateDB rewrote it) the database is still destroyed
    assert decode_manifest(drop_slot(data, 32), name=NAME).destroyed_at_s == 1_700_000_000
    assert DESTROYED_CHECKPOINT_NAME.encode() in data


def test_destroyed_marker_pins_the_manifest_holding_it() -> None:
    m = Manifest(destroyed_at_s=5)
    with pytest.raises(InvalidArgument, match="its id"):
        encode_manifest(m)
    # the marker is a never-expiring checkpoint of manifest 41: SlateDB's GC keeps 41
    data = encode_manifest(m, manifest_id=41)
    assert struct.pack("<Q", 41) in data


def test_the_destroyed_checkpoint_id_is_reserved() -> None:
    m = Manifest(checkpoints=(Checkpoint(DESTROYED_CHECKPOINT_ID, 1, 1),))
    with pytest.raises(InvalidArgument, match="reserved"):
        encode_manifest(m)


# ------------------------------------------------------------------------------ encode refusals


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"l0": (SstView(_ulid(7), _ulid(8)),)}, "not in ssts"),
        ({"ssts": (_sst(1), _sst(1))}, "twice"),
        ({"checkpoints": (Checkpoint(uuid.UUID(int=1), 1, 1),) * 2}, "twice"),
        ({"max_parallel_writes": 0}, "max_parallel_writes"),
        ({"max_parallel_writes": MAX_PARALLEL_WRITES + 1}, "max_parallel_writes"),
        ({"writer_epoch": 2**64}, "does not fit"),
        ({"last_l0_clock_tick": 2**63}, "does not fit"),
        ({"checkpoints": (Checkpoint(uuid.UUID(int=1), 1, 2**32),)}, "u32"),
        ({"checkpoints": (Checkpoint(uuid.UUID(int=1), 1, 1, -1),)}, "negative"),
        ({"ssts": (CompactedSst(_ulid(1), SstInfo(), 2**16),)}, "does not fit"),
        ({"compacted": (SortedRun(2**32),)}, "does not fit"),
    ],
)
def test_encode_refuses(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        encode_manifest(dataclasses.replace(Manifest(), **changes))


def test_encode_refuses_a_nonce_of_the_wrong_size() -> None:
    with pytest.raises(InvalidArgument, match="nonce"):
        encode_manifest(Manifest(), nonce=b"short")
    with pytest.raises(InvalidArgument, match="nonce"):
        encode_manifest(Manifest(), parent=b"x" * 17)


# ------------------------------------------------------------------------------ corruption


def _small_manifest() -> Manifest:
    s = _sst(1)
    return Manifest(
        ssts=(s,),
        l0=_plain_views([s]),
        checkpoints=(Checkpoint(uuid.UUID(int=3), 1, 2, None, 1, "n"),),
    )


def test_flipped_byte_anywhere_in_ours_raises_corruption_naming_the_object() -> None:
    data = encode_manifest(_small_manifest())
    for i in range(len(data)):
        for mask in (0x01, 0xFF):
            bad = bytearray(data)
            bad[i] ^= mask
            with pytest.raises(CorruptionError) as err:
                decode_manifest(bytes(bad), name=NAME)
            assert err.value.name == NAME and NAME in str(err.value)


def test_truncated_manifest_raises_corruption() -> None:
    data = encode_manifest(_small_manifest())
    for n in range(len(data)):
        with pytest.raises(CorruptionError) as err:
            decode_manifest(data[:n], name=NAME)
        assert err.value.name == NAME


@pytest.mark.parametrize("version", [0, 1, 3, 0xFFFF])
def test_other_format_versions_are_corruption(version: int) -> None:
    data = struct.pack(">H", version) + encode_manifest(_small_manifest())[2:]
    with pytest.raises(CorruptionError, match="version"):
        decode_manifest(data, name=NAME)


@settings(max_examples=300, deadline=None)
@given(rest=st.binary(max_size=600))
def test_garbage_after_the_prefix_raises_corruption(rest: bytes) -> None:
    with pytest.raises(CorruptionError) as err:
        decode_manifest(b"\x00\x02" + rest, name=NAME)
    assert err.value.name == NAME


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutations_without_our_checksum_decode_or_raise_corruption(data: st.DataObject) -> None:
    """SlateDB's manifests carry no checksum: a mutated one may still decode, but must never
    escape as anything other than CorruptionError (or UnsupportedFeature, when the mutation
    made the segments vector non-empty)."""
    buf = bytearray(drop_slot(encode_manifest(_full_manifest()), 32))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(2, len(buf) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_manifest(bytes(buf), name=NAME)
    except UnsupportedFeature:
        pass
    except CorruptionError as e:
        assert e.name == NAME


def test_a_segmented_manifest_is_unsupported() -> None:
    """SlateDB RFC 0024's segments: this engine cannot honour them, so it does not read them."""
    with pytest.raises(UnsupportedFeature, match="segment"):
        decode_manifest(with_one_segment(drop_slot(encode_manifest(Manifest()), 32)), name=NAME)


# ------------------------------------------------------------------------------ property tests

_u64 = st.integers(0, U64)
_u32 = st.integers(0, U32)
_ulids = st.binary(min_size=16, max_size=16).map(ULID)
_keys = st.binary(max_size=6)
_bounds = st.one_of(
    st.just(BytesBound.unbounded()), _keys.map(BytesBound.included), _keys.map(BytesBound.excluded)
)
_infos = st.builds(
    SstInfo,
    st.none() | _keys,
    st.none() | _keys,
    _u64,
    _u64,
    _u64,
    _u64,
    st.integers(0, 4),
    _u64,
    _u64,
    st.integers(0, 1),
    _u64,
    _u64,
    st.integers(0, 1),
)
_ssts = st.builds(CompactedSst, _ulids, _infos, st.integers(0, 2**16 - 1), st.none() | _ulids)
_checkpoints = st.builds(
    Checkpoint,
    st.uuids().filter(lambda u: u != DESTROYED_CHECKPOINT_ID),
    _u64,
    _u32,
    st.none() | st.integers(1, U32),
    st.none() | _u64,
    st.none() | st.text(max_size=8),
)
_external_dbs = st.builds(
    ExternalDb,
    st.text(max_size=12),
    st.uuids(),
    st.none() | st.uuids(),
    st.lists(_ulids, max_size=3).map(tuple),
)


@st.composite
def _manifests(draw: st.DrawFn) -> Manifest:
    ssts = draw(st.lists(_ssts, max_size=8, unique_by=lambda s: s.id.bytes))
    views = (
        st.lists(
            st.builds(
                SstView,
                _ulids,
                st.sampled_from([s.id for s in ssts]),
                st.none() | st.builds(BytesRange, _bounds, _bounds),
            ),
            max_size=4,
        ).map(tuple)
        if ssts
        else st.just(())
    )
    return Manifest(
        writer_epoch=draw(_u64),
        compactor_epoch=draw(_u64),
        initialized=draw(st.booleans()),
        destroyed_at_s=draw(st.none() | _u32),
        external_dbs=tuple(draw(st.lists(_external_dbs, max_size=2))),
        replay_after_wal_id=draw(_u64),
        wal_id_last_seen=draw(_u64),
        next_wal_sst_id=draw(_u64),
        ssts=tuple(ssts),
        l0=draw(views),
        compacted=tuple(draw(st.lists(st.builds(SortedRun, _u32, views), max_size=3))),
        checkpoints=tuple(draw(st.lists(_checkpoints, max_size=3, unique_by=lambda c: c.id))),
        last_l0_seq=draw(_u64),
        last_compacted_l0_view_id=draw(st.none() | _ulids),
        last_l0_clock_tick=draw(st.integers(-(2**63), 2**63 - 1)),
        recent_snapshot_min_seq=draw(_u64),
        sequence_tracker=draw(st.none() | st.binary(max_size=9)),
        max_parallel_writes=draw(st.integers(1, MAX_PARALLEL_WRITES)),
        key_range=draw(st.none() | st.builds(BytesRange, _bounds, _bounds)),
    )


@settings(max_examples=150, deadline=None)
@given(m=_manifests(), manifest_id=_u64)
def test_random_manifests_round_trip(m: Manifest, manifest_id: int) -> None:
    assert decode_manifest(encode_manifest(m, manifest_id=manifest_id), name=NAME) == m


def test_a_last_seen_wal_id_with_no_successor_is_corruption() -> None:
    """Without our table, next_wal_sst_id is wal_id_last_seen + 1 (as SlateDB derives it): a
    u64 max there has no next id, so the manifest is damaged (found by the fuzz targets: the
    decoded manifest could not be encoded again)."""
    data = drop_slot(encode_manifest(Manifest(wal_id_last_seen=U64)), 32)
    with pytest.raises(CorruptionError, match="wal_id_last_seen"):
        decode_manifest(data, name=NAME)
