"""Adversarial checks of the write-path speed-ups (WAL SSTs written as the writes came, repeated
keys included; the fixed-width row matrix; bloom hashing of 8-multiple-width keys; the frozen
memtable's u64-prefix sort) against SlateDB 0.17: what our writer puts on disk with tiny blocks
(a row per block, so a key's rows straddle block boundaries in WAL SSTs), keys of widths around
the 8-byte word (7, 8, 9, 16, 24), keys that are prefixes of each other and Arrow inputs sliced
at an offset, must read the same in our Db (writer and replay), our DbReader, and SlateDB's
``Db`` and ``DbReader`` (whose point reads consult our bloom filters)."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.options import DbOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.writer.batch import WriteBatch
from slatedb_core.writer.db import Db
from tests.interop.expect import Model, check_reads, scanner
from tests.interop.oracle import Oracle, SlateWriter, settings

pytestmark = pytest.mark.slatedb


def _keys(rng: random.Random, width: int, n: int, prefix: bytes = b"") -> list[bytes]:
    body = width - len(prefix)
    return [prefix + bytes(rng.getrandbits(8) for _ in range(body)) for _ in range(n)]


def _arrow(ops: list[tuple[bytes, bytes | None]], pad: int) -> pa.Table:
    """key/value columns sliced past ``pad`` leading junk rows (Arrow offsets != 0)."""
    junk: list[tuple[bytes, bytes | None]] = [(b"junk%d" % i, b"j") for i in range(pad)]
    allops = junk + ops
    t = pa.table(
        {
            "key": pa.array([k for k, _ in allops], pa.binary()),
            "value": pa.array([v for _, v in allops], pa.binary()),
        }
    )
    return t.slice(pad)


@pytest.mark.parametrize("block_size", [1, 97])
def test_tiny_blocks_repeated_keys_odd_widths_read_alike(
    oracle: Oracle, store: ObjectStore, block_size: int
) -> None:
    rng = random.Random(block_size)
    model = Model()
    opts = DbOptions(
        flush_interval=timedelta(hours=1),
        block_size=block_size,
        manifest_poll_interval=timedelta(milliseconds=100),
    )
    prefixed = [b"a", b"a\x00", b"a\x00\x00", b"ab", b"abcdefgh", b"abcdefgh\x00", b"abcdefg"]
    with Db.open("db", store, opts) as db:
        for width in (7, 8, 9, 16, 24):
            # a memtable (flushed to L0) of keys of one width, some sharing 8-byte prefixes
            ks = _keys(rng, width, 40) + _keys(rng, width, 10, prefix=b"samepref"[: width - 1])
            ops: list[tuple[bytes, bytes | None]] = [
                (k, b"" if i % 5 == 0 else b"w%d-%d" % (width, i)) for i, k in enumerate(ks)
            ]
            db.put_arrow(_arrow(model.apply(ops), pad=3 + width % 4))
            db.flush_memtable()
        wb = WriteBatch()
        for i, k in enumerate(prefixed * 3):  # repeated keys, put/delete/put in one batch
            if i % 4 == 3:
                wb.delete(k)
                model.delete(k)
            else:
                wb.put(k, b"wb%d" % i)
                model.put(k, b"wb%d" % i)
        db.write(wb)
        db.flush_memtable()  # an L0 of keys that are prefixes of each other
        # the WAL tail: repeated keys across many one-row blocks and across WAL SSTs
        tail: list[tuple[bytes, bytes | None]] = []
        for r in range(3):
            for i, k in enumerate(prefixed + [b"t/%02d" % j for j in range(12)]):
                v = None if (i + r) % 3 == 0 else b"tail%d-%d" % (r, i)
                tail.append((k, v))
        db.put_arrow(_arrow(model.apply(tail[:40]), pad=2), await_durable=False)
        wb = WriteBatch()
        for k, v in model.apply(tail[40:]):
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        db.write(wb, await_durable=False)
        db.put(b"a", b"last-single")
        model.put(b"a", b"last-single")
        db.flush()
        db.delete(b"ab")
        model.delete(b"ab")
        db.put(b"a\x00", b"")  # an empty value, not a delete
        model.put(b"a\x00", b"")
        db.flush()
        check_reads(model, db.get, scanner(db), who="our Db (the writer itself)")
    reader = DbReader.open("db", store)
    try:
        check_reads(model, reader.get, scanner(reader), who="our DbReader")
    finally:
        reader.close()
    with Db.open("db", store, opts) as db:
        check_reads(model, db.get, scanner(db), who="our Db after replaying its WAL")
    sreader = oracle.open_reader()
    check_reads(model, sreader.get, sreader.scan, who="SlateDB DbReader")
    sreader.shutdown()
    w = oracle.open_db("db", settings(compactor=False))
    check_reads(model, w.get, w.scan, who="SlateDB Db replaying our WAL")
    w.flush_memtable()
    w.shutdown()
    with Db.open("db", store, opts) as db:
        check_reads(model, db.get, scanner(db), who="our Db after SlateDB's flush")


def _slate_db_1k_blocks(oracle: Oracle) -> SlateWriter:
    builder = sdb.DbBuilder("db", oracle.store())
    builder.with_settings(settings(compactor=False))
    builder.with_sst_block_size(sdb.SstBlockSize.BLOCK1_KIB)
    writer = SlateWriter(oracle, oracle.run(builder.build()))
    oracle._open.append(writer.db.shutdown)  # the harness closes it
    return writer


def test_slatedb_versions_spanning_many_1k_blocks_read_newest_only(
    oracle: Oracle, store: ObjectStore
) -> None:
    """SlateDB's L0 SST (1 KiB blocks, a snapshot held so that every version is kept) in which
    each version of a key fills a block of its own: a key's rows straddle several block
    boundaries, newest first. Our reader and Db must answer the newest version only (a
    tombstone hides the rest), in point reads, full scans and scans starting mid-key."""
    model = Model()
    w = _slate_db_1k_blocks(oracle)
    big = b"x" * 700
    w.write(model.apply([(b"k/%02d" % i, b"v0-%d" % i + big) for i in range(20)]))
    snapshot = w.snapshot()
    for r in range(1, 5):
        ops: list[tuple[bytes, bytes | None]] = []
        for i in range(20):
            if (i + r) % 4 == 0:
                ops.append((b"k/%02d" % i, None))
            elif i % 3 != 0:
                ops.append((b"k/%02d" % i, b"v%d-%d" % (r, i) + big[: 100 * r]))
        w.write(model.apply(ops))
    w.flush_memtable()
    check_reads(model, w.get, w.scan, who="SlateDB Db (the oracle itself)")
    (sst,) = (oracle.root / "db" / "compacted").iterdir()
    reader = SstReader.open(store, f"db/compacted/{sst.name}")
    assert reader.block_count > 20  # versions of a key straddle block boundaries
    with DbReader.open("db", store) as ours:
        check_reads(model, ours.get, scanner(ours), who="our DbReader")
        live = model.live()
        for lo in (b"k/05", b"k/050", b"k/13", b"k/0"):
            got = list(ours.scan(lo, b"k/17"))
            assert got == [(k, v) for k, v in live if lo <= k < b"k/17"], lo
    with Db.open("db", store, DbOptions(manifest_poll_interval=timedelta(milliseconds=100))) as db:
        check_reads(model, db.get, scanner(db), who="our Db")
    del snapshot
