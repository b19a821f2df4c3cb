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

from slatedb_core.compactor.compactions import decode_state
from slatedb_core.compactor.compactions_codec import (
    COMPACTION,
    COMPACTIONS,
    CONTEXT,
    SUBCOMPACTION,
    TIERED_SPEC,
    WORKER,
)
from slatedb_core.errors import CorruptionError
from slatedb_core.manifest.codec import decode_manifest
from slatedb_core.manifest.flatbuf import FbWriter
from slatedb_core.manifest.tables import BOUND, RANGE, ULID_TABLE
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
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
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
        data = repair_sst(
            apply(
                pool[rng.randrange(len(pool))],
                ("flip", rng.randrange(1 << 20), rng.randrange(8), b""),
                pool,
            )
        )
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


def _slatedb_style_compactions(
    *, status: int = 1, spec_type: int = 1, bound: int = 2, worker: bytes = b"w"
) -> bytes:
    """A ``.compactions`` object as SlateDB writes it (no checksum of ours to stop damage)."""
    w = FbWriter()
    start = w.table(BOUND, (w.blob(b"k"), bound))
    rng = w.table(RANGE, (start, w.table(BOUND, (None, 1))))
    ctx = w.table(CONTEXT, (w.tables([w.table(SUBCOMPACTION, (rng,))]), 5))
    wid = w.blob(worker)  # a string is a byte vector and a NUL (here the padding after it)
    wk = w.table(WORKER, (wid, 7))
    spec = w.table(TIERED_SPEC, (None, w.u32s([3]), None, w.blob(b""), 3))
    c = w.table(
        COMPACTION, (w.pair(ULID_TABLE, 1, 2), spec_type, spec, status, w.tables([]), wk, 1, ctx)
    )
    return b"\x00\x02" + w.finish(w.table(COMPACTIONS, (1, w.tables([c]))))


@pytest.mark.parametrize(
    "data",
    [
        _slatedb_style_compactions(status=6),  # no such CompactionStatus
        _slatedb_style_compactions(spec_type=3),  # no such CompactionSpec
        _slatedb_style_compactions(bound=0),  # BoundType Unknown
        _slatedb_style_compactions(bound=1),  # Unbounded with a key: SlateDB refuses it too
        b"\x00\x03" + _slatedb_style_compactions()[2:],  # format version 3
        _slatedb_style_compactions()[:-8],  # cut short
        b"\x00",
    ],
)
def test_compactions_structural_damage_is_corruption(data: bytes) -> None:
    with pytest.raises(CorruptionError):
        decode_state(data, "x")


def test_compactions_worker_id_must_be_utf8() -> None:
    """SlateDB's worker ids are FlatBuffers strings: bytes that are not UTF-8 are damage."""
    assert decode_state(_slatedb_style_compactions(), "x").compactions[0].status == "running"
    with pytest.raises(CorruptionError):
        decode_state(_slatedb_style_compactions(worker=b"\xff\xfe"), "x")


@pytest.mark.parametrize(
    ("interval", "row", "suffix_at"),
    [
        (16, b"\x01\x01\x01b2", 3),  # row 1 shares "k": suffix "b", value "2"
        (1, b"\x00\x02\x01kb2", 4),  # every row a restart point: key "kb" whole
    ],
)
def test_sst_block_with_unsorted_keys_under_a_valid_crc_is_corruption(
    interval: int, row: bytes, suffix_at: int
) -> None:
    """Make the second key of a block sort before the first and fix the CRC: the lookup would
    bisect past rows a scan returns. The reader must call it corruption."""
    from slatedb_core.lsm.entries import batch_from_lists

    batch = batch_from_lists([b"ka", b"kb", b"kc"], [1, 2, 3], [0, 0, 0], [b"1", b"2", b"3"])
    data, info = encode_sst(batch, SstOptions(bloom_bits_per_key=0, restart_interval=interval))
    at = data.index(row)
    broken = bytearray(data)
    broken[at + suffix_at] = ord("0")  # "k0" < "ka"
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
        {
            "pending": [
                {
                    "op_id": str(uuid.UUID(int=1)),
                    "kind": "split",
                    "sources": [],
                    "targets": [],
                    "started_at": 1.0,
                }
            ]
        },  # was IndexError in layout_problem
    ],
)
def test_shard_map_garbage_is_corruption(change: dict[str, object]) -> None:
    body = json.dumps({**_shard_map_doc(), **change}).encode()
    with pytest.raises(CorruptionError):
        decode_shard_map(
            envelope.seal(b"SDBT", 1, body), map_id=1, table_path=corpus.TABLE, name="x"
        )


def test_deeply_nested_shard_map_is_corruption() -> None:
    body = b'{"shards": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # was RecursionError
    with pytest.raises(CorruptionError):
        decode_shard_map(
            envelope.seal(b"SDBT", 1, body), map_id=1, table_path=corpus.TABLE, name="x"
        )
