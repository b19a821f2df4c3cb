"""Valid encodings to mutate: every decoder's fuzzing starts from objects our own writers made.

Mutating real encodings reaches far deeper into a decoder than random bytes do (random bytes die
at the magic or the checksum). Each generator draws a structurally varied object from a seeded
``random.Random`` (empty and full collections, optional fields present and absent, u64 extremes)
and returns its bytes exactly as the engine would store them.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from ulid import ULID

from slatedb_core.compactor.compactions import CompactionRecord, CompactionsState, encode_state
from slatedb_core.keys import BytesBound, BytesRange, KeyRange
from slatedb_core.layout import shard_db_name
from slatedb_core.lsm.entries import batch_from_lists, sort_dedup
from slatedb_core.manifest.codec import encode_manifest
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
from slatedb_core.sst import SstOptions, bloom, encode_sst
from slatedb_core.table.shardmap import PendingOp, Shard, ShardMap, encode_shard_map, ranges_for
from slatedb_core.wal.log import FENCE, encode_wal_sst
from tests.manifest.fbtools import drop_slot

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1

Generator = Callable[[random.Random], bytes]


def u64(rng: random.Random) -> int:
    """Mostly small, sometimes an edge of the range."""
    roll = rng.random()
    if roll < 0.6:
        return rng.randrange(0, 1000)
    if roll < 0.8:
        return rng.choice((0, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, U64_MAX))
    return rng.randrange(0, U64_MAX + 1)


def u32(rng: random.Random) -> int:
    return rng.choice((0, 1, 7, 2**31 - 1, U32_MAX)) if rng.random() < 0.3 else rng.randrange(1000)


def key(rng: random.Random, max_len: int = 12) -> bytes:
    return rng.randbytes(rng.randrange(1, max_len + 1))


def ulid(rng: random.Random) -> ULID:
    return ULID(rng.randbytes(6) + rng.randbytes(10)) if rng.random() < 0.9 else ULID(bytes(16))


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(bytes=rng.randbytes(16))


def _bound(rng: random.Random) -> BytesBound:
    kind = rng.randrange(3)
    if kind == 0:
        return BytesBound.unbounded()
    k = key(rng)
    return BytesBound.included(k) if kind == 1 else BytesBound.excluded(k)


def _range(rng: random.Random) -> BytesRange:
    return BytesRange(_bound(rng), _bound(rng))


def _sst(rng: random.Random) -> CompactedSst:
    info = SstInfo(
        first_key=key(rng) if rng.random() < 0.8 else None,
        last_key=key(rng) if rng.random() < 0.8 else None,
        index_offset=u64(rng),
        index_len=u64(rng),
        filter_offset=u64(rng),
        filter_len=u64(rng),
        compression=rng.randrange(5),
        entry_count=u64(rng),
        size_bytes=u64(rng),
        sst_type=rng.randrange(2),
        stats_offset=u64(rng),
        stats_len=u64(rng),
        filter_format=rng.randrange(2),
    )
    original = ulid(rng) if rng.random() < 0.2 else None
    return CompactedSst(ulid(rng), info, rng.randrange(2**16), original)


def _ssts(rng: random.Random) -> tuple[CompactedSst, ...]:
    """Up to five SSTs with distinct ids (a manifest never lists one twice)."""
    by_id = {s.id: s for s in (_sst(rng) for _ in range(rng.randrange(6)))}
    return tuple(by_id.values())


def _checkpoint(rng: random.Random) -> Checkpoint:
    return Checkpoint(
        id=_uuid(rng),
        manifest_id=u64(rng),
        create_time_s=u32(rng),
        expire_time_s=max(1, u32(rng)) if rng.random() < 0.5 else None,
        writer_epoch=u64(rng) if rng.random() < 0.5 else None,
        name=rng.choice((None, "", "nightly", "ünï/cøde")),
    )


def _external(rng: random.Random) -> ExternalDb:
    return ExternalDb(
        path=rng.choice(("parent", "a/b/c", "src-1")),
        source_checkpoint_id=_uuid(rng),
        final_checkpoint_id=_uuid(rng) if rng.random() < 0.5 else None,
        sst_ids=tuple(ulid(rng) for _ in range(rng.randrange(3))),
    )


def _head(rng: random.Random) -> dict[str, object]:
    return {
        "writer_epoch": u64(rng),
        "compactor_epoch": u64(rng),
        "initialized": rng.random() < 0.8,
        "destroyed_at_s": u32(rng) if rng.random() < 0.2 else None,
        "external_dbs": tuple(_external(rng) for _ in range(rng.randrange(3))),
        "replay_after_wal_id": u64(rng),
        "wal_id_last_seen": u64(rng),
        "next_wal_sst_id": u64(rng),
        "checkpoints": tuple(_checkpoint(rng) for _ in range(rng.randrange(4))),
        "last_l0_seq": u64(rng),
        "max_parallel_writes": rng.randint(1, MAX_PARALLEL_WRITES),
    }


def manifest_v2_model(rng: random.Random) -> Manifest:
    """Views may share an SST, carry visible ranges and ids of their own; a key range is optional."""
    ssts = _ssts(rng)

    def view() -> SstView:
        sst = rng.choice(ssts)
        vid = sst.id if rng.random() < 0.5 else ulid(rng)
        return SstView(vid, sst.id, _range(rng) if rng.random() < 0.4 else None)

    l0 = tuple(view() for _ in range(rng.randrange(4))) if ssts else ()
    runs = tuple(
        SortedRun(u32(rng), tuple(view() for _ in range(rng.randrange(1, 4))))
        for _ in range(rng.randrange(3) if ssts else 0)
    )
    return Manifest(
        ssts=ssts,
        l0=l0,
        compacted=runs,
        last_compacted_l0_view_id=ulid(rng) if rng.random() < 0.5 else None,
        last_l0_clock_tick=rng.randrange(-(2**63), 2**63),
        recent_snapshot_min_seq=u64(rng),
        sequence_tracker=rng.randbytes(rng.randrange(20)) if rng.random() < 0.5 else None,
        key_range=_range(rng) if rng.random() < 0.3 else None,
        **_head(rng),  # type: ignore[arg-type]
    )


def manifest(rng: random.Random) -> bytes:
    """One of ours: SlateDB 0.17's ManifestV2 with our table (and its CRC) at slot 32."""
    return encode_manifest(manifest_v2_model(rng), manifest_id=u64(rng), nonce=rng.randbytes(16))


def manifest_slatedb(rng: random.Random) -> bytes:
    """As SlateDB writes one: no table of ours, so no checksum stands before the reader."""
    return drop_slot(manifest(rng), 32)


def compactions_model(rng: random.Random) -> CompactionsState:
    records = tuple(
        CompactionRecord(
            id=ulid(rng),
            kind=rng.choice(("l0", "sorted-runs")),
            source_view_ids=tuple(ulid(rng) for _ in range(rng.randrange(4))),
            source_run_ids=tuple(u32(rng) for _ in range(rng.randrange(3))),
            destination=u32(rng),
            outputs=tuple(ulid(rng) for _ in range(rng.randrange(3))),
            status=rng.choice(("running", "committed", "failed")),
            created_at_ms=u64(rng),
            updated_at_ms=u64(rng),
            error=rng.choice((None, "", "abandoned by a fenced or crashed compactor")),
        )
        for _ in range(rng.randrange(4))
    )
    return CompactionsState(compactor_epoch=u64(rng), compactions=records)


def compactions(rng: random.Random) -> bytes:
    return encode_state(compactions_model(rng))


def entries(rng: random.Random, max_rows: int = 40) -> pa.RecordBatch:
    n = rng.randrange(max_rows + 1)
    keys = [key(rng, 16) for _ in range(n)]
    kinds = [1 if rng.random() < 0.2 else 0 for _ in range(n)]
    values = [b"" if k else rng.randbytes(rng.randrange(24)) for k in kinds]
    seqs = [u64(rng) for _ in range(n)]
    return sort_dedup(batch_from_lists(keys, seqs, kinds, values))


def sst_options(rng: random.Random) -> SstOptions:
    return SstOptions(
        block_size=rng.choice((1, 64, 256, 4096)),
        bloom_bits_per_key=rng.choice((0, 1, 10)),
        compression=rng.choice(("none", "none", "snappy", "zlib", "lz4", "zstd")),
    )


def sst(rng: random.Random) -> bytes:
    data, _ = encode_sst(entries(rng), sst_options(rng))
    return data


def wal_sst(rng: random.Random) -> bytes:
    """A WAL object as the writer makes it; one in five is a fence (zero bytes, SlateDB 0.17's)."""
    if rng.random() >= 0.8:
        return FENCE
    batch = entries(rng, 20)
    # every write has a seq of its own: distinct seqs (the rows are put in seq order)
    seqs = pa.array(rng.sample(range(1, 2**62), batch.num_rows), pa.uint64())
    batch = pa.RecordBatch.from_arrays(
        [batch.column(0), seqs, batch.column(2), batch.column(3)], schema=batch.schema
    )
    return encode_wal_sst(batch, sst_options(rng))


def bloom_section(rng: random.Random) -> bytes:
    keys = [key(rng, 16) for _ in range(rng.randrange(1, 60))]
    offs = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(k) for k in keys], out=offs[1:])
    data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    return bloom.build_bloom(bloom.hash_keys(data, offs), rng.choice((1, 4, 10, 20)))


TABLE = "tables/t"


def shard_map(rng: random.Random) -> bytes:
    """A table's shard map: 1-5 shards tiling the key space, maybe a pending split, retirees."""
    points = sorted({key(rng, 4) for _ in range(rng.randrange(5))})
    ranges = ranges_for(points)
    shards = tuple(
        Shard(i, r, f"{TABLE}/{shard_db_name(10 + i)}", 10 + i) for i, r in enumerate(ranges)
    )
    pending: tuple[PendingOp, ...] = ()
    if rng.random() < 0.4:
        victim = rng.choice(shards)
        lo, hi = victim.key_range.start, victim.key_range.end
        mid = (lo or b"") + b"\x80"
        if hi is None or mid < hi:
            targets = ((50, KeyRange(lo, mid)), (51, KeyRange(mid, hi)))
            pending = (PendingOp(_uuid(rng), "split", (victim.shard_id,), targets, 1.5e9),)
    retired = tuple(f"{TABLE}/{shard_db_name(i)}" for i in range(rng.randrange(3)))
    m = ShardMap(rng.randrange(1, 99), shards, rng.random() * 2e9, 60, pending, retired)
    return encode_shard_map(m, TABLE)


def boundary(rng: random.Random) -> bytes:
    text = str(u64(rng)).encode("ascii")
    return text + b"\n" if rng.random() < 0.3 else text


def pointer(rng: random.Random) -> bytes:
    return str(rng.randrange(0, 40)).encode("ascii")


def sealed(rng: random.Random) -> bytes:
    return envelope.seal(
        b"SDBM", rng.choice((1, 2)), rng.randbytes(rng.randrange(64)), rng.randbytes(16)
    )


def seeds(gen: Generator, count: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [gen(rng) for _ in range(count)]
