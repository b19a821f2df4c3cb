"""A read-ahead group holds a bounded amount of decoded data, however many blocks it spans.

Issue 39, item 5: each block is decompressed to at most ``MAX_BLOCK_BYTES``, but the blocks of a
read-ahead group (one GET's worth of stored bytes, or the whole SST for a reader over bytes in
memory) were decoded in one pass, so an SST of many tiny zstd blocks, each decompressing to many
MiB, asked for ``n`` times that at once. A group now stops adding blocks once it holds
``GROUP_DECODE_BYTES`` decoded and the scan goes on from the next block, so a scan, a compaction's
``blocks()`` or a WAL lookup over such an SST holds about one group at a time. The SST here is
even a sound one (values of zeros, one row per block): only a reader that keeps every row (
``read_all``) holds them all. Peak memory is measured with tracemalloc around each read.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.entries import batch_from_lists
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst.block import GROUP_DECODE_BYTES
from slatedb_core.sst.format import MAX_BLOCK_BYTES
from slatedb_core.store.url import open_store

VALUE = 16 << 20  # each block decompresses to a bit more than this
BLOCKS = 32  # 512 MiB decoded in all; a few KB stored
assert GROUP_DECODE_BYTES <= MAX_BLOCK_BYTES < BLOCKS * VALUE // 4
# one xdist worker runs the module, so its SSTs (512 MiB of rows) are built once, not per worker
pytestmark = pytest.mark.xdist_group("sst-readahead-bounded")
# a group decodes to at most its budget plus one block, which the decompressed pieces, their
# concatenation and the decoded columns (and the last block the caller still holds) hold about
# three times; before the fix a scan peaked at 1024 MiB here, after it at 160-176 MiB
BOUND = 3 * (GROUP_DECODE_BYTES + VALUE + (1 << 20))


def keys() -> list[bytes]:
    return [b"k%04d" % i for i in range(BLOCKS)]


@pytest.fixture(scope="module")
def ssts() -> tuple[bytes, bytes]:
    """The SST and the WAL SST of the same 512 MiB of rows, built once (1.4 s of CPU; issue 41,
    item 6) and dropped before any test reads."""
    batch = batch_from_lists(
        keys(), list(range(1, BLOCKS + 1)), [0] * BLOCKS, [bytes(VALUE)] * BLOCKS
    )
    options = SstOptions(compression="zstd", block_size=4096)
    data, _ = encode_sst(batch, options)
    wal, _ = encode_sst(batch, options, wal=True)
    assert len(data) < 64 * BLOCKS * 1024  # tiny on disk
    return data, wal


@pytest.fixture(scope="module")
def sst(ssts: tuple[bytes, bytes]) -> bytes:
    return ssts[0]


@pytest.fixture(scope="module")
def wal_sst(ssts: tuple[bytes, bytes]) -> bytes:
    return ssts[1]


def peak_of(read: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def drain(it: Iterator[object]) -> int:
    n = 0
    for _ in it:
        n += 1
    return n


def test_a_scan_over_bytes_in_memory_holds_one_group_at_a_time(sst: bytes) -> None:
    """``from_bytes`` made the whole SST one group: 32 blocks of 16 MiB decoded at once."""
    reader = SstReader.from_bytes(sst, "s.sst")
    assert reader.block_count == BLOCKS
    rows: list[int] = []

    def scan() -> None:
        for batch in reader.scan():
            rows.append(batch.num_rows)

    peak = peak_of(scan)
    assert sum(rows) == BLOCKS
    assert peak <= BOUND, f"peak {peak >> 20} MiB for a {len(sst)}-byte SST"


def test_a_compaction_read_with_readahead_holds_one_group_at_a_time(sst: bytes) -> None:
    """A store-backed reader's ``blocks()`` (compaction sources): one GET of 8 MiB covers every
    block of this SST, so its group was every block."""
    store = open_store("memory://")
    store.put("db/compacted/s.sst", sst)
    reader = SstReader.open(store, "db/compacted/s.sst")
    seen: list[int] = []

    def read() -> None:
        for b, block in reader.blocks(0, reader.block_count, readahead=8 << 20):
            seen.extend(range(b, b + block.span))  # one decode's blocks, one row each
            assert block.n == block.span

    peak = peak_of(read)
    assert seen == list(range(BLOCKS))
    assert peak <= BOUND, f"peak {peak >> 20} MiB"


def test_a_wal_lookup_holds_one_group_at_a_time(wal_sst: bytes) -> None:
    """A WAL SST's get reads every block (its rows are in write order)."""
    reader = SstReader.from_bytes(wal_sst, "wal/00000000000000000001.sst")
    got: list[object] = []
    peak = peak_of(lambda: got.append(reader.get(b"k0007")))
    found = got[0]
    assert isinstance(found, tuple) and found[0] == 8 and len(found[2]) == VALUE
    assert peak <= BOUND, f"peak {peak >> 20} MiB"


def test_grouped_scans_keep_every_row_across_group_cuts(sst: bytes) -> None:
    """``groups=True`` joins whole blocks of one decoded group: a cut group still yields every
    row once, in order."""
    reader = SstReader.from_bytes(sst, "s.sst")
    got: list[bytes] = []
    for batch in reader.scan(groups=True):
        got.extend(batch.column(0).to_pylist())
    assert got == keys()
    assert drain(iter(reader.scan(b"k0003", b"k0030"))) == 27


def test_verifying_a_whole_sst_holds_one_group_at_a_time(sst: bytes) -> None:
    """``verify`` (the health check's whole-SST read) checks every block and the info's totals
    without holding the rows, which ``read_all`` keeps by design."""
    reader = SstReader.from_bytes(sst, "s.sst")
    got: list[int] = []
    peak = peak_of(lambda: got.append(reader.verify()))
    assert got == [BLOCKS]
    assert peak <= BOUND, f"peak {peak >> 20} MiB"


def test_verify_refuses_what_read_all_refuses() -> None:
    """The totals the SST info records are checked as ``read_all`` checks them."""
    batch = batch_from_lists([b"a", b"b", b"c"], [3, 2, 1], [0, 0, 0], [b"x", b"y", b"z"])
    data, _ = encode_sst(batch, SstOptions(block_size=16))
    assert SstReader.from_bytes(data, "ok.sst").verify() == 3
    reader = SstReader.from_bytes(data, "bad.sst")
    reader.info = dataclasses.replace(reader.info, entry_count=4)
    with pytest.raises(CorruptionError, match="3 rows, the SST info records 4"):
        reader.read_all()
    with pytest.raises(CorruptionError, match="3 rows, the SST info records 4"):
        reader.verify()
    reader = SstReader.from_bytes(data, "bad.sst")
    reader.last_key = b"d"
    with pytest.raises(CorruptionError, match="first or last key"):
        reader.read_all()
    with pytest.raises(CorruptionError, match="first or last key"):
        reader.verify()
