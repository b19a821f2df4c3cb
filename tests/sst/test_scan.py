from __future__ import annotations

import bisect

import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.sst import ENTRY_SCHEMA, SstOptions, SstReader, encode_sst
from tests.sst import batch_of, entries_of, numbered

ENTRIES = numbered(30)  # keys key-000000, key-000002, ..., key-000058
KEYS = [e[0] for e in ENTRIES]


@pytest.fixture(scope="module")
def reader() -> SstReader:
    data, _ = encode_sst(batch_of(ENTRIES), SstOptions(block_size=150))
    r = SstReader.from_bytes(data, "t")
    assert r.block_count >= 8
    return r


def bound_candidates(r: SstReader) -> list[bytes | None]:
    """Unbounded, every key, every gap between keys, both sides of every block boundary, and keys
    before and after the whole SST."""
    out: list[bytes | None] = [None, b"", b"a", b"key-", b"zzz", b"key-000058\x00", b"key-000059"]
    out += KEYS
    out += [b"key-%06d" % (2 * i + 1) for i in range(30)]
    for batch in r.scan():
        first, last = batch.column(0)[0].as_py(), batch.column(0)[-1].as_py()
        out += [first, last, first[:-1], last + b"\x00"]
    out += r.index_keys
    return list(dict.fromkeys(out))


def expected(start: bytes | None, end: bytes | None) -> list[tuple[bytes, int, int, bytes]]:
    lo = 0 if start is None else bisect.bisect_left(KEYS, start)
    hi = len(KEYS) if end is None else bisect.bisect_left(KEYS, end)
    return ENTRIES[lo:hi] if hi > lo else []


def test_scan_matches_a_sorted_list_model_for_every_pair_of_bounds(reader: SstReader) -> None:
    cands = bound_candidates(reader)
    for start in cands:
        for end in cands:
            batches = list(reader.scan(start, end))
            got = [row for b in batches for row in entries_of(b)]
            assert got == expected(start, end), (start, end)
            assert all(b.num_rows > 0 and b.schema == ENTRY_SCHEMA for b in batches)


def test_scan_yields_one_batch_per_block_touched(reader: SstReader) -> None:
    assert len(list(reader.scan())) == reader.block_count
    blocks = list(reader.scan())
    first_block_last = blocks[0].column(0)[-1].as_py()
    second_block_first = blocks[1].column(0)[0].as_py()
    assert len(list(reader.scan(first_block_last, second_block_first))) == 1
    assert len(list(reader.scan(first_block_last, second_block_first + b"\x00"))) == 2


def test_read_all_is_a_table_with_the_entry_schema(reader: SstReader) -> None:
    table = reader.read_all()
    assert isinstance(table, pa.Table) and table.schema == ENTRY_SCHEMA
    assert entries_of(table) == ENTRIES


def test_scan_bounds_must_be_bytes(reader: SstReader) -> None:
    with pytest.raises(InvalidArgument):
        list(reader.scan("key-000002"))  # type: ignore[arg-type]
    tail = reader.scan(bytearray(b"key-000050"))  # type: ignore[arg-type]
    assert entries_of(pa.Table.from_batches(list(tail))) == ENTRIES[25:]
