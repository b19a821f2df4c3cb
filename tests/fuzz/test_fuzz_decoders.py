"""Every decoder of stored bytes, fuzzed: a sane value or ``CorruptionError``, nothing else.

The default run draws a few hundred derandomized hypothesis examples per target (a few thousand
inputs, a few seconds); ``python -m tests.fuzz.run --inputs 100000`` is the long campaign over the
same targets, checks and mutations. The regression tests at the bottom pin the inputs that broke
decoders before they were fixed.
"""

from __future__ import annotations

import json
import random
import uuid
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.compactor.compactions import MAGIC as COMPACTIONS_MAGIC
from slatedb_core.compactor.compactions import decode_state, encode_state
from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.codec import decode_manifest
from slatedb_core.meta import envelope
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.table.shardmap import decode_shard_map
from tests.fuzz import corpus
from tests.fuzz.mutate import OPS, Mutation, apply, repair_sst
from tests.fuzz.run import main as run_main
from tests.fuzz.targets import CORRUPT, OK, TARGETS, run_case, seed_pool

EXAMPLES = 250
POOLS = {name: seed_pool(t, 32, seed=1) for name, t in TARGETS.items()}

mutations = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, 1 << 20),
    st.integers(0, 1 << 16),
    st.binary(max_size=200),
)
cases = st.tuples(st.integers(0, 31), st.lists(mutations, max_size=4), st.booleans())


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases)
def test_decoder_returns_sane_value_or_raises_corruption(
    name: str, case: tuple[int, list[Mutation], bool]
) -> None:
    index, muts, repair = case
    assert run_case(TARGETS[name], POOLS[name], index, muts, repair) in (OK, CORRUPT)


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(data=st.binary(max_size=4096))
def test_decoder_survives_random_bytes(name: str, data: bytes) -> None:
    target = TARGETS[name]
    assert target.check(data, POOLS[name][0]) in (OK, CORRUPT)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_unmutated_seeds_decode(name: str) -> None:
    """The pool itself must decode, otherwise every mutation of it tests nothing."""
    target = TARGETS[name]
    outcomes = [run_case(target, POOLS[name], i, [], True) for i in range(32)]
    assert outcomes.count(OK) >= 24, outcomes


def test_mutations_reach_past_the_checksums() -> None:
    """Repair must make most single mutations of an SST reach the structural checks: if this
    fails, the fuzzing only ever exercises the CRC comparison."""
    pool, rng = POOLS["sst"], random.Random(7)
    reasons: set[str] = set()
    for _ in range(400):
        data = repair_sst(apply(pool[rng.randrange(len(pool))], ("flip", rng.randrange(1 << 20),
                                                                   rng.randrange(8), b""), pool))
        try:
            SstReader.from_bytes(data, "x").read_all()
        except CorruptionError as e:
            reasons.add(e.reason.split(":")[0][:30])
    assert len([r for r in reasons if "checksum" not in r]) >= 5, reasons


def test_long_run_cli_reports_inputs_and_no_findings(capsys: pytest.CaptureFixture[str]) -> None:
    total = 20 * len(TARGETS)
    assert run_main(["--inputs", str(total), "--seed", "3", "--pool", "8"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert last[:2] == ["total", str(total)] and last[4] == "0"  # inputs, and no findings


# ------------------------------------------------------------------------------- regressions

def _sealed_compactions(body: bytes) -> bytes:
    return envelope.seal(COMPACTIONS_MAGIC, 1, body)


def _record() -> dict[str, object]:
    state = corpus.compactions_model(random.Random(5))
    while not state.compactions:
        state = corpus.compactions_model(random.Random(len(state.compactions) + 6))
    doc = json.loads(envelope.open_sealed(encode_state(state), magic=COMPACTIONS_MAGIC, name="x",
                                          versions=frozenset({1})).payload)
    record: dict[str, object] = doc["compactions"][0]
    return record


@pytest.mark.parametrize(
    "body",
    [
        b'{"compactor_epoch": Infinity, "compactions": []}',  # was OverflowError
        b'{"compactor_epoch": 1e400, "compactions": []}',  # was OverflowError
        b"[" * 50_000 + b"]" * 50_000,  # was RecursionError
        b'{"compactor_epoch": -1, "compactions": []}',  # was accepted: not a u64
        b'{"compactor_epoch": 18446744073709551616, "compactions": []}',  # was accepted
        b'{"compactor_epoch": "12", "compactions": []}',  # was read as 12
        b'{"compactor_epoch": true, "compactions": []}',  # was read as 1
        b'{"compactor_epoch": 1, "compactions": "abc"}',
    ],
)
def test_compactions_garbage_fields_are_corruption(body: bytes) -> None:
    with pytest.raises(CorruptionError):
        decode_state(_sealed_compactions(body), "x")


@pytest.mark.parametrize(
    ("field", "value"),
    [("destination", 1.5), ("source_run_ids", [True]), ("error", {"a": 1}), ("id", 5),
     ("source_view_ids", {"a": 1}), ("created_at_ms", -1)],
)
def test_compactions_record_fields_are_read_strictly(field: str, value: object) -> None:
    record = dict(_record(), **{field: value})
    body = json.dumps({"compactor_epoch": 1, "compactions": [record]}).encode()
    with pytest.raises(CorruptionError):
        decode_state(_sealed_compactions(body), "x")


def test_sst_block_with_unsorted_keys_under_a_valid_crc_is_corruption() -> None:
    """Make the second key of a block sort before the first and fix the CRC: the lookup would
    bisect past rows a scan returns. The reader must call it corruption."""
    from slatedb_core.lsm.entries import batch_from_lists

    batch = batch_from_lists([b"ka", b"kb", b"kc"], [1, 2, 3], [0, 0, 0], [b"1", b"2", b"3"])
    data, info = encode_sst(batch, SstOptions(bloom_bits_per_key=0))
    at = data.index(b"\x01\x01\x01b2")  # row 1: shares "k", suffix "b", value "2"
    broken = bytearray(data)
    broken[at + 3] = ord("0")  # "k0" < "ka"
    end = info.index_offset  # the one data block ends where the index starts
    broken[end - 4 : end] = zlib.crc32(bytes(broken[: end - 4])).to_bytes(4, "big")
    with pytest.raises(CorruptionError, match="not in order"):
        SstReader.from_bytes(bytes(broken), "x").read_all()


def test_manifest_under_another_format_version_is_corruption() -> None:
    data = corpus.manifest(random.Random(3))
    with pytest.raises(CorruptionError, match="version"):
        decode_manifest(b"\x00\x01" + data[2:], name="x")


def _shard_map_doc() -> dict[str, object]:
    data = corpus.shard_map(random.Random(2))
    doc: dict[str, object] = json.loads(
        envelope.open_sealed(data, magic=b"SDBT", name="x", versions=frozenset({1})).payload
    )
    return doc


@pytest.mark.parametrize(
    "change",
    [
        {"next_shard_id": float("inf")},  # was OverflowError
        {"pending": [{"op_id": str(uuid.UUID(int=1)), "kind": "split", "sources": [],
                      "targets": [], "started_at": 1.0}]},  # was IndexError in layout_problem
    ],
)
def test_shard_map_garbage_is_corruption(change: dict[str, object]) -> None:
    body = json.dumps({**_shard_map_doc(), **change}).encode()
    with pytest.raises(CorruptionError):
        decode_shard_map(envelope.seal(b"SDBT", 1, body), map_id=1, table_path=corpus.TABLE,
                         name="x")


def test_deeply_nested_shard_map_is_corruption() -> None:
    body = b'{"shards": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # was RecursionError
    with pytest.raises(CorruptionError):
        decode_shard_map(envelope.seal(b"SDBT", 1, body), map_id=1, table_path=corpus.TABLE,
                         name="x")
