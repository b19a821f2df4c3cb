"""The decoders under fuzz, each with the property its output must have.

The rule for every decoder of bytes read from the store: it returns a sane value or raises
:class:`CorruptionError`; anything else (``IndexError``, ``struct.error``, ``OverflowError``,
``RecursionError``, ``StoreError`` for a short object ...) escapes ``check`` and is a finding.
"Sane" is checked per decoder: the value re-encodes and decodes back to itself, integers are in
their field's range, and an SST's entries are sorted, counted and findable by key.
"""

from __future__ import annotations

import bisect
import itertools
import random
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from slatedb_core.compactor.compactions import decode_state, encode_state
from slatedb_core.compactor.compactions_codec import CHECKSUM_SLOT, COMPACTIONS, STATUS_CODE
from slatedb_core.errors import CorruptionError, UnsupportedFeature
from slatedb_core.manifest.codec import decode_manifest, encode_manifest
from slatedb_core.manifest.flatbuf import FbReader, Malformed
from slatedb_core.meta import envelope
from slatedb_core.meta.boundary import parse_boundary
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.sst import SstReader
from slatedb_core.sst.bloom import BloomFilter
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table.shardmap import decode_shard_map, encode_shard_map, layout_problem
from slatedb_core.wal.log import WalLog
from tests.fuzz import corpus
from tests.fuzz.mutate import (
    Mutation,
    apply_all,
    payload_of,
    random_mutation,
    repair_sst,
    reseal,
)

NAME = "fuzz/object"
U64_MAX = 2**64 - 1
CORRUPT = "corrupt"
OK = "ok"


def _u64(value: object, what: str) -> None:
    assert type(value) is int and 0 <= value <= U64_MAX, f"{what} = {value!r} is not a u64"


# ----------------------------------------------------------------------------------- checks


def check_manifest(data: bytes) -> str:
    try:
        m = decode_manifest(data, name=NAME)
    except (CorruptionError, UnsupportedFeature):
        return CORRUPT
    again = encode_manifest(m, manifest_id=1, nonce=bytes(16))
    assert decode_manifest(again, name=NAME) == m, "round trip differs"
    known = {s.id for s in m.ssts}
    assert all(v.sst_id in known for v in m.l0), "an L0 view names an SST not in ssts"
    return OK


def check_compactions(data: bytes) -> str:
    try:
        state = decode_state(data, NAME)
    except CorruptionError:
        return CORRUPT
    _u64(state.compactor_epoch, "compactor_epoch")
    for c in state.compactions:
        for v in (c.destination, c.created_at_ms, c.updated_at_ms, *c.source_run_ids):
            _u64(v, f"compaction {c.id} field")
        assert c.kind in ("l0", "sorted-runs") and c.status in STATUS_CODE
        assert c.error is None or type(c.error) is str
    assert decode_state(encode_state(state), NAME) == state, "compactions round trip differs"
    return OK


_store: ObjectStore | None = None


def _memory() -> ObjectStore:
    global _store
    if _store is None:
        _store = open_store("memory://")
    return _store


def _check_entries(reader: SstReader, table: pa.Table) -> None:
    assert table.num_rows == reader.entry_count, "read_all disagrees with the footer's count"
    keys = table.column("key").to_pylist()
    seqs = table.column("seq").to_pylist()
    rows = list(zip(keys, seqs, strict=True))
    assert all(a < b or (a == b and sa > sb) for (a, sa), (b, sb) in itertools.pairwise(rows)), (
        "rows are not in key, then seq, order"
    )
    kinds = table.column("kind").to_pylist()
    assert all(k in (0, 1, 2) for k in kinds), "unknown entry kind"
    if keys:
        assert reader.first_key == keys[0] and reader.last_key == keys[-1]
    values = table.column("value").to_pylist()
    for j in range(0, len(keys), max(1, len(keys) // 8)):  # a bounded sample of point lookups
        i = bisect.bisect_left(keys, keys[j])  # get answers the newest version
        got = reader.get(keys[i])
        # A bloom filter is checksummed on its own, so a block changed under a valid CRC can hold
        # keys the filter never saw: then (and only then) get may miss an entry scan returns.
        if got is not None or reader.may_contain(keys[i]):
            assert got == (seqs[i], kinds[i], values[i]), "get disagrees with scan"


def _decode_sst(open_reader: Callable[[], SstReader]) -> tuple[SstReader, pa.Table] | None:
    try:
        reader = open_reader()
        return reader, reader.read_all()
    except CorruptionError:
        return None


def check_sst(data: bytes) -> str:
    """Full decode from memory, and the two store paths: the ranged index+footer GET driven by
    ``SstInfo``, and the HEAD + tail read without it. All must agree."""
    full = _decode_sst(lambda: SstReader.from_bytes(data, NAME))
    store = _memory()
    store.put(NAME, data)
    tail_read = _decode_sst(lambda: SstReader.open(store, NAME))
    assert (full is None) == (tail_read is None), "tail-read open disagrees with the full decode"
    if full is None or tail_read is None:
        return CORRUPT
    reader, table = full
    _check_entries(reader, table)
    assert tail_read[1].equals(table), "tail-read scan differs from the full decode"
    ranged = _decode_sst(lambda: SstReader.open(store, NAME, reader.info))
    assert ranged is not None and ranged[1].equals(table), "ranged open with SstInfo failed"
    return OK


def check_sst_ranged(data: bytes, original: bytes) -> str:
    """The manifest's ``SstInfo`` was right for ``original``, and the object now holds ``data``
    (damaged or overwritten): the ranged open must report corruption or read exactly what the
    info describes, never read past the object or fail with a store error."""
    info = SstReader.from_bytes(original, NAME).info
    store = _memory()
    store.put(NAME, data)
    got = _decode_sst(lambda: SstReader.open(store, NAME, info))
    if got is None:
        return CORRUPT
    reader, table = got
    assert reader.info == info
    _check_entries(reader, table)
    return OK


def check_wal(data: bytes) -> str:
    try:
        wal = WalLog(_memory(), "db").decode(7, data)
    except CorruptionError:
        return CORRUPT
    keys = wal.entries.column("key").to_pylist()
    seqs = wal.entries.column("seq").to_pylist()
    assert all(a <= b for a, b in itertools.pairwise(seqs)), "WAL rows are not in seq order"
    assert wal.is_fence == (len(data) == 0), "only a zero-byte object is a fence"
    assert not (wal.is_fence and keys), "a fence holds no rows"
    return OK


def check_boundary(data: bytes) -> str:
    try:
        value = parse_boundary(data, NAME)
    except CorruptionError:
        return CORRUPT
    _u64(value, "boundary")
    assert parse_boundary(str(value).encode(), NAME) == value
    return OK


_POINTER_LATEST = 5


def _pointer_namespace() -> SequencedStore:
    seq = SequencedStore(_memory(), "pointer-db", "manifest", "manifest", pointer_stride=1000)
    if seq.latest_id() is None:
        for i in range(1, _POINTER_LATEST + 1):
            seq.create(i, b"x%d" % i)
    return seq


def check_pointer(data: bytes) -> str:
    """Whatever ``_latest_version`` holds, the latest lookup finds the real latest object."""
    seq = _pointer_namespace()
    seq.store.put(seq.pointer_path, data)
    assert seq.latest_id() == _POINTER_LATEST, "a garbage pointer changed the latest id"
    assert seq.read_latest() == (_POINTER_LATEST, b"x%d" % _POINTER_LATEST)
    return OK


def check_envelope(data: bytes) -> str:
    try:
        opened = envelope.open_sealed(data, magic=b"SDBM", name=NAME, versions=frozenset({1, 2}))
    except CorruptionError:
        return CORRUPT
    assert envelope.seal(b"SDBM", opened.version, opened.payload, opened.nonce) == data
    return OK


_PROBES = [b"", b"a", b"key-1", bytes(range(40))]


def check_bloom(data: bytes) -> str:
    try:
        bloom = BloomFilter(NAME, data)
    except CorruptionError:
        return CORRUPT
    assert all(type(bloom.may_contain(k)) is bool for k in _PROBES)
    return OK


def check_shard_map(data: bytes) -> str:
    try:
        m = decode_shard_map(data, map_id=7, table_path=corpus.TABLE, name=NAME)
    except CorruptionError:
        return CORRUPT
    assert layout_problem(m) is None
    again = decode_shard_map(
        encode_shard_map(m, corpus.TABLE), map_id=7, table_path=corpus.TABLE, name=NAME
    )
    assert again == m, "shard map round trip differs"
    return OK


# ---------------------------------------------------------------------------------- targets

Rebuild = Callable[[bytes, bytes], bytes]
"""(original, mutated region) -> the input: re-seals or repairs checksums."""


def _envelope_region(original: bytes) -> bytes:
    return payload_of(original)


def _whole(original: bytes) -> bytes:
    return original


@dataclass(frozen=True)
class Target:
    name: str
    generate: corpus.Generator
    check: Callable[[bytes, bytes], str]
    """(input, the unmutated seed it came from) -> OK or CORRUPT; raises on a finding."""
    region: Callable[[bytes], bytes] = _whole
    """The part of a seed that mutations apply to."""
    rebuild: Rebuild | None = None
    """Turns a mutated region back into an object whose checksums pass; None: nothing to fix."""

    def make_input(
        self, pool: Sequence[bytes], index: int, mutations: Sequence[Mutation], repair: bool
    ) -> bytes:
        """The seed ``pool[index]`` with ``mutations`` applied to its region, re-sealed or
        repaired when ``repair`` (else left with stale checksums)."""
        original = pool[index % len(pool)]
        region = self.region(original)
        others = [self.region(p) for p in pool[:8]]
        mutated = apply_all(region, mutations, others)
        if self.rebuild is None:
            return mutated
        if repair:
            return self.rebuild(original, mutated)
        if self.region is _envelope_region:  # unrepaired: the damaged payload in the old envelope
            return original[: envelope.HEADER_SIZE] + mutated + original[-4:]
        return mutated


def _reseal(original: bytes, payload: bytes) -> bytes:
    return reseal(original, payload)


def _repair_sst(original: bytes, mutated: bytes) -> bytes:
    return repair_sst(mutated)


def _repair_compactions(original: bytes, mutated: bytes) -> bytes:
    """Make our CRC-32 (CompactionsV1 slot 9) right again where the mutated root still locates
    it, so the FlatBuffers reader itself sees the mutation."""
    try:
        r = FbReader(mutated[2:])
        root = r.root()
        r.table(COMPACTIONS, root)
        at = r.slot_position(COMPACTIONS, root, CHECKSUM_SLOT)
    except (Malformed, struct.error):
        return mutated
    if at is None:
        return mutated
    at += 2
    crc = zlib.crc32(mutated[:at] + bytes(4) + mutated[at + 4 :])
    return mutated[:at] + struct.pack("<I", crc) + mutated[at + 4 :]


def _data_only(check: Callable[[bytes], str]) -> Callable[[bytes, bytes], str]:
    return lambda data, _original: check(data)


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("manifest", corpus.manifest, _data_only(check_manifest)),
        Target("manifest-slatedb", corpus.manifest_slatedb, _data_only(check_manifest)),
        Target(
            "compactions",
            corpus.compactions,
            _data_only(check_compactions),
            _whole,
            _repair_compactions,
        ),
        Target("sst", corpus.sst, _data_only(check_sst), _whole, _repair_sst),
        Target("sst-ranged", corpus.sst, check_sst_ranged, _whole, _repair_sst),
        Target("wal-sst", corpus.wal_sst, _data_only(check_wal), _whole, _repair_sst),
        Target("bloom", corpus.bloom_section, _data_only(check_bloom)),
        Target("boundary", corpus.boundary, _data_only(check_boundary)),
        Target("latest-pointer", corpus.pointer, _data_only(check_pointer)),
        Target(
            "shard-map", corpus.shard_map, _data_only(check_shard_map), _envelope_region, _reseal
        ),
        Target("envelope", corpus.sealed, _data_only(check_envelope), _envelope_region, _reseal),
    )
}


def seed_pool(target: Target, count: int = 32, seed: int = 0) -> list[bytes]:
    return corpus.seeds(target.generate, count, seed)


def run_case(
    target: Target, pool: Sequence[bytes], index: int, mutations: Sequence[Mutation], repair: bool
) -> str:
    """Build one input and check it; OK or CORRUPT, or the finding propagates."""
    data = target.make_input(pool, index, mutations, repair)
    return target.check(data, pool[index % len(pool)])


def random_case(rng: random.Random, pool_size: int) -> tuple[int, list[Mutation], bool]:
    """One fuzz case for the long run: a seed, 0-4 stacked mutations, repair on 80% of inputs."""
    n = rng.choice((0, 1, 1, 1, 2, 2, 3, 4))
    return rng.randrange(pool_size), [random_mutation(rng) for _ in range(n)], rng.random() < 0.8
