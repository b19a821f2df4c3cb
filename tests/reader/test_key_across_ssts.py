"""Review of issue 38 (item 3, snapshots): a sorted run SlateDB's compactor wrote with one key's
versions in several SSTs.

SlateDB's compactor ends an output SST once it has written ``max_sst_size`` bytes of blocks,
wherever the key stream is (``compactor_executor.rs``): with a live snapshot a key keeps several
versions, and they can span SSTs of one run, the newest in the first of them. Our compactor
never cuts inside a key (compactor/output_ssts.py), but our reads must read SlateDB's runs: a point
read looked only in the LAST SST whose first key is at or below the key (``SortedRunHandle.get``,
``bisect_right``), which holds the key's OLDEST versions, and served a value overwritten long
ago (SlateDB reads the newest). A scan from the key, and ``get_many``, start there too. Fixed
by ``SortedRunHandle.first_view`` (lsm/dbstate.py): the walk starts at the last SST starting
below the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]

from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbReaderOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.url import open_store
from tests.interop.oracle import DB, Oracle
from tests.interop.oracle_compaction import open_merge_db

pytestmark = pytest.mark.slatedb


def test_our_reads_of_a_slatedb_run_with_a_key_across_ssts(oracle: Oracle, tmp_path: Path) -> None:
    """Found by the review of issue 38 (was review/test_issue38_compaction_split_key_run.py)."""
    w = open_merge_db(
        oracle,
        compactor=True,
        compactor_options__scheduler_options={"min_compaction_sources": "1000"},
        compactor_options__worker__max_sst_size=200,
    )
    snaps = []
    for i in range(30):  # each version kept by a snapshot; 400-byte values fill several blocks
        w.put(b"k", b"v%03d" % i + b"x" * 400)
        snaps.append(w.snapshot())
        if i % 10 == 9:
            w.flush_memtable()
    w.put(b"z", b"z")
    w.flush_memtable()
    admin = oracle.admin()
    l0 = [sdb.SourceId.SST_VIEW(v.id) for v in admin.latest().l0]
    oracle.run(admin.admin.submit_compaction(sdb.CompactionSpec.TIERED(b"", l0, 0)))
    admin.wait_until(lambda m: not m.l0 and bool(m.compacted))
    store = open_store(tmp_path.as_uri())
    run = ManifestStore(store, DB).read_latest().manifest.compacted[0]
    assert len(run.views) > 2  # k's versions span SSTs of the run
    newest = w.get(b"k")
    assert newest is not None and newest.startswith(b"v029")

    with DbReader.open(DB, store, options=DbReaderOptions(merge_operator="string_append")) as r:
        got = r.get(b"k")
        many = r.get_many([b"k", b"z"])
        from_k = list(r.scan(b"k"))
    assert (got or b"")[:4] == b"v029"
    assert [(v or b"")[:4] for v in many] == [b"v029", b"z"]
    assert [(k, v[:4]) for k, v in from_k] == [(b"k", b"v029"), (b"z", b"z")]
