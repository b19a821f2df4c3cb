"""SlateDB 0.17 writes; our change feed reads every change in commit order (issue 43, item 1).

SlateDB's own engine (the ``slatedb`` wheel) writes puts, deletes, a write batch, TTL rows and
merge operands over several WAL SSTs, with a memtable flush to L0 between them. Our feed must
list them in write order with their op, SlateDB's per-row timestamps and increasing seqs, on
the local filesystem and on S3, exactly as SlateDB's own WAL reader (RFC 0019) reads them;
resuming from a cursor yields the rest. After SlateDB's own GC
collected the WAL behind its L0, an old cursor raises ChangesCollected and a fresh feed
bootstraps from a snapshot whose replay equals SlateDB's own scan.
"""

from __future__ import annotations

import pytest

from slatedb_core.errors import ChangesCollected
from slatedb_core.feed import ChangeFeed, ChangesOptions
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.wal import WalLog
from tests.interop.oracle import Oracle, settings
from tests.interop.oracle_changes import feed_rows, slatedb_wal_rows
from tests.interop.oracle_merge_read import StringAppend, merge, open_merge_db

pytestmark = pytest.mark.slatedb

TTL_MS = 60_000


def write_history(oracle: Oracle) -> list[tuple[bytes, bytes | None, str]]:
    """SlateDB writes; returns (key, value, op) in write order."""
    w = open_merge_db(oracle, StringAppend())
    done: list[tuple[bytes, bytes | None, str]] = []
    for r in range(4):
        w.put(b"k%d" % r, b"v%d" % r)
        done.append((b"k%d" % r, b"v%d" % r, "put"))
        w.put_ttl(b"t%d" % r, b"ttl%d" % r, TTL_MS)
        done.append((b"t%d" % r, b"ttl%d" % r, "put"))
        merge(w, b"m", b"+%d" % r)
        done.append((b"m", b"+%d" % r, "merge"))
        w.write([(b"b%d" % r, b"x"), (b"k%d" % r, None)])
        done += [(b"b%d" % r, b"x", "put"), (b"k%d" % r, None, "delete")]
        w.flush_wal()
        if r == 1:
            w.flush_memtable()
    w.delete(b"t0")
    done.append((b"t0", None, "delete"))
    w.shutdown()
    return done


def test_slatedb_writes_our_feed_reads_in_order(
    both_stores: tuple[Oracle, ObjectStore, str],
) -> None:
    oracle, store, _ = both_stores
    done = write_history(oracle)
    assert len(WalLog(store, "db").list_ids()) >= 5
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=3))
    batches = list(feed.changes())
    got = [r for b in batches for r in b.rows.to_pylist()]
    assert [(r["key"], r["value"], r["op"]) for r in got] == done
    seqs = [r["seq"] for r in got]
    assert seqs == sorted(seqs)
    batch_seqs = {r["seq"] for r in got if r["key"].startswith(b"b")}
    assert len(set(seqs)) == len(seqs) - len(batch_seqs)  # a write batch is one seq in SlateDB
    ttl = [r for r in got if r["key"].startswith(b"t") and r["op"] == "put"]
    assert all(r["expire_ts"] - r["create_ts"] == TTL_MS for r in ttl)
    assert all(r["expire_ts"] is None for r in got if not r["key"].startswith(b"t"))
    assert slatedb_wal_rows(oracle) == feed_rows(got)  # SlateDB's own WAL reader agrees
    seen = 0
    for b in batches:
        seen += b.rows.num_rows
        rest = [r for x in feed.changes(b.cursor.encode()) for r in x.rows.to_pylist()]
        assert rest == got[seen:]


def test_after_slatedb_gc_a_cursor_is_collected_and_a_bootstrap_matches_its_scan(
    oracle: Oracle, store: ObjectStore
) -> None:
    w = oracle.open_db(s=settings(compactor=False))
    for r in range(6):
        w.put(b"k%d" % (r % 3), b"v%d" % r)
        if r == 2:
            w.delete(b"k0")
        w.flush_wal()
    feed = ChangeFeed("db", store, ChangesOptions(batch_rows=1))
    early = next(iter(feed.changes())).cursor
    w.flush_memtable()
    w.put(b"after", b"l0")
    w.flush_wal()
    expected = dict(w.scan())
    w.shutdown()
    oracle.admin().run_gc(min_age_ms=0)
    left = WalLog(store, "db").list_ids()
    assert early.wal_id not in left  # SlateDB's GC deleted it (it keeps WAL SST 1: a gap)
    with pytest.raises(ChangesCollected):
        list(feed.changes(early))
    state: dict[bytes, bytes] = {}
    snapshot_rows = 0
    for b in ChangeFeed("db", store).changes():
        for r in b.rows.to_pylist():
            snapshot_rows += r["snapshot"]
            if r["op"] == "delete":
                state.pop(r["key"], None)
            else:
                state[r["key"]] = r["value"]
    assert snapshot_rows > 0
    assert state == expected
