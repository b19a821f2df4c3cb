# mypy: disable-error-code="no-untyped-call"
# (the flatc-generated bindings used as the conformance reference below carry no type hints)
"""Manifest codec: round trips, V1 limits, corruption handling, and layout conformance.

The codec writes and reads FlatBuffers with its own small implementation (for speed), so the
conformance tests at the bottom use the flatc-generated bindings as an independent reference: what
the codec writes must read back field-for-field through the generated readers, and what the
generated builders write (a different field order, defaults omitted) must decode through the codec.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import flatbuffers
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest.codec import (
    DEFAULT_FORMAT_VERSION,
    MANIFEST_MAGIC,
    SUPPORTED_VERSIONS,
    decode_manifest,
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
from slatedb_core.meta import envelope
from tests.manifest.generated import (
    BytesBound as FbBound,
)
from tests.manifest.generated import (
    BytesRange as FbRange,
)
from tests.manifest.generated import (
    Checkpoint as FbCheckpoint,
)
from tests.manifest.generated import (
    CompactedSsTable as FbSst,
)
from tests.manifest.generated import (
    CompactedSsTableView as FbView,
)
from tests.manifest.generated import (
    ExternalDb as FbExternalDb,
)
from tests.manifest.generated import (
    ManifestV1 as FbManifestV1,
)
from tests.manifest.generated import (
    ManifestV2 as FbManifestV2,
)
from tests.manifest.generated import (
    SortedRunV1 as FbRunV1,
)
from tests.manifest.generated import (
    SortedRunV2 as FbRunV2,
)
from tests.manifest.generated import (
    SsTableInfo as FbInfo,
)
from tests.manifest.generated import (
    Ulid as FbUlid,
)
from tests.manifest.generated import (
    Uuid as FbUuid,
)
from tests.manifest.generated import (
    WriterCheckpoint as FbWriterCheckpoint,
)

NAME = "db/manifest/00000000000000000007.manifest"
U64 = 2**64 - 1
U32 = 2**32 - 1


def _ulid(n: int) -> ULID:
    return ULID(n.to_bytes(16, "big"))


def _sst(n: int, **info: Any) -> CompactedSst:
    return CompactedSst(_ulid(n), SstInfo(first_key=b"a%d" % n, last_key=b"z%d" % n, **info))


def _plain_views(ssts: Sequence[CompactedSst]) -> tuple[SstView, ...]:
    return tuple(SstView(s.id, s.id) for s in ssts)


def _full_manifest() -> Manifest:
    """Every field set, most of them to values that differ from their defaults."""
    ssts = (
        CompactedSst(_ulid(1), SstInfo(b"", b"\xff" * 3, 1, 2, 3, 4, 5, 6, U64), 7, _ulid(99)),
        CompactedSst(_ulid(2), SstInfo(None, None), 0),
        _sst(3, index_offset=U64, compression=U32),
        _sst(4),
    )
    ranged = BytesRange(BytesBound.included(b"b"), BytesBound.excluded(b""))
    return Manifest(
        writer_epoch=U64, compactor_epoch=3, initialized=False, destroyed_at_s=0,
        external_dbs=(
            ExternalDb("s3://b/other", uuid.UUID(int=5), uuid.UUID(int=U64 << 64),
                       (_ulid(10), _ulid(2**127))),
            ExternalDb("relative/ü", uuid.uuid4()),
        ),
        replay_after_wal_id=11, wal_id_last_seen=12, next_wal_sst_id=13, ssts=ssts,
        l0=(SstView(_ulid(50), _ulid(1), ranged), SstView(_ulid(2), _ulid(2))),
        compacted=(
            SortedRun(U32, (SstView(_ulid(3), _ulid(3)),
                            SstView(_ulid(51), _ulid(1), BytesRange()))),
            SortedRun(0, ()),
            SortedRun(5, (SstView(_ulid(4), _ulid(4),
                                  BytesRange(end=BytesBound.included(b"\x00"))),)),
        ),
        checkpoints=(
            Checkpoint(uuid.uuid4(), 6, 100, None, 4, "writer"),
            Checkpoint(uuid.UUID(int=0), 0, 0, 0, None, ""),
            Checkpoint(uuid.UUID(int=2**128 - 1), U64, U64, U64, 0, None),
        ),
        last_l0_seq=14, last_compacted_l0_view_id=_ulid(50), last_compacted_l0_sst_id=_ulid(1),
        max_parallel_writes=MAX_PARALLEL_WRITES,
    )


def _v1_manifest() -> Manifest:
    ssts = tuple(_sst(n, entry_count=n) for n in range(1, 6))
    return Manifest(
        writer_epoch=2, compactor_epoch=1, destroyed_at_s=None, replay_after_wal_id=3,
        wal_id_last_seen=4, next_wal_sst_id=5, ssts=ssts, l0=_plain_views(ssts[:2]),
        compacted=(SortedRun(1, _plain_views(ssts[2:4])), SortedRun(0, _plain_views(ssts[4:]))),
        external_dbs=(ExternalDb("s3://x", uuid.uuid4(), None, (_ulid(8),)),),
        checkpoints=(Checkpoint(uuid.uuid4(), 9, 10, 11, 2, "c"),),
        last_l0_seq=6, last_compacted_l0_view_id=_ulid(9), last_compacted_l0_sst_id=_ulid(9),
        max_parallel_writes=4,
    )


# ------------------------------------------------------------------------------ round trips


def test_public_constants_match_the_envelope_contract() -> None:
    assert MANIFEST_MAGIC == b"SDBM"
    assert SUPPORTED_VERSIONS == frozenset({1, 2})
    assert DEFAULT_FORMAT_VERSION == 2


def test_v2_round_trips_every_field() -> None:
    m = _full_manifest()
    data = encode_manifest(m)
    assert envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=NAME,
                                versions=SUPPORTED_VERSIONS).version == 2
    assert decode_manifest(data, name=NAME) == m


def test_v2_keeps_absent_distinct_from_zero_and_empty() -> None:
    cp_never = Checkpoint(uuid.UUID(int=1), 1, 1, None)
    cp_zero = Checkpoint(uuid.UUID(int=2), 1, 1, 0)
    for destroyed in (None, 0):
        m = Manifest(destroyed_at_s=destroyed, checkpoints=(cp_never, cp_zero),
                     ssts=(CompactedSst(_ulid(1), SstInfo(b"", None)),), l0=_plain_views([_sst(1)]))
        got = decode_manifest(encode_manifest(m), name=NAME)
        assert got.destroyed_at_s == destroyed
        assert [c.expire_time_s for c in got.checkpoints] == [None, 0]
        assert (got.ssts[0].info.first_key, got.ssts[0].info.last_key) == (b"", None)


def test_default_manifest_round_trips_in_both_versions() -> None:
    for version in (1, 2):
        assert decode_manifest(encode_manifest(Manifest(), format_version=version),
                               name=NAME) == Manifest()


def test_v1_round_trips_what_it_can_represent() -> None:
    m = _v1_manifest()
    data = encode_manifest(m, format_version=1)
    assert envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=NAME,
                                versions=SUPPORTED_VERSIONS).version == 1
    assert decode_manifest(data, name=NAME) == m


def test_v1_decode_lists_ssts_in_view_order() -> None:
    m = _v1_manifest()
    shuffled = dataclasses.replace(m, ssts=tuple(reversed(m.ssts)))
    assert decode_manifest(encode_manifest(shuffled, format_version=1), name=NAME) == m


def test_v1_manifest_reads_back_the_same_when_written_as_v2() -> None:
    m = _v1_manifest()
    assert decode_manifest(encode_manifest(m, format_version=2), name=NAME) == m


def test_encoding_is_deterministic_for_a_given_nonce() -> None:
    m = _full_manifest()
    nonce = bytes(range(16))
    assert encode_manifest(m, nonce=nonce) == encode_manifest(m, nonce=nonce)


def test_two_encodings_of_same_manifest_differ_by_nonce() -> None:
    m = _full_manifest()
    a, b = encode_manifest(m), encode_manifest(m)
    assert a != b
    opened = [envelope.open_sealed(x, magic=MANIFEST_MAGIC, name=NAME, versions=SUPPORTED_VERSIONS)
              for x in (a, b)]
    assert opened[0].nonce != opened[1].nonce
    assert opened[0].payload == opened[1].payload


def test_decodes_a_100k_sst_manifest() -> None:
    ssts = tuple(
        CompactedSst(ULID(os.urandom(16)), SstInfo(b"k%07d" % i, b"k%07dz" % i, i, 64, i + 64, 32,
                                                   1, 1000, 1 << 20))
        for i in range(100_000)
    )
    runs = tuple(SortedRun(r, _plain_views(ssts[10_000 + r :: 9])) for r in range(9))
    m = Manifest(ssts=ssts, l0=_plain_views(ssts[:10_000]), compacted=runs)
    got = decode_manifest(encode_manifest(m), name=NAME)
    assert got == m
    assert len(got.ssts) == 100_000 and got.sst(ssts[-1].id) == ssts[-1]


# ------------------------------------------------------------------------------ encode refusals


def _v1_with(**changes: Any) -> Manifest:
    return dataclasses.replace(_v1_manifest(), **changes)


def test_v1_encode_rejects_visible_ranges() -> None:
    m = _v1_manifest()
    l0 = (dataclasses.replace(m.l0[0], visible_range=BytesRange()), *m.l0[1:])
    with pytest.raises(InvalidArgument, match="visible_range"):
        encode_manifest(_v1_with(l0=l0), format_version=1)


def test_v1_encode_rejects_view_id_differing_from_sst_id() -> None:
    m = _v1_manifest()
    l0 = (dataclasses.replace(m.l0[0], view_id=_ulid(77)), *m.l0[1:])
    with pytest.raises(InvalidArgument, match="differs from its SST"):
        encode_manifest(_v1_with(l0=l0), format_version=1)


def test_v1_encode_rejects_an_sst_behind_two_views() -> None:
    m = _v1_manifest()
    with pytest.raises(InvalidArgument, match="two views"):
        encode_manifest(_v1_with(l0=(*m.l0, m.l0[0])), format_version=1)


def test_v1_encode_rejects_an_sst_no_view_references() -> None:
    m = _v1_manifest()
    with pytest.raises(InvalidArgument, match="no view references"):
        encode_manifest(_v1_with(ssts=(*m.ssts, _sst(42))), format_version=1)


def test_v1_encode_rejects_diverging_last_compacted_ids() -> None:
    with pytest.raises(InvalidArgument, match="l0_last_compacted"):
        encode_manifest(_v1_with(last_compacted_l0_view_id=_ulid(1)), format_version=1)


@pytest.mark.parametrize("version", [1, 2])
def test_encode_rejects_a_view_of_an_unknown_sst(version: int) -> None:
    m = _v1_with(l0=(SstView(_ulid(404), _ulid(404)),))
    with pytest.raises(InvalidArgument, match="not in ssts"):
        encode_manifest(m, format_version=version)


@pytest.mark.parametrize("version", [1, 2])
def test_encode_rejects_duplicate_sst_ids(version: int) -> None:
    m = _v1_manifest()
    with pytest.raises(InvalidArgument, match="twice"):
        encode_manifest(_v1_with(ssts=(*m.ssts, m.ssts[0])), format_version=version)


@pytest.mark.parametrize(
    "changes",
    [{"writer_epoch": -1}, {"next_wal_sst_id": 2**64}, {"max_parallel_writes": 2**32},
     {"max_parallel_writes": 0}, {"max_parallel_writes": MAX_PARALLEL_WRITES + 1},
     {"compacted": (SortedRun(-1, ()),)}],
)
def test_encode_rejects_values_that_do_not_fit_their_field(changes: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match="does not fit"):
        encode_manifest(dataclasses.replace(Manifest(), **changes))


@pytest.mark.parametrize("version", [0, 3])
def test_encode_rejects_unsupported_format_versions(version: int) -> None:
    with pytest.raises(InvalidArgument, match="format version"):
        encode_manifest(Manifest(), format_version=version)


# ------------------------------------------------------------------------------ corruption


def _small_manifest() -> Manifest:
    s = _sst(1)
    return Manifest(ssts=(s,), l0=_plain_views([s]),
                    checkpoints=(Checkpoint(uuid.UUID(int=3), 1, 2, None, 1, "n"),))


@pytest.mark.parametrize("version", [1, 2])
def test_flipped_byte_anywhere_raises_corruption_naming_the_object(version: int) -> None:
    data = encode_manifest(_small_manifest(), format_version=version)
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


def test_unknown_format_version_is_corruption() -> None:
    payload = envelope.open_sealed(encode_manifest(_small_manifest()), magic=MANIFEST_MAGIC,
                                   name=NAME, versions=SUPPORTED_VERSIONS).payload
    for version in (0, 3, 0xFFFF):
        with pytest.raises(CorruptionError, match="version"):
            decode_manifest(envelope.seal(MANIFEST_MAGIC, version, payload), name=NAME)


def test_payload_of_the_other_version_is_corruption() -> None:
    data = encode_manifest(_small_manifest(), format_version=1)
    payload = envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=NAME,
                                   versions=SUPPORTED_VERSIONS).payload
    with pytest.raises(CorruptionError, match="file identifier"):
        decode_manifest(envelope.seal(MANIFEST_MAGIC, 2, payload), name=NAME)


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([1, 2]), payload=st.binary(max_size=600))
def test_valid_envelope_around_garbage_payload_raises_corruption(version: int,
                                                                 payload: bytes) -> None:
    with pytest.raises(CorruptionError) as err:
        decode_manifest(envelope.seal(MANIFEST_MAGIC, version, payload), name=NAME)
    assert err.value.name == NAME


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([1, 2]), root=st.integers(0, 700), rest=st.binary(max_size=600))
def test_garbage_behind_a_valid_file_identifier_raises_corruption(version: int, root: int,
                                                                  rest: bytes) -> None:
    """Gets past the identifier check, so the reader's own bounds checks are what is exercised."""
    payload = root.to_bytes(4, "little") + (b"SDM1" if version == 1 else b"SDM2") + rest
    with pytest.raises(CorruptionError):
        decode_manifest(envelope.seal(MANIFEST_MAGIC, version, payload), name=NAME)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from([1, 2]), data=st.data())
def test_resealed_payload_mutations_decode_or_raise_corruption(version: int,
                                                               data: st.DataObject) -> None:
    """A mutated payload with a fresh, valid checksum may still decode (FlatBuffers has no payload
    checksum of its own), but must never escape as anything other than CorruptionError."""
    payload = bytearray(envelope.open_sealed(
        encode_manifest(_full_manifest() if version == 2 else _v1_manifest(),
                        format_version=version),
        magic=MANIFEST_MAGIC, name=NAME, versions=SUPPORTED_VERSIONS).payload)
    for _ in range(data.draw(st.integers(1, 4))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    try:
        decode_manifest(envelope.seal(MANIFEST_MAGIC, version, bytes(payload)), name=NAME)
    except CorruptionError as e:
        assert e.name == NAME


# ------------------------------------------------------------------------------ property tests

_u64 = st.integers(0, U64)
_u32 = st.integers(0, U32)
_ulids = st.binary(min_size=16, max_size=16).map(ULID)
_keys = st.binary(max_size=6)
_bounds = st.one_of(st.just(BytesBound.unbounded()), _keys.map(BytesBound.included),
                    _keys.map(BytesBound.excluded))
_infos = st.builds(SstInfo, st.none() | _keys, st.none() | _keys, _u64, _u64, _u64, _u64, _u32,
                   _u64, _u64)
_ssts = st.builds(CompactedSst, _ulids, _infos, _u32, st.none() | _ulids)
_checkpoints = st.builds(Checkpoint, st.uuids(), _u64, _u64, st.none() | _u64, st.none() | _u64,
                         st.none() | st.text(max_size=8))
_external_dbs = st.builds(ExternalDb, st.text(max_size=12), st.uuids(), st.none() | st.uuids(),
                          st.lists(_ulids, max_size=3).map(tuple))


@st.composite
def _manifests(draw: st.DrawFn, *, v1: bool = False) -> Manifest:
    ssts = draw(st.lists(_ssts, max_size=8, unique_by=lambda s: s.id.bytes))
    if v1:  # one plain view per SST, in ssts order: exactly what V1 can hold
        cuts = sorted(draw(st.lists(st.integers(0, len(ssts)), max_size=3)))
        parts = [ssts[a:b] for a, b in zip([0, *cuts], [*cuts, len(ssts)], strict=True)]
        l0 = _plain_views(parts[0])
        runs = tuple(SortedRun(draw(_u32), _plain_views(p)) for p in parts[1:])
        last = draw(st.none() | _ulids)
        last_view, last_sst = last, last
    else:
        views = st.lists(st.builds(
            SstView, _ulids, st.sampled_from([s.id for s in ssts]),
            st.none() | st.builds(BytesRange, _bounds, _bounds),
        ), max_size=4).map(tuple) if ssts else st.just(())
        l0 = draw(views)
        runs = tuple(draw(st.lists(st.builds(SortedRun, _u32, views), max_size=3)))
        last_view, last_sst = draw(st.none() | _ulids), draw(st.none() | _ulids)
    return Manifest(
        writer_epoch=draw(_u64), compactor_epoch=draw(_u64), initialized=draw(st.booleans()),
        destroyed_at_s=draw(st.none() | _u64),
        external_dbs=tuple(draw(st.lists(_external_dbs, max_size=2))),
        replay_after_wal_id=draw(_u64), wal_id_last_seen=draw(_u64), next_wal_sst_id=draw(_u64),
        ssts=tuple(ssts), l0=l0, compacted=runs,
        checkpoints=tuple(draw(st.lists(_checkpoints, max_size=3))), last_l0_seq=draw(_u64),
        last_compacted_l0_view_id=last_view, last_compacted_l0_sst_id=last_sst,
        max_parallel_writes=draw(st.integers(1, MAX_PARALLEL_WRITES)),
    )


@settings(max_examples=100, deadline=None)
@given(m=_manifests())
def test_random_manifests_round_trip_through_v2(m: Manifest) -> None:
    assert decode_manifest(encode_manifest(m), name=NAME) == m


@settings(max_examples=100, deadline=None)
@given(m=_manifests(v1=True))
def test_random_v1_representable_manifests_round_trip_through_v1(m: Manifest) -> None:
    assert decode_manifest(encode_manifest(m, format_version=1), name=NAME) == m


# ------------------------------------------------------------------------------ conformance
# Reference encoder/decoder written against the flatc-generated bindings.

Builder = Any  # flatbuffers.Builder; the runtime ships no type hints


def _hl(raw: bytes) -> tuple[int, int]:
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


def _vector(b: Builder, start: Callable[[Builder, int], Any], offsets: Sequence[int]) -> int:
    start(b, len(offsets))
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return int(b.EndVector())


def _ref_sst(b: Builder, s: CompactedSst) -> int:
    i = s.info
    fk = None if i.first_key is None else b.CreateByteVector(i.first_key)
    lk = None if i.last_key is None else b.CreateByteVector(i.last_key)
    FbInfo.Start(b)
    if fk is not None:
        FbInfo.AddFirstKey(b, fk)
    if lk is not None:
        FbInfo.AddLastKey(b, lk)
    FbInfo.AddIndexOffset(b, i.index_offset)
    FbInfo.AddIndexLen(b, i.index_len)
    FbInfo.AddFilterOffset(b, i.filter_offset)
    FbInfo.AddFilterLen(b, i.filter_len)
    FbInfo.AddCompressionCodec(b, i.compression)
    FbInfo.AddEntryCount(b, i.entry_count)
    FbInfo.AddSizeBytes(b, i.size_bytes)
    info = FbInfo.End(b)
    FbSst.Start(b)
    FbSst.AddInfo(b, info)
    FbSst.AddFormatVersion(b, s.format_version)
    if s.original_id is not None:
        FbSst.AddOriginalId(b, FbUlid.CreateUlid(b, *_hl(s.original_id.bytes)))
    FbSst.AddId(b, FbUlid.CreateUlid(b, *_hl(s.id.bytes)))
    return int(FbSst.End(b))


def _ref_bound(b: Builder, bound: BytesBound, kind: int | None) -> int:
    key = None if bound.key is None else b.CreateByteVector(bound.key)
    FbBound.Start(b)
    FbBound.AddKind(b, int(bound.kind) if kind is None else kind)
    if key is not None:
        FbBound.AddKey(b, key)
    return int(FbBound.End(b))


def _ref_view(b: Builder, v: SstView, bound_kind: int | None) -> int:
    rng = None
    if v.visible_range is not None:
        start = _ref_bound(b, v.visible_range.start, bound_kind)
        end = _ref_bound(b, v.visible_range.end, None)
        FbRange.Start(b)
        FbRange.AddStart(b, start)
        FbRange.AddEnd(b, end)
        rng = FbRange.End(b)
    FbView.Start(b)
    if rng is not None:
        FbView.AddVisibleRange(b, rng)
    FbView.AddSstId(b, FbUlid.CreateUlid(b, *_hl(v.sst_id.bytes)))
    FbView.AddId(b, FbUlid.CreateUlid(b, *_hl(v.view_id.bytes)))
    return int(FbView.End(b))


def _ref_common(b: Builder, m: Manifest, root: Any, metadata_type: int | None) -> tuple[int, int]:
    exts = []
    for e in m.external_dbs:
        FbExternalDb.StartSstIdsVector(b, len(e.sst_ids))
        for s in reversed(e.sst_ids):
            FbUlid.CreateUlid(b, *_hl(s.bytes))
        ids = b.EndVector()
        path = b.CreateString(e.path)
        FbExternalDb.Start(b)
        FbExternalDb.AddPath(b, path)
        FbExternalDb.AddSstIds(b, ids)
        if e.final_checkpoint_id is not None:
            FbExternalDb.AddFinalCheckpointId(b, FbUuid.CreateUuid(
                b, *_hl(e.final_checkpoint_id.bytes)))
        FbExternalDb.AddSourceCheckpointId(b, FbUuid.CreateUuid(
            b, *_hl(e.source_checkpoint_id.bytes)))
        exts.append(FbExternalDb.End(b))
    cps = []
    for cp in m.checkpoints:
        name = None if cp.name is None else b.CreateString(cp.name)
        meta = None
        if cp.writer_epoch is not None:
            FbWriterCheckpoint.Start(b)
            FbWriterCheckpoint.AddEpoch(b, cp.writer_epoch)
            meta = FbWriterCheckpoint.End(b)
        FbCheckpoint.Start(b)
        if name is not None:
            FbCheckpoint.AddName(b, name)
        if meta is not None:
            FbCheckpoint.AddMetadata(b, meta)
            FbCheckpoint.AddMetadataType(b, 1 if metadata_type is None else metadata_type)
        FbCheckpoint.AddManifestId(b, cp.manifest_id)
        FbCheckpoint.AddCheckpointCreateTimeS(b, cp.create_time_s)
        if cp.expire_time_s is not None:
            FbCheckpoint.AddCheckpointExpireTimeS(b, cp.expire_time_s)
        FbCheckpoint.AddId(b, FbUuid.CreateUuid(b, *_hl(cp.id.bytes)))
        cps.append(FbCheckpoint.End(b))
    return _vector(b, root.StartExternalDbsVector, exts), _vector(
        b, root.StartCheckpointsVector, cps)


def _ref_scalars(b: Builder, m: Manifest, root: Any) -> None:
    root.AddInitialized(b, m.initialized)
    if m.destroyed_at_s is not None:
        root.AddDestroyedAtS(b, m.destroyed_at_s)
    root.AddWriterEpoch(b, m.writer_epoch)
    root.AddCompactorEpoch(b, m.compactor_epoch)
    root.AddReplayAfterWalId(b, m.replay_after_wal_id)
    root.AddWalIdLastSeen(b, m.wal_id_last_seen)
    root.AddNextWalSstId(b, m.next_wal_sst_id)
    root.AddLastL0Seq(b, m.last_l0_seq)
    root.AddMaxParallelWrites(b, m.max_parallel_writes)


def _ref_encode(m: Manifest, version: int = 2, *, omit: str = "", bound_kind: int | None = None,
                metadata_type: int | None = None) -> bytes:
    """Encode with the generated builders; no validation, so it can also write broken manifests."""
    b = flatbuffers.Builder(1024)
    if version == 2:
        ssts = _vector(b, FbManifestV2.StartSstsVector, [_ref_sst(b, s) for s in m.ssts])
        l0 = _vector(b, FbManifestV2.StartL0Vector, [_ref_view(b, v, bound_kind) for v in m.l0])
        runs = []
        for r in m.compacted:
            views = _vector(b, FbRunV2.StartViewsVector,
                            [_ref_view(b, v, bound_kind) for v in r.views])
            FbRunV2.Start(b)
            FbRunV2.AddId(b, r.id)
            FbRunV2.AddViews(b, views)
            runs.append(FbRunV2.End(b))
        compacted = _vector(b, FbManifestV2.StartCompactedVector, runs)
        exts, cps = _ref_common(b, m, FbManifestV2, metadata_type)
        FbManifestV2.Start(b)
        _ref_scalars(b, m, FbManifestV2)
        FbManifestV2.AddExternalDbs(b, exts)
        for field, off in (("ssts", ssts), ("l0", l0), ("compacted", compacted),
                           ("checkpoints", cps)):
            if field not in omit:
                getattr(FbManifestV2, "Add" + field.title())(b, off)
        if m.last_compacted_l0_view_id is not None:
            FbManifestV2.AddLastCompactedL0ViewId(b, FbUlid.CreateUlid(
                b, *_hl(m.last_compacted_l0_view_id.bytes)))
        if m.last_compacted_l0_sst_id is not None:
            FbManifestV2.AddLastCompactedL0SstId(b, FbUlid.CreateUlid(
                b, *_hl(m.last_compacted_l0_sst_id.bytes)))
        b.Finish(FbManifestV2.End(b), file_identifier=b"SDM2")
    else:
        by_id = {s.id: s for s in m.ssts}
        l0 = _vector(b, FbManifestV1.StartL0Vector, [_ref_sst(b, by_id[v.sst_id]) for v in m.l0])
        runs = []
        for r in m.compacted:
            inline = _vector(b, FbRunV1.StartSstsVector,
                             [_ref_sst(b, by_id[v.sst_id]) for v in r.views])
            FbRunV1.Start(b)
            FbRunV1.AddId(b, r.id)
            FbRunV1.AddSsts(b, inline)
            runs.append(FbRunV1.End(b))
        compacted = _vector(b, FbManifestV1.StartCompactedVector, runs)
        exts, cps = _ref_common(b, m, FbManifestV1, metadata_type)
        FbManifestV1.Start(b)
        _ref_scalars(b, m, FbManifestV1)
        FbManifestV1.AddExternalDbs(b, exts)
        FbManifestV1.AddL0(b, l0)
        FbManifestV1.AddCompacted(b, compacted)
        FbManifestV1.AddCheckpoints(b, cps)
        if m.last_compacted_l0_sst_id is not None:
            FbManifestV1.AddL0LastCompacted(b, FbUlid.CreateUlid(
                b, *_hl(m.last_compacted_l0_sst_id.bytes)))
        b.Finish(FbManifestV1.End(b), file_identifier=b"SDM1")
    return envelope.seal(MANIFEST_MAGIC, version, bytes(b.Output()))


def _id(s: Any) -> bytes:
    value: int = s.High() << 64 | s.Low()
    return value.to_bytes(16, "big")


def _ref_read_sst(t: Any) -> CompactedSst:
    i = t.Info()
    info = SstInfo(
        None if i.FirstKeyIsNone() else bytes(i.FirstKey(j) for j in range(i.FirstKeyLength())),
        None if i.LastKeyIsNone() else bytes(i.LastKey(j) for j in range(i.LastKeyLength())),
        i.IndexOffset(), i.IndexLen(), i.FilterOffset(), i.FilterLen(), i.CompressionCodec(),
        i.EntryCount(), i.SizeBytes(),
    )
    orig = t.OriginalId()
    return CompactedSst(ULID(_id(t.Id())), info, t.FormatVersion(),
                        None if orig is None else ULID(_id(orig)))


def _ref_read_bound(t: Any) -> BytesBound:
    key = None if t.KeyIsNone() else bytes(t.Key(j) for j in range(t.KeyLength()))
    return BytesBound(BoundKind(t.Kind()), key)


def _ref_read_view(t: Any) -> SstView:
    r = t.VisibleRange()
    rng = None if r is None else BytesRange(_ref_read_bound(r.Start()), _ref_read_bound(r.End()))
    return SstView(ULID(_id(t.Id())), ULID(_id(t.SstId())), rng)


def _ref_read_common(root: Any) -> dict[str, Any]:
    exts, cps = [], []
    for k in range(root.ExternalDbsLength()):
        e = root.ExternalDbs(k)
        final = e.FinalCheckpointId()
        exts.append(ExternalDb(
            e.Path().decode(), uuid.UUID(bytes=_id(e.SourceCheckpointId())),
            None if final is None else uuid.UUID(bytes=_id(final)),
            tuple(ULID(_id(e.SstIds(j))) for j in range(e.SstIdsLength())),
        ))
    for k in range(root.CheckpointsLength()):
        c = root.Checkpoints(k)
        epoch = None
        if c.MetadataType() == 1:
            w = FbWriterCheckpoint.WriterCheckpoint()
            table = c.Metadata()
            w.Init(table.Bytes, table.Pos)
            epoch = w.Epoch()
        cps.append(Checkpoint(uuid.UUID(bytes=_id(c.Id())), c.ManifestId(),
                              c.CheckpointCreateTimeS(), c.CheckpointExpireTimeS(), epoch,
                              None if c.Name() is None else c.Name().decode()))
    return {
        "external_dbs": tuple(exts), "checkpoints": tuple(cps), "initialized": root.Initialized(),
        "destroyed_at_s": root.DestroyedAtS(), "writer_epoch": root.WriterEpoch(),
        "compactor_epoch": root.CompactorEpoch(), "replay_after_wal_id": root.ReplayAfterWalId(),
        "wal_id_last_seen": root.WalIdLastSeen(), "next_wal_sst_id": root.NextWalSstId(),
        "last_l0_seq": root.LastL0Seq(), "max_parallel_writes": root.MaxParallelWrites(),
    }


def _ref_decode(data: bytes) -> Manifest:
    """Decode with the generated readers (no validation)."""
    opened = envelope.open_sealed(data, magic=MANIFEST_MAGIC, name=NAME,
                                  versions=SUPPORTED_VERSIONS)
    buf = opened.payload
    if opened.version == 2:
        assert FbManifestV2.ManifestV2.ManifestV2BufferHasIdentifier(buf, 0)
        r = FbManifestV2.ManifestV2.GetRootAs(buf, 0)
        lc_view, lc_sst = r.LastCompactedL0ViewId(), r.LastCompactedL0SstId()
        return Manifest(
            ssts=tuple(_ref_read_sst(r.Ssts(k)) for k in range(r.SstsLength())),
            l0=tuple(_ref_read_view(r.L0(k)) for k in range(r.L0Length())),
            compacted=tuple(
                SortedRun(run.Id(), tuple(_ref_read_view(run.Views(j))
                                          for j in range(run.ViewsLength())))
                for run in (r.Compacted(k) for k in range(r.CompactedLength()))
            ),
            last_compacted_l0_view_id=None if lc_view is None else ULID(_id(lc_view)),
            last_compacted_l0_sst_id=None if lc_sst is None else ULID(_id(lc_sst)),
            **_ref_read_common(r),
        )
    assert buf[4:8] == b"SDM1"
    r1 = FbManifestV1.ManifestV1.GetRootAs(buf, 0)
    ssts: dict[ULID, CompactedSst] = {}

    def view(t: Any) -> SstView:
        s = ssts.setdefault((s0 := _ref_read_sst(t)).id, s0)
        return SstView(s.id, s.id)

    l0 = tuple(view(r1.L0(k)) for k in range(r1.L0Length()))
    runs = tuple(
        SortedRun(run.Id(), tuple(view(run.Ssts(j)) for j in range(run.SstsLength())))
        for run in (r1.Compacted(k) for k in range(r1.CompactedLength()))
    )
    lc = r1.L0LastCompacted()
    last = None if lc is None else ULID(_id(lc))
    return Manifest(ssts=tuple(ssts.values()), l0=l0, compacted=runs,
                    last_compacted_l0_view_id=last, last_compacted_l0_sst_id=last,
                    **_ref_read_common(r1))


@pytest.mark.parametrize("version", [1, 2])
def test_generated_bindings_read_what_the_codec_writes(version: int) -> None:
    m = _full_manifest() if version == 2 else _v1_manifest()
    assert _ref_decode(encode_manifest(m, format_version=version)) == m


@pytest.mark.parametrize("version", [1, 2])
def test_codec_reads_what_the_generated_bindings_write(version: int) -> None:
    m = _full_manifest() if version == 2 else _v1_manifest()
    assert decode_manifest(_ref_encode(m, version), name=NAME) == m


@settings(max_examples=40, deadline=None)
@given(m=_manifests())
def test_codec_and_generated_bindings_agree_on_random_manifests(m: Manifest) -> None:
    assert _ref_decode(encode_manifest(m)) == m
    assert decode_manifest(_ref_encode(m), name=NAME) == m


@pytest.mark.parametrize("version", [1, 2])
def test_manifest_without_max_parallel_writes_decodes_as_one(version: int) -> None:
    """A manifest from before parallel WAL writes has no such field (flatc's builders omit the
    schema default 0): it means one write in flight."""
    old = dataclasses.replace(Manifest(writer_epoch=3), max_parallel_writes=0)
    data = _ref_encode(old, version)
    got = decode_manifest(data, name=NAME)
    assert got.max_parallel_writes == 1
    assert got == Manifest(writer_epoch=3)
    # and our writer stores the field: a round trip keeps every allowed value
    for n in (1, 2, MAX_PARALLEL_WRITES):
        m = Manifest(max_parallel_writes=n)
        assert decode_manifest(encode_manifest(m, format_version=version), name=NAME) == m
        assert _ref_decode(encode_manifest(m, format_version=version)).max_parallel_writes == n


@pytest.mark.parametrize("version", [1, 2])
def test_max_parallel_writes_past_the_bound_is_corruption(version: int) -> None:
    bad = dataclasses.replace(Manifest(), max_parallel_writes=MAX_PARALLEL_WRITES + 1)
    with pytest.raises(CorruptionError, match="max_parallel_writes"):
        decode_manifest(_ref_encode(bad, version), name=NAME)


def test_v1_decode_deduplicates_inline_ssts_by_id() -> None:
    s1, s2 = _sst(1), _sst(2)
    m = Manifest(ssts=(s1, s2), l0=_plain_views([s1, s2]),
                 compacted=(SortedRun(0, _plain_views([s2])),))
    got = decode_manifest(_ref_encode(m, version=1), name=NAME)
    assert got.ssts == (s1, s2)
    assert got.compacted[0].views == (SstView(s2.id, s2.id),)


@pytest.mark.parametrize(
    ("manifest", "kwargs", "reason"),
    [
        (Manifest(l0=(SstView(_ulid(1), _ulid(2)),)), {}, "not in ssts"),
        (Manifest(ssts=(_sst(1), _sst(1))), {}, "twice"),
        (Manifest(), {"omit": "ssts"}, "required field ssts"),
        (Manifest(), {"omit": "checkpoints"}, "required field checkpoints"),
        (Manifest(ssts=(_sst(1),), l0=(SstView(_ulid(1), _ulid(1), BytesRange()),)),
         {"bound_kind": 3}, "BoundKind 3"),
        (Manifest(ssts=(_sst(1),), l0=(SstView(_ulid(1), _ulid(1), BytesRange()),)),
         {"bound_kind": 1}, "UNBOUNDED bound has no key"),
        (Manifest(checkpoints=(Checkpoint(uuid.UUID(int=1), 1, 1, None, 5),)),
         {"metadata_type": 2}, "CheckpointMetadata type 2"),
    ],
)
def test_structurally_invalid_v2_payload_is_corruption(manifest: Manifest, kwargs: dict[str, Any],
                                                       reason: str) -> None:
    with pytest.raises(CorruptionError, match=reason) as err:
        decode_manifest(_ref_encode(manifest, **kwargs), name=NAME)
    assert err.value.name == NAME



def test_v2_round_trips_a_projected_key_range() -> None:
    from slatedb_core.keys import BytesBound, BytesRange
    from slatedb_core.manifest.model import Manifest

    rng = BytesRange(BytesBound.included(b"g"), BytesBound.excluded(b"p"))
    m = Manifest(key_range=rng)
    assert decode_manifest(encode_manifest(m), name="x").key_range == rng
    assert decode_manifest(encode_manifest(Manifest()), name="x").key_range is None


def test_v1_cannot_store_a_key_range() -> None:
    from slatedb_core.keys import BytesBound, BytesRange
    from slatedb_core.manifest.model import Manifest

    m = Manifest(key_range=BytesRange(BytesBound.included(b"a"), BytesBound.unbounded()))
    with pytest.raises(InvalidArgument):
        encode_manifest(m, format_version=1)
