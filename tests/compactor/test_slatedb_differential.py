"""Review of issue 38 (items 1-3, compaction): SlateDB's compactor and ours, differentially.

A random history (puts, deletes, merge operands, puts and operands with a TTL, ``DbSnapshot``s
held open, memtable flushes) is written by SlateDB 0.17's own engine (the ``slatedb`` wheel,
``string_append`` merge operator). The database is then copied to a twin directory, SlateDB's
compactor compacts the original (a compaction submitted through its ``Admin``: all L0 views into
a sorted run) and ours compacts the twin from the same manifest. Both outputs must hold the same
rows: (key, seq, kind, value, expire_ts, create_ts), every version. A second stage writes more
on top (L0 over a sorted run, versions of a key in both), compacts L0 into a second run, then
both runs into one, on both sides.

The twin is a file copy, so this runs on the local filesystem only (the S3 side of the same
code paths is covered by tests/interop/test_compaction_data_model.py)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.compactor import run_compaction_once
from slatedb_core.options import CompactorOptions
from slatedb_core.store.url import open_store
from tests.interop.oracle import DB, Oracle, SlateWriter
from tests.interop.oracle_compaction import Row, open_merge_db, tree_rows
from tests.interop.oracle_merge import slatedb_write

pytestmark = [pytest.mark.slatedb, pytest.mark.slow]


KEYS = [b"a", b"b", b"c"]


LONG = 3_600_000


_key = st.sampled_from(KEYS)


_val = st.sampled_from([b"1", b"2", b"x"])


_ttl = st.sampled_from([None, None, 1, LONG])


_step: st.SearchStrategy[object] = st.one_of(
    st.tuples(st.just("put"), _key, _val, _ttl),
    st.tuples(st.just("merge"), _key, _val, _ttl),
    st.tuples(st.just("delete"), _key, st.none(), st.none()),
    st.just(("snapshot",)),
    st.just(("flush",)),
    st.just(("sleep",)),
)


_history = st.lists(_step, min_size=1, max_size=14)


def _play(w: SlateWriter, steps: list[object], snaps: list[sdb.DbSnapshot]) -> None:
    flushes = 0
    for s in steps:
        assert isinstance(s, tuple)
        if s[0] == "snapshot":
            snaps.append(w.snapshot())
        elif s[0] == "flush":
            if flushes < 3:  # SlateDB stalls writes at l0_max_ssts
                w.flush_memtable()
                flushes += 1
        elif s[0] == "sleep":
            time.sleep(0.005)  # 1 ms TTLs written before are past their expiry
        else:
            slatedb_write(w, [s])
    w.put(b"~tick", b"")  # every stage leaves an L0 SST
    w.flush_memtable()


def _compact_slatedb(oracle: Oracle, sources: list[sdb.SourceId], runs_after: int) -> None:
    """Submit one compaction of ``sources`` to SlateDB's compactor; wait until L0 is empty and
    ``runs_after`` sorted runs remain."""
    admin = oracle.admin()
    destination = 0 if runs_after == 1 else runs_after - 1
    oracle.run(admin.admin.submit_compaction(sdb.CompactionSpec.TIERED(b"", sources, destination)))
    admin.wait_until(lambda m: not m.l0 and len(m.compacted) == runs_after)


def _runs(root: Path) -> dict[str, list[Row]]:
    return {k: v for k, v in tree_rows(open_store(str(root))).items() if k != "l0"}


def _twin(root: Path) -> Path:
    twin = Path(tempfile.mkdtemp(dir=root.parent))
    shutil.copytree(root / DB, twin / DB)
    return twin


OURS_L0 = CompactorOptions(l0_trigger=1, min_merge_width=100, merge_operator="string_append")


OURS_RUNS = CompactorOptions(
    l0_trigger=100, min_merge_width=2, size_ratio=1e9, merge_operator="string_append"
)


def _differential(root: Path, first: list[object], second: list[object]) -> None:
    oracle = Oracle(root)
    snaps: list[sdb.DbSnapshot] = []
    try:
        w = open_merge_db(
            oracle,
            compactor=True,
            compactor_options__scheduler_options={"min_compaction_sources": "1000"},
        )
        # stage 1: every L0 view into run 0 (tombstones dropped at the bottom)
        _play(w, first, snaps)
        twin = _twin(root)
        admin = oracle.admin()
        l0 = [sdb.SourceId.SST_VIEW(v.id) for v in admin.latest().l0]
        _compact_slatedb(oracle, l0, 1)
        assert run_compaction_once(DB, open_store(str(twin)), OURS_L0) is not None
        theirs, ours = _runs(root), _runs(twin)
        assert list(theirs.values()) == list(ours.values()), (theirs, ours)

        # stage 2: L0 over run 0 -> run 1; then runs 1 and 0 -> one run
        _play(w, second, snaps)
        twin = _twin(root)
        l0 = [sdb.SourceId.SST_VIEW(v.id) for v in admin.latest().l0]
        _compact_slatedb(oracle, l0, 2)
        ours_store = open_store(str(twin))
        assert run_compaction_once(DB, ours_store, OURS_L0) is not None
        theirs, ours = _runs(root), _runs(twin)
        assert list(theirs.values()) == list(ours.values()), (theirs, ours)
        runs = [sdb.SourceId.SORTED_RUN(r.id) for r in admin.latest().compacted]
        _compact_slatedb(oracle, runs, 1)
        assert run_compaction_once(DB, ours_store, OURS_RUNS) is not None
        theirs, ours = _runs(root), _runs(twin)
        assert list(theirs.values()) == list(ours.values()), (theirs, ours)
    finally:
        del snaps
        oracle.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=_history, second=_history)
def test_slatedb_and_our_compactions_write_the_same_rows(
    tmp_path: Path, first: list[object], second: list[object]
) -> None:
    """Found by the review of issue 38 (was review/test_issue38_compaction_differential.py)."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    _differential(root, first, second)
