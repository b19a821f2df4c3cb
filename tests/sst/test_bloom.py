from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.bloom import (
    BloomFilter,
    bloom_from_filter_block,
    build_bloom,
    build_filter_block,
    hash_key,
    hash_keys,
    num_probes,
)
from tests.sst import batch_of


def concat(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offs = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(k) for k in keys], out=offs[1:])
    return np.frombuffer(b"".join(keys), dtype=np.uint8), offs


def counter_keys(n: int, odd: bool = False) -> list[bytes]:
    return [b"user:" + (2 * i + odd).to_bytes(8, "big") for i in range(n)]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=40))
def test_single_key_hash_equals_the_batch_hash_for_any_lengths(keys: list[bytes]) -> None:
    data, offs = concat(keys)
    assert hash_keys(data, offs).tolist() == [hash_key(k) for k in keys]


@pytest.mark.parametrize("width", [1, 7, 8, 12, 16, 65, 300])
def test_fixed_width_fast_path_agrees_with_the_single_key_hash(width: int) -> None:
    rng = np.random.default_rng(width)
    keys = [rng.bytes(width) for _ in range(50)]
    data, offs = concat(keys)
    base = np.concatenate([np.zeros(3, np.uint8), data])  # keys not at the start of the buffer
    assert hash_keys(base, offs + 3).tolist() == [hash_key(k) for k in keys]


def test_trailing_and_leading_zero_bytes_change_the_hash() -> None:
    hashes = {
        hash_key(k) for k in (b"a", b"a\x00", b"\x00a", b"a\x00\x00", b"\x00" * 8, b"\x00" * 9)
    }
    assert len(hashes) == 6


def test_probe_count_and_filter_size_follow_slatedb() -> None:
    """k = int(f32(bits) * 0.69) probes; ceil(n * bits / 8) bytes after the u16 probe count."""
    assert [num_probes(b) for b in (1, 2, 5, 10, 16)] == [0, 1, 3, 6, 11]
    data = build_bloom(hash_keys(*concat(counter_keys(1001))), 10)
    assert data[:2] == (6).to_bytes(2, "big") and len(data) == 2 + 1252
    block = build_filter_block(hash_keys(*concat(counter_keys(3))), 10)
    assert block[:7] == b"\x00\x01\x00\x03_bf" and int.from_bytes(block[7:15], "big") == 6


def test_a_composite_block_without_a_bloom_filter_of_ours_has_none() -> None:
    other = b"\x00\x01\x00\x03xyz" + (3).to_bytes(8, "big") + b"abc"
    assert bloom_from_filter_block("t", other, True) is None
    with pytest.raises(CorruptionError):
        bloom_from_filter_block("t", other[:-1], True)


def test_false_positive_rate_is_near_one_percent_at_ten_bits_per_key() -> None:
    members = counter_keys(50_000)
    bf = BloomFilter("t", build_bloom(hash_keys(*concat(members)), 10))
    assert all(bf.may_contain(k) for k in members[::7])  # no false negatives
    others = counter_keys(50_000, odd=True)
    rate = sum(bf.may_contain(k) for k in others) / len(others)
    assert 0.004 < rate < 0.015, rate


def test_fewer_bits_per_key_give_more_false_positives() -> None:
    members, others = counter_keys(20_000), counter_keys(20_000, odd=True)
    rates = []
    for bits in (2, 5, 10, 16):
        bf = BloomFilter("t", build_bloom(hash_keys(*concat(members)), bits))
        rates.append(sum(bf.may_contain(k) for k in others) / len(others))
    assert rates == sorted(rates, reverse=True) and rates[-1] < 0.002


def test_the_reader_consults_the_filter_and_zero_bits_disables_it() -> None:
    entries = [(k, 1, 0, b"v") for k in counter_keys(2000)]
    with_bloom = SstReader.from_bytes(encode_sst(batch_of(entries))[0], "t")
    no_bloom_data, info = encode_sst(batch_of(entries), SstOptions(bloom_bits_per_key=0))
    no_bloom = SstReader.from_bytes(no_bloom_data, "t")
    assert info.filter_len == 0
    absent = counter_keys(2000, odd=True)[:-1]  # all inside the SST's key range
    assert all(no_bloom.may_contain(k) for k in absent)
    assert sum(with_bloom.may_contain(k) for k in absent) < 60
    assert not with_bloom.may_contain(b"a") and not with_bloom.may_contain(b"zzz")


def test_a_damaged_filter_section_is_corruption() -> None:
    for bad in (b"", b"\x00"):
        with pytest.raises(CorruptionError):
            BloomFilter("t", bad)


@settings(max_examples=60, deadline=None)
@given(hashes=st.lists(st.integers(0, 2**64 - 1), max_size=50), bits=st.integers(1, 64))
def test_filter_bits_are_exactly_the_probes_of_slatedbs_double_hashing(
    hashes: list[int], bits: int
) -> None:
    data = build_bloom(np.asarray(hashes, dtype=np.uint64), bits)
    k = num_probes(bits)
    m = 8 * (len(data) - 2)
    want = bytearray(m // 8)
    for x in hashes:  # SlateDB's probe sequence, in Python integers
        h, d = (x & 0xFFFFFFFF) % m, (x >> 32) % m
        for i in range(k):
            d = (d + i) % m
            want[h // 8] |= 1 << (h % 8)
            h = (h + d) % m
    assert data == k.to_bytes(2, "big") + bytes(want)
