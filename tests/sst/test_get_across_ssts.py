"""One key object looked up in several overlapping SSTs in turn answers what each SST's scan reads.

Issue 42, goal 1: a point read walks L0 newest first (``DbState._get_sst``), passing the same
key object to each SST's ``get``; once one SST missed it, the next ones probe their bloom filter
with the key's hash (computed once, ``reader._hash_of``) before the block cache, and a block's
first few lookups (``raw_block.PREFIX_AT``) each run a checked binary search before its restart
keys' prefixes are built. Properties over random overlapping SSTs sharing one block cache (tiny
and larger blocks, tombstones, several versions of a key, cold and warm cache): each SST's
``get`` of a present or absent key, asked in the walk's order, is the row its scan holds; and
the first SST holding a key answers the key's newest row across them, as the walk reads it.
A bloom filter answers the same whether its bits are copied or viewed where they were read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.bloom import BloomFilter, build_bloom, hash_key, hash_keys
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.format import ROW_SCHEMA
from slatedb_core.sst.raw_block import CHECK_AT

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_KEY = st.binary(min_size=1, max_size=12)
Entry = tuple[int, int, bytes]


def _sst(rows: dict[bytes, list[tuple[int, int, bytes]]], block_size: int) -> bytes:
    keys: list[bytes] = []
    seqs: list[int] = []
    kinds: list[int] = []
    values: list[bytes] = []
    for k in sorted(rows):
        for seq, kind, v in sorted(rows[k], reverse=True):  # newest first
            keys.append(k)
            seqs.append(seq)
            kinds.append(kind)
            values.append(b"" if kind == 1 else v)
    n = len(keys)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(seqs, pa.uint64()),
            pa.array(kinds, pa.uint8()),
            pa.array(values, pa.binary()),
            pa.array([None] * n, pa.int64()),
            pa.array([None] * n, pa.int64()),
        ],
        schema=ROW_SCHEMA,
    )
    blob, _ = encode_sst(batch, SstOptions(block_size=block_size, restart_interval=1))
    return blob


def _model(reader: SstReader) -> dict[bytes, Entry]:
    out: dict[bytes, Entry] = {}
    for batch in reader.scan():
        cols = [batch.column(i).to_pylist() for i in range(4)]
        for k, s, kind, v in zip(*cols, strict=True):
            out.setdefault(k, (s, kind, v))  # the first row of a key is its newest
    return out


@SETTINGS
@given(
    tables=st.lists(
        st.dictionaries(
            _KEY,
            st.lists(st.tuples(st.integers(0, 1), st.binary(max_size=20)), min_size=1, max_size=3),
            min_size=1,
            max_size=80,
        ),
        min_size=2,
        max_size=4,
    ),
    block_size=st.sampled_from([1, 64, 512, 4096]),
    absent=st.lists(_KEY, max_size=20),
)
def test_a_key_walked_through_overlapping_ssts_answers_each_ssts_row(
    tables: list[dict[bytes, list[tuple[int, bytes]]]], block_size: int, absent: list[bytes]
) -> None:
    seq = 0
    ssts = []
    for t in tables:  # oldest first: later tables' rows get higher seqs
        rows: dict[bytes, list[tuple[int, int, bytes]]] = {}
        for k, versions in t.items():
            for kind, v in versions:
                seq += 1
                rows.setdefault(k, []).append((seq, kind, v))
        ssts.append(_sst(rows, block_size))
    ssts.reverse()  # newest first, as L0 is walked
    cache = BlockCache(1 << 24)
    readers = [SstReader.from_bytes(b, f"l0/{i}.sst", cache=cache) for i, b in enumerate(ssts)]
    models = [_model(SstReader.from_bytes(b, "m")) for b in ssts]
    asked = sorted({k for t in tables for k in t} | set(absent))
    for _ in range(CHECK_AT + 2):  # cold, the lazy lookups, the prefix ones, after the check
        for key in asked:
            k = bytes(bytearray(key))  # one new key object per walk, as a get passes it
            newest = None
            for r, m in zip(readers, models, strict=True):
                got = r.get(k)
                assert got == m.get(k)
                if newest is None:
                    newest = got
            want = next((m[k] for m in models if k in m), None)
            assert newest == want


@SETTINGS
@given(keys=st.lists(_KEY, min_size=1, max_size=200, unique=True), pad=st.integers(0, 3))
def test_a_bloom_filter_answers_the_same_copied_or_viewed(keys: list[bytes], pad: int) -> None:
    lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    offs = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    filt = build_bloom(hash_keys(data, offs), 10)
    big = b"\0" * (pad * len(filt)) + filt  # pad 0-1: viewed in place; 2-3: copied out
    viewed = BloomFilter("v", memoryview(big)[pad * len(filt) :])
    copied = BloomFilter("c", filt)
    probes = [*keys, *(k + b"x" for k in keys)]
    assert [viewed.may_contain_hash(hash_key(k)) for k in probes] == [
        copied.may_contain_hash(hash_key(k)) for k in probes
    ]
    assert all(viewed.may_contain(k) for k in keys)
    assert viewed.may_contain_keys(probes) == copied.may_contain_keys(probes)
