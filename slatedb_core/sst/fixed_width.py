"""SST encoding for rows whose keys all have one width and whose values all have one width: the
common shape of bulk loads (hashes or ids as keys, fixed-size records as values).

Why a second encoder: the rows are written in SlateDB's row codec v2 without prefix compression
(every key stored whole, ``shared`` 0, which SlateDB reads like any other row), so every row has
the same length and every full block the same layout. Restart points every
``SstOptions.restart_interval`` rows (1 by default, as the general encoder: then its bytes are the
general encoder's for the same rows). Everything of a block but its keys,
values and CRC (row headers, seq and flags, the restart trailer) is one template copied into all
blocks at once, and the values are gathered from the unsorted input straight into their places
in the SST (one pass over the value bytes). Readers decode these SSTs like any other (the tests
check them against the general encoder's rows).
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.sst_info import encode_sst_info
from slatedb_core.sst import bloom
from slatedb_core.sst.builder import SstOptions
from slatedb_core.sst.format import (
    CODECS,
    FILTER_FORMAT_COMPOSITE,
    FOOTER_LEN,
    SST_TYPE_COMPACTED,
    encode_footer,
    seal,
)
from slatedb_core.sst.index import encode_index, encode_stats, separator
from slatedb_core.sst.rows import varint_bytes
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32


def block_entries(key_width: int, value_width: int, block_size: int, interval: int = 1) -> int:
    """Rows per full block: as many as fit in ``block_size`` with the trailer (a restart offset
    every ``interval`` rows, and their count; at least one row)."""
    row = (
        1
        + len(varint_bytes(key_width))
        + len(varint_bytes(value_width))
        + key_width
        + value_width
        + 9
    )
    c = max(1, (block_size - 2) // (row + 2))
    while c * row + 2 * ((c + interval - 1) // interval) + 2 <= block_size:
        c += 1
    return max(1, c - 1)


def _blocks(
    out: npt.NDArray[np.uint8],
    keys: npt.NDArray[np.uint8],
    key_width: int,
    values: npt.NDArray[np.uint8],
    value_width: int,
    rows: npt.NDArray[np.int64],
    seq: int,
    count: int,
    interval: int,
) -> int:
    """Write ``len(rows) // count`` blocks of ``count`` rows each at the start of ``out``
    (row i: key ``keys[i]``, value ``values[rows[i]]``); returns the bytes written."""
    nblocks = len(rows) // count
    if nblocks == 0:
        return 0
    head = b"\x00" + varint_bytes(key_width) + varint_bytes(value_width)
    row = len(head) + key_width + value_width + 9
    restarts = np.arange(0, count, interval, dtype=np.int64) * row
    trailer = restarts.astype(">u2").tobytes() + len(restarts).to_bytes(2, "big")
    size = count * row + len(trailer) + 4
    grid = out[: nblocks * size].reshape(nblocks, size)
    body = np.lib.stride_tricks.as_strided(
        grid, shape=(nblocks, count, row), strides=(size, row, 1)
    )
    body[:, :, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    k0 = len(head)
    v0 = k0 + key_width
    body[:, :, v0 + value_width : v0 + value_width + 8] = np.frombuffer(
        seq.to_bytes(8, "big"), dtype=np.uint8
    )
    body[:, :, row - 1] = 0
    grid[:, count * row : size - 4] = np.frombuffer(trailer, dtype=np.uint8)
    body[:, :, k0:v0] = keys[: nblocks * count * key_width].reshape(nblocks, count, key_width)
    vals = values.view(f"V{value_width}")
    crcs = grid[:, size - 4 :]
    for b in range(nblocks):
        # one take per block: numpy buffers a take whose output is not contiguous anyway
        vb = body[b, :, v0 : v0 + value_width]
        vb[...] = vals[rows[b * count : (b + 1) * count]].view(np.uint8).reshape(count, value_width)
        crcs[b] = np.frombuffer(crc32(grid[b, : size - 4]).to_bytes(4, "big"), dtype=np.uint8)
    return nblocks * size


def encode_fixed_sst_into(
    keys: npt.NDArray[np.uint8],
    key_width: int,
    values: npt.NDArray[np.uint8],
    value_width: int,
    rows: npt.NDArray[np.int64],
    seq: int,
    scratch: Scratch,
    options: SstOptions | None = None,
) -> tuple[memoryview, SstInfo]:
    """The SST of ``len(rows)`` rows: row i has key ``keys[i * key_width:(i + 1) * key_width]``
    (keys sorted ascending and unique), the value that is row ``rows[i]`` of ``values``
    (``value_width`` bytes per row, rows in any order), sequence number ``seq`` and kind
    "value". Uncompressed only. Returns a view of ``scratch``'s buffer ``"sst"`` (valid until
    that buffer is taken again) and the SST's info."""
    n = len(rows)
    options = options or SstOptions()
    if CODECS[options.compression][1] is not None:
        raise InvalidArgument("the fixed-width encoder writes uncompressed SSTs only")
    if n == 0 or key_width < 1 or value_width < 1 or len(keys) < n * key_width:
        raise InvalidArgument("encode_fixed_sst_into needs rows with non-empty keys and values")
    if key_width >= 1 << 16:
        raise InvalidArgument("SST keys must be shorter than 64 KiB")
    interval = options.restart_interval
    count = block_entries(key_width, value_width, options.block_size, interval)
    full, rest = divmod(n, count)
    row = (
        1
        + len(varint_bytes(key_width))
        + len(varint_bytes(value_width))
        + key_width
        + value_width
        + 9
    )

    def block_len(c: int) -> int:
        return c * row + 2 * ((c + interval - 1) // interval) + 2 + 4

    counts = [count] * full + ([rest] if rest else [])
    offsets = [0, *itertools.accumulate(block_len(c) for c in counts)]
    data_len = offsets[-1]
    keys2d = keys[: n * key_width].reshape(n, key_width)
    starts = np.arange(0, n, count)
    index_keys = [b""] + [
        separator(keys2d[s - 1].tobytes(), keys2d[s].tobytes()) for s in starts[1:].tolist()
    ]
    filt: list[bytes | memoryview] = []
    if options.bloom_bits_per_key and n >= options.min_filter_keys:
        koffs = np.arange(n + 1, dtype=np.int64) * key_width
        filt = seal(
            0,
            bloom.build_filter_block(
                bloom.hash_keys(keys[: n * key_width], koffs), options.bloom_bits_per_key
            ),
        )
    filter_len = sum(len(p) for p in filt)
    index = seal(0, encode_index(offsets[:-1], index_keys))
    index_len = sum(len(p) for p in index)
    zeros = np.zeros(len(counts), dtype=np.int64)
    stats = seal(
        0,
        encode_stats(
            np.asarray(counts, dtype=np.int64), zeros, zeros, n * key_width, n * value_width
        ),
    )
    stats_len = sum(len(p) for p in stats)
    index_offset = data_len + filter_len
    meta_offset = index_offset + index_len + stats_len
    info = SstInfo(
        first_key=keys2d[0].tobytes(),
        last_key=keys2d[n - 1].tobytes(),
        index_offset=index_offset,
        index_len=index_len,
        filter_offset=data_len,
        filter_len=filter_len,
        compression=0,
        entry_count=n,
        size_bytes=1,
        sst_type=SST_TYPE_COMPACTED,
        stats_offset=index_offset + index_len,
        stats_len=stats_len,
        filter_format=FILTER_FORMAT_COMPOSITE,
    )
    probe = encode_sst_info(info)
    total = meta_offset + len(probe) + 4 + FOOTER_LEN
    info = SstInfo(
        first_key=info.first_key,
        last_key=info.last_key,
        index_offset=index_offset,
        index_len=index_len,
        filter_offset=data_len,
        filter_len=filter_len,
        compression=0,
        entry_count=n,
        size_bytes=total,
        sst_type=SST_TYPE_COMPACTED,
        stats_offset=index_offset + index_len,
        stats_len=stats_len,
        filter_format=FILTER_FORMAT_COMPOSITE,
    )
    footer = encode_footer(encode_sst_info(info), meta_offset)

    out = scratch.take("sst", total)
    pos = _blocks(out, keys, key_width, values, value_width, rows, seq, count, interval)
    if rest:
        pos += _blocks(
            out[pos:],
            keys[full * count * key_width :],
            key_width,
            values,
            value_width,
            rows[full * count :],
            seq,
            rest,
            interval,
        )
    assert pos == data_len
    for piece in (*filt, *index, *stats, footer):
        mv = memoryview(piece).cast("B")
        out[pos : pos + mv.nbytes] = np.frombuffer(mv, dtype=np.uint8)
        pos += mv.nbytes
    assert pos == total
    return out.data, info
