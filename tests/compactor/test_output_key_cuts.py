"""A compaction's output SSTs end between keys, never inside a key's versions (issue 38: a
compaction keeps several versions of a key for SlateDB's snapshots, and a sorted run's SSTs
must not overlap: the second SST of a cut key would start at the key the first ends with)."""

from __future__ import annotations

import itertools
import random

import pyarrow as pa

from slatedb_core.compactor.output_ssts import split_stream
from slatedb_core.lsm.row_model import ENTRY_SCHEMA


def batches(rng: random.Random) -> tuple[list[pa.RecordBatch], list[tuple[bytes, int]]]:
    rows: list[tuple[bytes, int]] = []
    seq = 10_000
    for k in range(60):
        for _ in range(rng.randint(1, 5)):
            rows.append((b"k%03d" % k, seq))
            seq -= 1
    out = []
    i = 0
    while i < len(rows):
        n = rng.randint(1, 7)
        part = rows[i : i + n]
        out.append(
            pa.RecordBatch.from_pydict(
                {
                    "key": [k for k, _ in part],
                    "seq": [s for _, s in part],
                    "kind": [0] * len(part),
                    "value": [b"v" * 20] * len(part),
                },
                schema=ENTRY_SCHEMA,
            )
        )
        i += n
    return out, rows


def test_ssts_end_between_keys() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        bs, rows = batches(rng)
        ssts: list[list[tuple[bytes, int]]] = [[]]
        for piece, ends in split_stream(bs, target=rng.randint(40, 400)):
            ssts[-1] += list(
                zip(piece.column(0).to_pylist(), piece.column(1).to_pylist(), strict=True)
            )
            if ends:
                ssts.append([])
        assert [r for s in ssts for r in s] == rows
        full = [s for s in ssts if s]
        assert len(full) > 1
        for a, b in itertools.pairwise(full):
            assert a[-1][0] < b[0][0], f"seed {seed}: an SST boundary inside key {a[-1][0]!r}"
