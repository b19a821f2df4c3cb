"""The row encoder's two ways of building rows (one byte matrix when every key has one width and
every value one width, else a join of per-row pieces) and its block trailers, checked against a
row-at-a-time reference of SlateDB 0.17's row codec v2 (docs/format.md)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from slatedb_core.errors import InvalidArgument
from slatedb_core.sst import SstOptions, SstReader, encode_sst
from slatedb_core.sst import rows as rows_mod
from slatedb_core.sst.rows import EncodedRows, block_trailers, encode_rows

NO_TS = np.iinfo(np.int64).min


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def reference_rows(
    keys: list[bytes],
    values: list[bytes],
    seqs: list[int],
    kinds: list[int],
    expire: list[int] | None,
    create: list[int] | None,
    restart: list[bool],
) -> bytes:
    out = bytearray()
    prev = b""
    for i, (k, v, s, kind) in enumerate(zip(keys, values, seqs, kinds, strict=True)):
        shared = 0
        if not restart[i]:
            while shared < min(len(k), len(prev)) and k[shared] == prev[shared]:
                shared += 1
        flags = {0: 0, 1: 1, 2: 8}[kind]
        tail = b""
        if expire is not None and expire[i] != NO_TS:
            flags |= 2
            tail += expire[i].to_bytes(8, "big", signed=True)
        if create is not None and create[i] != NO_TS:
            flags |= 4
            tail += create[i].to_bytes(8, "big", signed=True)
        out += _varint(shared) + _varint(len(k) - shared) + _varint(len(v)) + k[shared:] + v
        out += s.to_bytes(8, "big") + bytes([flags]) + tail
        prev = k
    return bytes(out)


def _encode(
    keys: list[bytes],
    values: list[bytes],
    seqs: list[int],
    kinds: list[int],
    expire: list[int] | None,
    create: list[int] | None,
    interval: int,
    block_size: int,
) -> EncodedRows:
    karr, varr = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    kdata = np.frombuffer(karr.buffers()[2], dtype=np.uint8)
    koffs = np.frombuffer(karr.buffers()[1], dtype=np.int32).astype(np.int64)
    return encode_rows(
        kdata,
        koffs,
        varr,
        np.asarray(seqs, np.uint64),
        np.asarray(kinds, np.uint8),
        None if expire is None else np.asarray(expire, np.int64),
        None if create is None else np.asarray(create, np.int64),
        block_size,
        interval=interval,
    )


CASES: dict[str, tuple[Callable[[int], bytes], Callable[[int], bytes]]] = {
    # one key width, one value width: the byte-matrix path (interval 1)
    "fixed": (lambda i: b"key-%06d" % i, lambda i: bytes([i % 251]) * 100),
    # a 2-byte varint for the value length, still fixed
    "fixed-long-values": (lambda i: b"k%07d" % i, lambda i: b"v" * 300),
    # widths that vary: the joined path
    "varied": (lambda i: b"key-%d" % (i * 7), lambda i: b"x" * (i % 13)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("interval", [1, 16])
@pytest.mark.parametrize("ts", ["none", "all-create", "mixed"])
def test_rows_and_trailers_match_the_reference(
    case: str, interval: int, ts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix_calls: list[int] = []
    real = rows_mod._fixed_width_rows

    def spy(*args: Any) -> Any:
        matrix_calls.append(1)
        return real(*args)

    monkeypatch.setattr(rows_mod, "_fixed_width_rows", spy)
    kf, vf = CASES[case]
    n = 700
    keys = sorted({kf(i) for i in range(n)})
    values = [vf(i) for i in range(n)]
    seqs = list(range(5000, 5000 - n, -1))
    # tombstones (empty values) only where widths vary anyway; merge operands keep their values
    tomb = 1 if case == "varied" else 0
    kinds = [tomb if i % 9 == 4 else (2 if i % 11 == 3 else 0) for i in range(n)]
    values = [b"" if kinds[i] == 1 else v for i, v in enumerate(values)]
    expire = create = None
    if ts == "all-create":
        create = [1_700_000_000_000 + i for i in range(n)]
    elif ts == "mixed":
        create = [1_700_000_000_000 if i % 3 else NO_TS for i in range(n)]
        expire = [NO_TS if i % 4 else -5 - i for i in range(n)]
    enc = _encode(keys, values, seqs, kinds, expire, create, interval, 2048)
    assert len(enc.bounds) > 4  # several blocks
    # the byte matrix: one width of keys and of values, every key whole, timestamps uniform
    assert bool(matrix_calls) == (case != "varied" and interval == 1 and ts != "mixed")
    restart = enc.restart.tolist()
    assert bytes(enc.data) == reference_rows(keys, values, seqs, kinds, expire, create, restart)
    # blocks filled as SlateDB's block builder fills them: a row joins while the block's rows,
    # 2 bytes per restart point and the 2-byte count stay within the block size
    ro = enc.row_offs
    want_bounds, size, restarts = [0], 0, 0
    for i in range(len(keys)):
        row = int(ro[i + 1] - ro[i])
        first = i == want_bounds[-1]
        new_restart = (i - want_bounds[-1]) % interval == 0
        if not first and size + row + 2 * (restarts + new_restart) + 2 > 2048:
            want_bounds.append(i)
            size, restarts, new_restart = 0, 0, True
        size += row
        restarts += new_restart
    assert enc.bounds == [*want_bounds, len(keys)]
    trailers, starts = block_trailers(enc)
    for b, (s, e) in enumerate(itertools.pairwise(enc.bounds)):
        rs = [i for i in range(s, e) if restart[i]]
        assert rs[0] == s and all((i - s) % interval == 0 for i in rs)
        want = b"".join(int(ro[i] - ro[s]).to_bytes(2, "big") for i in rs)
        assert trailers[starts[b] : starts[b + 1]] == want + len(rs).to_bytes(2, "big")


def test_fixed_width_sst_round_trips_from_sliced_columns() -> None:
    """The byte-matrix path reads keys and values where the (sliced) columns start."""
    n = 3000
    table = pa.table(
        {
            "key": pa.array([b"key-%08d" % i for i in range(n)], pa.binary()),
            "seq": pa.array(range(1, n + 1), pa.uint64()),
            "kind": pa.array([0] * n, pa.uint8()),
            "value": pa.array([b"%020d" % (i * 3) for i in range(n)], pa.binary()),
        }
    ).slice(1234, 1000)
    data, info = encode_sst(table, SstOptions(block_size=1024))
    got = SstReader.from_bytes(data, "t").read_all()
    assert got.column("key").to_pylist() == table.column("key").to_pylist()
    assert got.column("value").to_pylist() == table.column("value").to_pylist()
    assert info.entry_count == 1000


@pytest.mark.parametrize("with_nulls", [False, True])
@pytest.mark.parametrize("column", ["expire_ts", "create_ts"])
def test_a_timestamp_of_int64_minimum_is_refused(column: str, with_nulls: bool) -> None:
    """int64's minimum marks "no timestamp" inside the encoder, so an input holding it is refused
    (with every row holding a timestamp, and with some null)."""
    stamps = [5, np.iinfo(np.int64).min, None if with_nulls else 7]
    table = pa.table(
        {
            "key": pa.array([b"a", b"b", b"c"], pa.binary()),
            "seq": pa.array([3, 2, 1], pa.uint64()),
            "kind": pa.array([0, 0, 0], pa.uint8()),
            "value": pa.array([b"x", b"y", b"z"], pa.binary()),
            column: pa.array(stamps, pa.int64()),
        }
    )
    with pytest.raises(InvalidArgument, match="int64's minimum"):
        encode_sst(table)
    ok = table.set_column(4, column, pa.array([5, 6, None if with_nulls else 7], pa.int64()))
    got = SstReader.from_bytes(encode_sst(ok)[0], "t", now_ms=0).read_all(timestamps=True)
    assert got.column(column).to_pylist() == [5, 6, None if with_nulls else 7]
