"""Review of issue 38 (compaction): the all-versions merge over inputs larger than its buffers.

``merge_versions`` buffers about 8192 rows per source and works in rounds bounded by the
smallest last buffered key, with a pass-through for long stretches of one source and a
"read further" step when every buffered row sits at the bound. The unit tests of
tests/compactor/test_retention.py use at most a few hundred rows, so every source is read to its
end by the first fill and only the final round runs. Here each source holds tens of thousands of
rows, in batches cut anywhere (inside a key's versions too), a few keys with more versions than
a buffer, so that every branch runs; the output must be the sorted rows, every version of a key
in one batch, and with a policy exactly what ``retain`` keeps of the whole sorted input."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.lsm.merge_operator import string_append
from slatedb_core.lsm.retention import Retention, retain
from slatedb_core.lsm.row_model import KIND_MERGE, KIND_TOMBSTONE, KIND_VALUE, ROW_SCHEMA
from slatedb_core.lsm.versions_merge import merge_versions


def _rows(rng: random.Random, nkeys: int) -> list[tuple[bytes, int, int, bytes | None, int | None]]:
    rows = []
    seq = 10_000_000
    for k in range(nkeys):
        key = b"k%07d" % k
        nv = rng.choice([1, 1, 1, 2, 3, 5]) if rng.random() > 0.0005 else rng.randint(9000, 12000)
        for _ in range(nv):
            kind = rng.choice([KIND_VALUE, KIND_VALUE, KIND_TOMBSTONE, KIND_MERGE])
            expire = rng.choice([None, None, 50, 500])
            rows.append((key, seq, kind, None if kind == KIND_TOMBSTONE else b"v%d" % seq, expire))
            seq -= 1
    # keys ascending, versions newest first; seq distinct
    return rows


def _batch(rows: list[tuple[bytes, int, int, bytes | None, int | None]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [r[0] for r in rows],
            "seq": [r[1] for r in rows],
            "kind": [r[2] for r in rows],
            "value": [r[3] for r in rows],
            "expire_ts": [r[4] for r in rows],
            "create_ts": [None] * len(rows),
        },
        schema=ROW_SCHEMA,
    )


def _sources(
    rng: random.Random, rows: list[tuple[bytes, int, int, bytes | None, int | None]], n: int
) -> list[list[pa.RecordBatch]]:
    """``n`` sources, newest first: each row goes to the source of its seq band (a well-formed
    tree: a key's newer versions in newer sources), each source cut into batches anywhere."""
    seqs = sorted(r[1] for r in rows)
    cuts = sorted(rng.sample(seqs, n - 1))
    out: list[list[pa.RecordBatch]] = []
    hi = None
    for c in reversed([None, *cuts]):
        part = [r for r in rows if (c is None or r[1] >= c) and (hi is None or r[1] < hi)]
        hi = c
        batches = []
        i = 0
        while i < len(part):
            m = rng.choice([1, 7, 300, 2500, 9000])
            batches.append(_batch(part[i : i + m]))
            i += m
        out.append(batches)
    return out


@pytest.mark.parametrize("seed", range(2))
def test_merge_rounds_keep_every_version_and_retain_as_a_whole(seed: int) -> None:
    """Found by the review of issue 38 (was review/test_issue38_compaction_merge_rounds.py)."""
    rng = random.Random(seed)
    rows = _rows(rng, 12_000)
    sources = _sources(rng, rows, rng.randint(2, 4))
    assert sum(b.num_rows for s in sources for b in s) == len(rows)
    whole = _batch(rows)

    out = list(merge_versions(sources))
    got = pa.Table.from_batches([b.select(range(5)) for b in out])
    assert got.column("key").to_pylist() == whole.column(0).to_pylist()
    assert got.column("seq").to_pylist() == whole.column(1).to_pylist()
    seen: set[bytes] = set()
    for b in out:  # every version of a key in one batch
        keys = set(np.unique(np.asarray(b.column(0).to_pylist(), dtype=object)).tolist())
        assert not keys & seen
        seen |= keys

    for p in (
        Retention(
            now_ms=100, retention_min_seq=None, drop_tombstones=True, merge_operator=string_append
        ),
        Retention(
            now_ms=100, retention_min_seq=10_000_000 - len(rows) // 2, merge_operator=string_append
        ),
    ):
        want = retain(whole, p)
        fused = pa.Table.from_batches(
            [b for b in merge_versions(_sources(random.Random(seed), rows, len(sources)), p)]
        )
        assert fused.to_pylist() == pa.Table.from_batches([want]).to_pylist()
