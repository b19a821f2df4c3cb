"""Every decoder of stored bytes, fuzzed for memory: peak allocation stays linear in the input.

Issue 39, item 5: crafted objects made readers allocate without bound (a manifest naming one view
N times, a zstd block declaring gigabytes). Each target of :mod:`tests.fuzz.targets` runs on
mutated seeds (the ``alias`` mutation makes FlatBuffers offsets share one table) under
tracemalloc; the peak must stay within ``FACTOR * len(input) + SLACK``, plus one largest data
block (:data:`MAX_BLOCK_BYTES`, what the format lets a single block hold) for the SST targets.
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from slatedb_core.compactor.compactions import CompactionRecord, CompactionsState, encode_state
from slatedb_core.keys import BytesBound, BytesRange
from slatedb_core.manifest.codec import encode_manifest
from slatedb_core.manifest.model import CompactedSst, Manifest, SstInfo, SstView
from slatedb_core.manifest.tables import MANIFEST_OURS
from slatedb_core.sst.format import MAX_BLOCK_BYTES
from tests.fuzz.mutate import OPS, Mutation
from tests.fuzz.targets import CORRUPT, OK, TARGETS, seed_pool
from tests.manifest.fbtools import drop_slot

FACTOR = 256  # the checks build Python lists of every row: tens of bytes per stored byte
SLACK = 8 << 20
BLOCKS = {"sst", "sst-ranged", "wal-sst"}
POOLS = {name: seed_pool(t, 16, seed=2) for name, t in TARGETS.items()}

mutations = st.tuples(
    st.sampled_from(OPS + ("alias",) * 4),  # aliasing is the attack here: drawn more often
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 16),
    st.binary(max_size=64),
)
cases = st.tuples(st.integers(0, 15), st.lists(mutations, min_size=1, max_size=3), st.booleans())


def _bound(name: str, size: int) -> int:
    return FACTOR * size + SLACK + (MAX_BLOCK_BYTES if name in BLOCKS else 0)


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases)
def test_decoder_peak_memory_is_linear_in_its_input(
    name: str, case: tuple[int, list[Mutation], bool]
) -> None:
    index, muts, repair = case
    target, pool = TARGETS[name], POOLS[name]
    data = target.make_input(pool, index, muts, repair)
    tracemalloc.start()
    try:
        outcome = target.check(data, pool[index % len(pool)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert outcome in (OK, CORRUPT)
    assert peak <= _bound(name, len(data)), f"{name}: peak {peak} for {len(data)} input bytes"


BIG = 60_000
N = 1500
FB_FACTOR = 32  # FlatBuffers decoders copy at most twice their input, plus the model objects


def _big_seed(name: str) -> bytes:
    """A seed with one large blob (a 60 KB range key, a 60 KB error) among N small tables."""
    if name == "compactions":
        records = tuple(
            CompactionRecord(
                id=ULID.from_int(i + 1),
                kind="l0",
                source_view_ids=(),
                source_run_ids=(),
                destination=0,
                status="failed",
                error="e" * BIG if i == 0 else "",
            )
            for i in range(N)
        )
        return encode_state(CompactionsState(compactor_epoch=1, compactions=records))
    sst = CompactedSst(ULID(), SstInfo(first_key=b"a", last_key=b"z"))
    big = SstView(
        ULID(), sst.id, BytesRange(BytesBound.included(b"k" * BIG), BytesBound.unbounded())
    )
    views = (big, *(SstView(ULID.from_int(i + 1), sst.id) for i in range(N - 1)))
    data = encode_manifest(Manifest(ssts=(sst,), l0=views), manifest_id=1)
    return drop_slot(data, MANIFEST_OURS) if name == "manifest-slatedb" else data


def _vectors(data: bytes) -> list[tuple[int, int]]:
    """(position, count) of what looks like a vector of at least 16 forward offsets, all inside
    the buffer (FlatBuffers aligns them to 4 after the 2-byte version prefix)."""
    found = []
    for pos in range(2, len(data) - 8, 4):
        count = int.from_bytes(data[pos : pos + 4], "little")
        if not 16 <= count <= (len(data) - pos - 4) // 4:
            continue
        slots = range(pos + 4, pos + 4 + 4 * count, 4)
        if all(at + int.from_bytes(data[at : at + 4], "little") < len(data) for at in slots):
            found.append((pos, count))
    return found


@pytest.mark.parametrize("name", ["manifest", "manifest-slatedb", "compactions"])
def test_aliasing_each_vector_of_a_large_seed_stays_bounded(name: str) -> None:
    """Each vector of a seed in turn has all its elements name its first one's table (the
    reported attack, found without knowing the schema): the decoder copies at most a few times
    the input, and refuses the object or reads it whole."""
    target, seed = TARGETS[name], _big_seed(name)
    vectors = _vectors(seed)
    assert any(count >= N for _, count in vectors)  # the L0 / records vector is among them
    for pos, count in vectors:
        data = target.make_input([seed], 0, [("alias", pos + 4, count - 1, b"all")], True)
        tracemalloc.start()
        try:
            outcome = target.check(data, seed)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert outcome in (OK, CORRUPT)
        bound = FB_FACTOR * len(data) + SLACK
        assert peak <= bound, f"{name}, vector at {pos}: peak {peak >> 20} MiB > {bound >> 20}"
