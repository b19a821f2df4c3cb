"""A reusing manifest encoder against a fresh one over every field (issue 41/42 adversarial
review): a manifest whose bytes decode as given (``decodes_as_given``) decodes to itself, from
a fresh encoder and from one that encoded other manifests before (newer or older ones, items
changed under the same id: an SST's info, a refreshed checkpoint's expiry, a run's views), and
from one seeded by a decode of any manifest of the chain. ``ManifestStore`` caches a committed
manifest as given when ``decodes_as_given`` says so, so any field that does not survive the
round trip would make a writer's state disagree with what every reader decodes."""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.keys import BoundKind, BytesBound, BytesRange
from slatedb_core.manifest._encode import ManifestEncoder, decodes_as_given
from slatedb_core.manifest.codec import decode_stamped_manifest, encode_manifest
from slatedb_core.manifest.model import (
    AppVersion,
    Checkpoint,
    CompactedSst,
    ExternalDb,
    Manifest,
    SortedRun,
    SstInfo,
    SstView,
)

NAME = "db/manifest/00000000000000000009.manifest"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_u32 = st.integers(0, 2**32 - 1)
_u64 = st.integers(0, 2**64 - 1)
_small = st.integers(0, 2**40)
_bytes = st.binary(max_size=6)
_ulids = st.integers(1, 2**128 - 1).map(lambda n: ULID(n.to_bytes(16, "big")))


@st.composite
def _bound(draw: st.DrawFn) -> BytesBound:
    kind = draw(st.sampled_from(list(BoundKind)))
    return BytesBound(kind, None if kind == BoundKind.UNBOUNDED else draw(_bytes))


_range = st.builds(BytesRange, _bound(), _bound())
_info = st.builds(
    SstInfo,
    first_key=st.none() | _bytes,
    last_key=st.none() | _bytes,
    index_offset=_small,
    index_len=_small,
    filter_offset=_small,
    filter_len=_small,
    compression=st.integers(0, 4),
    entry_count=_small,
    size_bytes=_small,
    sst_type=st.integers(0, 1),
    stats_offset=_small,
    stats_len=_small,
    filter_format=st.integers(0, 1),
)


@st.composite
def _sst(draw: st.DrawFn, sst_id: ULID | None = None) -> CompactedSst:
    return CompactedSst(
        sst_id or draw(_ulids),
        draw(_info),
        draw(st.integers(1, 2)),
        draw(st.none() | _ulids),
    )


@st.composite
def _checkpoint(draw: st.DrawFn, cid: uuid.UUID | None = None) -> Checkpoint:
    return Checkpoint(
        cid or uuid.UUID(int=draw(st.integers(0, 2**128 - 1))),
        draw(st.integers(1, 2**40)),
        draw(_u32),
        draw(st.none() | st.integers(1, 2**32 - 1)),
        draw(st.none() | _u64),
        draw(st.none() | st.text(max_size=5)),
    )


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    ssts = tuple(draw(st.lists(_sst(), max_size=6, unique_by=lambda s: s.id)))
    ids = [s.id for s in ssts]

    def views(n: int) -> tuple[SstView, ...]:
        if not ids:
            return ()
        return tuple(
            SstView(draw(_ulids), draw(st.sampled_from(ids)), draw(st.none() | _range))
            for _ in range(draw(st.integers(0, n)))
        )

    cps = tuple(draw(st.lists(_checkpoint(), max_size=3, unique_by=lambda c: c.id)))
    apps = sorted(set(draw(st.lists(st.text(min_size=1, max_size=4), max_size=3))))
    ext = tuple(
        ExternalDb(
            draw(st.text(max_size=6)),
            uuid.UUID(int=draw(st.integers(0, 2**128 - 1))),
            draw(st.none() | st.builds(lambda n: uuid.UUID(int=n), st.integers(0, 2**128 - 1))),
            tuple(draw(st.lists(st.sampled_from(ids), max_size=3))) if ids else (),
        )
        for _ in range(draw(st.integers(0, 2)))
    )
    return Manifest(
        writer_epoch=draw(_u64),
        compactor_epoch=draw(_u64),
        initialized=draw(st.booleans()),
        destroyed_at_s=draw(st.none() | _u32),
        external_dbs=ext,
        replay_after_wal_id=draw(_u64),
        wal_id_last_seen=draw(_u64),
        next_wal_sst_id=draw(_u64),
        ssts=ssts,
        l0=views(3),
        compacted=tuple(SortedRun(draw(_u32), views(3)) for _ in range(draw(st.integers(0, 3)))),
        checkpoints=cps,
        last_l0_seq=draw(_u64),
        last_compacted_l0_view_id=draw(st.none() | _ulids),
        last_l0_clock_tick=draw(st.integers(-(2**63), 2**63 - 1)),
        recent_snapshot_min_seq=draw(_u64),
        sequence_tracker=draw(st.none() | st.binary(max_size=4)),
        max_parallel_writes=draw(st.integers(1, 4)),
        our_writer_epoch=draw(_u64),
        our_compactor_epoch=draw(_u64),
        key_range=draw(st.none() | _range),
        transactions=tuple(AppVersion(a, draw(st.integers(0, 2**63 - 1))) for a in apps),
        separate_wal_store=draw(st.booleans()),
        wal_store_id=draw(st.none() | st.binary(min_size=16, max_size=16)),
        wal_object_store_uri=draw(st.none() | st.text(max_size=5)),
    )


def _decoded(data: bytes) -> Manifest:
    return decode_stamped_manifest(data, name=NAME)[0]


@SETTINGS
@given(m=manifests())
def test_a_manifest_that_decodes_as_given_decodes_to_itself(m: Manifest) -> None:
    """What ``ManifestStore`` caches as committed (``decodes_as_given``) is what a reader decodes."""
    if decodes_as_given(m):
        assert _decoded(encode_manifest(m, manifest_id=9)) == m


@st.composite
def _chain(draw: st.DrawFn) -> list[Manifest]:
    """Manifests changed one step at a time, sharing the objects a step does not change; a step
    may replace an item by an equal-id one whose fields changed."""
    m = draw(manifests())
    out = [m]
    for _ in range(draw(st.integers(1, 8))):
        step = draw(
            st.sampled_from(
                ["sst_fields", "cp_refresh", "run_views", "epochs", "new", "drop", "reorder"]
            )
        )
        if step == "sst_fields" and m.ssts:
            i = draw(st.integers(0, len(m.ssts) - 1))
            ssts = list(m.ssts)
            ssts[i] = draw(_sst(ssts[i].id))
            m = dataclasses.replace(m, ssts=tuple(ssts))
        elif step == "cp_refresh" and m.checkpoints:
            i = draw(st.integers(0, len(m.checkpoints) - 1))
            cps = list(m.checkpoints)
            cps[i] = dataclasses.replace(cps[i], expire_time_s=draw(st.integers(1, 2**32 - 1)))
            m = dataclasses.replace(m, checkpoints=tuple(cps))
        elif step == "run_views" and m.compacted and m.ssts:
            i = draw(st.integers(0, len(m.compacted) - 1))
            runs = list(m.compacted)
            ids = [s.id for s in m.ssts]
            views = tuple(SstView(draw(_ulids), draw(st.sampled_from(ids))) for _ in range(2))
            runs[i] = SortedRun(runs[i].id, views)
            m = dataclasses.replace(m, compacted=tuple(runs))
        elif step == "epochs":
            m = dataclasses.replace(
                m,
                writer_epoch=draw(_u64),
                compactor_epoch=draw(_u64),
                replay_after_wal_id=draw(_u64),
                last_l0_clock_tick=draw(st.integers(0, 2**63 - 1)),
                our_writer_epoch=draw(_u64),
            )
        elif step == "new":
            sst = draw(_sst())
            if all(s.id != sst.id for s in m.ssts):
                cp = draw(_checkpoint())
                new_cps: tuple[Checkpoint, ...] = (
                    m.checkpoints
                    if any(c.id == cp.id for c in m.checkpoints)
                    else (
                        *m.checkpoints,
                        cp,
                    )
                )
                m = dataclasses.replace(
                    m,
                    ssts=(*m.ssts, sst),
                    l0=(SstView(sst.id, sst.id), *m.l0),
                    checkpoints=new_cps,
                )
        elif step == "drop" and m.checkpoints:
            m = dataclasses.replace(m, checkpoints=m.checkpoints[1:])
        elif step == "reorder":
            m = dataclasses.replace(
                m, ssts=m.ssts[::-1], compacted=m.compacted[::-1], checkpoints=m.checkpoints[::-1]
            )
        out.append(m)
    return out


@SETTINGS
@given(chain=_chain(), data=st.data())
def test_a_reused_encoder_writes_any_manifest_of_a_chain_as_a_fresh_one(
    chain: list[Manifest], data: st.DataObject
) -> None:
    """Encodes in any order (an older manifest after a newer one: a commit retried on another
    base), with seeds from decodes of any manifest in between: every encode decodes to what a
    fresh encoder's bytes decode to."""
    enc = ManifestEncoder()
    order = data.draw(st.lists(st.integers(0, len(chain) - 1), min_size=1, max_size=12))
    for n, i in enumerate(order):
        m = chain[i]
        want = _decoded(encode_manifest(m, manifest_id=n + 1))
        got_bytes = enc.encode(m, manifest_id=n + 1)
        got = _decoded(got_bytes)
        assert got == want
        if data.draw(st.booleans()):  # a store read: the decode seeds the encoder
            j = data.draw(st.integers(0, len(chain) - 1))
            seed_bytes = enc.encode(chain[j], manifest_id=99) if j != i else got_bytes
            decoded, stamp = decode_stamped_manifest(seed_bytes, name=NAME)
            if stamp.layout is not None:
                enc.seed(decoded, seed_bytes, stamp.layout)
                # and a change on the decoded manifest, sharing its items
                nxt = dataclasses.replace(decoded, writer_epoch=(decoded.writer_epoch + 1) % 2**64)
                assert _decoded(enc.encode(nxt, manifest_id=100)) == _decoded(
                    encode_manifest(nxt, manifest_id=100)
                )
