"""SlateDB 0.17 writes TTL rows and flushes them to L0; after its GC collected the WAL, our
feed's bootstrap snapshot delivers each key's newest version with the ``expire_ts`` SlateDB's
SST row carries, as the WAL rows did (issue 43, item 1: "the timestamps SlateDB stores"), on
the local filesystem and on S3.
"""

from __future__ import annotations

import pytest

from slatedb_core.feed import ChangeFeed
from slatedb_core.store.objectstore import ObjectStore
from tests.interop.oracle import Oracle, settings

pytestmark = pytest.mark.slatedb


def test_a_snapshot_of_slatedbs_ttl_rows_carries_their_expire_ts(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    w = oracle.open_db(s=settings(compactor=False))
    for r in range(3):
        w.put(b"k%d" % r, b"v%d" % r)
        w.put_ttl(b"t%d" % r, b"ttl%d" % r, 60_000 * (r + 1))
        w.flush_wal()
    w.put_ttl(b"t0", b"newer", 600_000)  # a newer version, another expiry
    w.put(b"t1", b"plain now")  # no TTL on its newest version
    w.flush_wal()
    wal: dict[bytes, int | None] = {}
    for b in ChangeFeed("db", store).changes():
        for row in b.rows.to_pylist():
            wal[row["key"]] = row["expire_ts"]
    assert wal[b"t0"] is not None and wal[b"t1"] is None and wal[b"t2"] is not None
    w.flush_memtable()
    w.shutdown()
    oracle.admin().run_gc(min_age_ms=0)
    snap = {
        row["key"]: row["expire_ts"]
        for b in ChangeFeed("db", store).changes()
        for row in b.rows.to_pylist()
        if row["snapshot"]
    }
    assert snap == wal
