"""Adversarial properties of the encode/decode speed-ups (docs/format.md, "SSTs and WAL SSTs"):
the fixed-width row matrix, closed-form block planning, bloom hashing of keys whose width is a
multiple of 8 (from the keys' own bytes, unaligned slices included), u32 bloom probes, the
frozen memtable's u64-prefix sort, the one-row-interval decode fast path, the per-block
``distinct`` flags of ``newest_versions`` and WAL SSTs that repeat keys in write order.

Every property compares against a plain model: rows read back exactly, the newest version of
every key answered by ``get`` and kept by ``newest_versions`` (whole and ranged scans), every
written key passing its bloom filter (a false negative loses a read), and damaged blocks
raising CorruptionError and nothing else."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slatedb_core.errors import CorruptionError
from slatedb_core.lsm.entries import ENTRY_SCHEMA, sortable_keys
from slatedb_core.lsm.iterators import newest_versions
from slatedb_core.lsm.memtable import Memtable, unique_key_order
from slatedb_core.sst import SstOptions, SstReader, bloom, encode_sst
from slatedb_core.sst.fixed_width import encode_fixed_sst_into
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32
from slatedb_core.wal.log import WalLog, encode_wal_sst
from slatedb_core.wal.pipeline import WalBuffer

Row = tuple[bytes, int, int, bytes]


SLOW = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# keys around the 8-byte word, prefixes of each other, zero bytes at the end
_ALPHABET = st.sampled_from([0, 1, 0x61, 0xFF])


WIDTHS = st.sampled_from([1, 2, 7, 8, 9, 16, 24])


@st.composite
def keysets(draw: st.DrawFn, min_size: int = 1) -> list[bytes]:
    mixed = draw(st.booleans())
    width = draw(WIDTHS)
    widths = st.sampled_from([1, 7, 8, 9, 16]) if mixed else st.just(width)
    # most keys sharing their first 8 bytes defeats the memtable's u64-prefix sort
    shared = draw(st.sampled_from([b"", b"", b"prefix/8"]))
    body = st.lists(_ALPHABET, min_size=24, max_size=24).map(bytes)
    key = st.builds(
        lambda w, b, s: (s + b)[:w].ljust(w, b"\x00"),
        widths,
        body,
        st.sampled_from([b"", shared, shared]),
    )
    keys = draw(st.sets(key, min_size=min_size, max_size=40))
    return sorted(keys)


@st.composite
def sst_rows(draw: st.DrawFn) -> list[Row]:
    """Sorted rows, several versions of some keys (newest first), tombstones, empty values."""
    rows: list[Row] = []
    seq = 1 << 40
    for key in draw(keysets()):
        for v in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from([0, 0, 1]))
            value = b"" if kind else draw(st.sampled_from([b"", b"v", b"0123456789abcdef"]))
            rows.append((key, seq - v, kind, value))
        seq += 7
    return rows


def _batch(rows: list[Row], pad: int) -> pa.RecordBatch:
    """The rows as an ENTRY_SCHEMA batch sliced past ``pad`` junk rows (Arrow offset != 0)."""
    junk: list[Row] = [(b"\x00" * (i + 1), 1, 0, b"junk") for i in range(pad)]
    allrows = junk + rows
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in allrows], pa.binary()),
            pa.array([r[1] for r in allrows], pa.uint64()),
            pa.array([r[2] for r in allrows], pa.uint8()),
            pa.array([r[3] for r in allrows], pa.binary()),
        ],
        schema=ENTRY_SCHEMA,
    ).slice(pad)


def _newest(rows: list[Row]) -> dict[bytes, tuple[int, int, bytes]]:
    out: dict[bytes, tuple[int, int, bytes]] = {}
    for key, seq, kind, value in rows:
        out.setdefault(key, (seq, kind, value))
    return out


def _keys_seqs(batches: object) -> list[tuple[bytes, int]]:
    table = pa.Table.from_batches(
        list(newest_versions(batches)),  # type: ignore[arg-type]
        schema=ENTRY_SCHEMA,
    )
    return list(zip(table.column("key").to_pylist(), table.column("seq").to_pylist(), strict=True))


@st.composite
def write_histories(draw: st.DrawFn) -> list[list[tuple[bytes, bytes | None]]]:
    """Writes as the writer groups them: single puts/deletes and batches (WriteBatch or
    put_arrow) of several ops, keys repeating within and across them."""
    keys = draw(keysets())
    op = st.tuples(st.sampled_from(keys), st.sampled_from([None, b"", b"x", b"yy"]))
    return draw(st.lists(st.lists(op, min_size=1, max_size=6), min_size=1, max_size=12))


@SLOW
@given(
    rows=sst_rows(),
    pad=st.integers(0, 3),
    block_size=st.sampled_from([1, 2, 33, 64, 4096]),
    interval=st.sampled_from([1, 1, 2, 16]),
    bits=st.sampled_from([1, 4, 10]),
    stamps=st.sampled_from(["none", "create", "both"]),
    data=st.data(),
)
def test_sst_rows_versions_bloom_and_newest_versions(
    rows: list[Row],
    pad: int,
    block_size: int,
    interval: int,
    bits: int,
    stamps: str,
    data: st.DataObject,
) -> None:
    """Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    batch = _batch(rows, pad)
    if stamps != "none":
        batch = batch.append_column(
            "create_ts", pa.array(np.arange(len(rows), dtype=np.int64) + 1_700_000_000_000)
        )
    if stamps == "both":  # every row expires far ahead: the fixed-width path's uniform tails
        batch = batch.append_column("expire_ts", pa.array(np.full(len(rows), 1 << 50, np.int64)))
    sst, _ = encode_sst(
        batch, SstOptions(block_size=block_size, restart_interval=interval, bloom_bits_per_key=bits)
    )
    reader = SstReader.from_bytes(sst, "review.sst")
    got = reader.read_all()
    assert (
        list(
            zip(*(got.column(c).to_pylist() for c in ("key", "seq", "kind", "value")), strict=True)
        )
        == rows
    )
    newest = _newest(rows)
    for key, want in newest.items():
        assert reader.may_contain(key), key  # a false negative would lose this key's reads
        assert reader.get(key) == want
    ordered = sorted(newest.items())
    assert _keys_seqs(reader.scan()) == [(k, v[0]) for k, v in ordered]
    keys = [k for k, _ in ordered]
    lo, hi = sorted([data.draw(st.sampled_from(keys)), data.draw(st.sampled_from(keys))])
    assert _keys_seqs(reader.scan(lo, hi)) == [(k, v[0]) for k, v in ordered if lo <= k < hi]
    assert _keys_seqs(reader.scan(lo + b"\x00")) == [
        (k, v[0]) for k, v in ordered if k >= lo + b"\x00"
    ]


@SLOW
@given(keys=keysets(), start=st.integers(0, 9), width=st.sampled_from([8, 16, 24, 7, 9]))
def test_bloom_hashes_of_unaligned_slices_equal_the_point_hash(
    keys: list[bytes], start: int, width: int
) -> None:
    """:func:`bloom.hash_keys` (vectorised, 8-multiple widths hashed from the keys' own bytes)
    equals :func:`bloom.hash_key` (a point lookup's, and SlateDB's filter hash) for keys of one
    width starting at any byte of a larger buffer.

    Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    fixed = sorted({k.ljust(width, b"\x01")[:width] for k in keys})
    arr = pa.array([b"\x02" * start, *fixed], pa.binary()).slice(1)
    offs = np.frombuffer(
        arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=4 * arr.offset
    ).astype(np.int64)
    buf = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    assert bloom.hash_keys(buf, offs).tolist() == [bloom.hash_key(k) for k in fixed]
    filt = bloom.BloomFilter("f", bloom.build_bloom(bloom.hash_keys(buf, offs), 10))
    assert all(filt.may_contain(k) for k in fixed)


@SLOW
@given(keys=keysets(min_size=2), shuffle=st.randoms(use_true_random=False))
def test_frozen_memtable_order_is_byte_order(keys: list[bytes], shuffle: object) -> None:
    """Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    shuffled = list(keys)
    shuffle.shuffle(shuffled)  # type: ignore[attr-defined]
    skeys = sortable_keys([pa.array(shuffled, pa.binary())])
    assert skeys is not None
    assert [shuffled[i] for i in unique_key_order(skeys)] == keys


@SLOW
@given(
    keys=keysets(),
    vw=st.sampled_from([1, 8, 127, 128, 300]),
    block_size=st.sampled_from([1, 40, 200, 4096]),
    interval=st.sampled_from([1, 1, 3, 16]),
    perm_seed=st.integers(0, 1 << 30),
)
def test_fixed_width_encoder_reads_as_written(
    keys: list[bytes], vw: int, block_size: int, interval: int, perm_seed: int
) -> None:
    """Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    width = len(keys[0])
    keys = sorted({k.ljust(width, b"\x00")[:width] for k in keys})
    n = len(keys)
    rng = np.random.default_rng(perm_seed)
    values = [rng.integers(0, 256, vw, dtype=np.uint8).tobytes() for _ in range(n)]
    rows = rng.permutation(n).astype(np.int64)  # key i's value is row rows[i] of the store
    store = [b""] * n
    for i, r in enumerate(rows.tolist()):
        store[r] = values[i]
    opts = SstOptions(block_size=block_size, restart_interval=interval)
    mv, _ = encode_fixed_sst_into(
        np.frombuffer(b"".join(keys), np.uint8),
        width,
        np.frombuffer(b"".join(store), np.uint8),
        vw,
        rows,
        77,
        Scratch(),
        opts,
    )
    data = bytes(mv)
    reader = SstReader.from_bytes(data, "fixed.sst")
    got = reader.read_all()
    assert got.column("key").to_pylist() == keys and got.column("value").to_pylist() == values
    for k, v in zip(keys, values, strict=True):
        assert reader.may_contain(k) and reader.get(k) == (77, 0, v)
    if interval == 1:
        general, _ = encode_sst(
            _batch([(k, 77, 0, v) for k, v in zip(keys, values, strict=True)], 0), opts
        )
        assert data == general


@SLOW
@given(
    history=write_histories(),
    as_arrow=st.lists(st.booleans(), min_size=12, max_size=12),
    block_size=st.sampled_from([1, 50, 4096]),
)
def test_wal_sst_of_repeated_keys_replays_to_the_newest_write(
    history: list[list[tuple[bytes, bytes | None]]], as_arrow: list[bool], block_size: int
) -> None:
    """One generation's writes (list puts and put_arrow batches mixed, seqs in write order)
    become one WAL SST; replay (our writer's: rows in seq order into a memtable) ends with
    every key's newest write, deletes included.

    Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    buf = WalBuffer()
    model: dict[bytes, bytes | None] = {}
    seq = 100
    for i, ops in enumerate(history):
        seqs = list(range(seq + 1, seq + 1 + len(ops)))
        seq = seqs[-1]
        for key, value in ops:
            model[key] = value
        if as_arrow[i]:
            buf.batches.append(
                _batch(
                    [
                        (k, s, 1 if v is None else 0, v or b"")
                        for (k, v), s in zip(ops, seqs, strict=True)
                    ],
                    i % 3,
                )
            )
        else:
            buf.keys += [k for k, _ in ops]
            buf.values += [v for _, v in ops]
            buf.seqs += seqs
    rows = buf.to_batch()
    assert rows.num_rows == sum(map(len, history))  # every write kept, none deduplicated
    sst = encode_wal_sst(rows, SstOptions(block_size=block_size), create_ts=1234)
    entries = WalLog(None, "db").decode(9, sst).entries  # type: ignore[arg-type]
    assert entries.column("seq").to_pylist() == sorted(entries.column("seq").to_pylist())
    memtable = Memtable()
    for batch in entries.to_batches():
        memtable.put_batch(batch)
    for key, value in model.items():
        entry = memtable.get(key)
        assert entry is not None and entry[1] == value, key


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=sst_rows(),
    block_size=st.sampled_from([1, 60, 4096]),
    interval=st.sampled_from([1, 1, 4]),
    data=st.data(),
)
def test_damaged_block_with_a_valid_crc_is_corruption_or_rows(
    rows: list[Row], block_size: int, interval: int, data: st.DataObject
) -> None:
    """A block altered and given a matching CRC (what a buggy writer could produce): reading it
    raises CorruptionError or returns rows; no other exception escapes either decode path.

    Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    sst, _ = encode_sst(
        _batch(rows, 0), SstOptions(block_size=block_size, restart_interval=interval)
    )
    clean = SstReader.from_bytes(sst, "d.sst")
    b = data.draw(st.integers(0, clean.block_count - 1))
    start, end = clean.block_offsets[b], clean.block_offsets[b + 1]
    body = bytearray(sst[start : end - 4])
    for _ in range(data.draw(st.integers(1, 2))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    damaged = sst[:start] + bytes(body) + struct.pack(">I", crc32(bytes(body))) + sst[end:]
    try:
        reader = SstReader.from_bytes(damaged, "d.sst")
        reader.read_all()
        for key in _newest(rows):
            reader.get(key)
        list(newest_versions(reader.scan()))
    except CorruptionError:
        pass


def test_block_offsets_tile_the_data_region() -> None:
    """The damage test above locates block b at ``block_offsets[b:b + 2]``.

    Found by the session-21 review of the speed-ups (was test_write_path_encodings.py)."""
    sst, info = encode_sst(
        _batch([(b"a", 2, 0, b"x"), (b"b", 1, 0, b"y")], 0), SstOptions(block_size=1)
    )
    reader = SstReader.from_bytes(sst, "o.sst")
    assert reader.block_count == 2
    assert reader.block_offsets[0] == 0 and reader.block_offsets[-1] == info.filter_offset
