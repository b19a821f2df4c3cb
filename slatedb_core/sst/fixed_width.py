"""SST encoding for entries whose keys all have one width and whose values all have one width:
the common shape of bulk loads (hashes or ids as keys, fixed-size records as values).

Why a second encoder: with both widths fixed, an SST can use format version 2, whose blocks hold
the widths and the one sequence number once instead of 17 bytes of seq, offsets and kind per entry
(``slatedb_core.sst.format``): about 13% fewer bytes to write and read for 16-byte keys and
100-byte values. Every full block then has the same layout, so everything but the key and value
bytes (header, padding, trailer) is one template copied into all blocks at once, and the values
are gathered from the unsorted input straight into their places in the SST (one pass over the
value bytes instead of three: a sorted copy, the block pieces, and the joined object). Readers
decode both versions into the same entries (the tests check it against the general encoder).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.sst import bloom
from slatedb_core.sst.builder import SstOptions
from slatedb_core.sst.format import (
    BLOCK_TRAILER,
    CODECS,
    FIXED_FORMAT_VERSION,
    FIXED_HEADER,
    Tail,
    align8,
    encode_footer,
    encode_index,
    encode_metadata,
)
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32


def block_entries(key_width: int, value_width: int, block_size: int) -> int:
    """Entries per full block: as many as fit in ``block_size`` raw bytes (at least one)."""
    return max(1, (block_size - FIXED_HEADER.size) // (key_width + value_width))


def _blocks(
    out: npt.NDArray[np.uint8],
    keys: npt.NDArray[np.uint8],
    key_width: int,
    values: npt.NDArray[np.uint8],
    value_width: int,
    rows: npt.NDArray[np.int64],
    seq: int,
    count: int,
) -> int:
    """Write ``len(rows) // count`` blocks of ``count`` entries each at the start of ``out``
    (entry i: key ``keys[i]``, value ``values[rows[i]]``); returns the bytes written."""
    nblocks = len(rows) // count
    if nblocks == 0:
        return 0
    raw = FIXED_HEADER.size + count * (key_width + value_width)
    size = align8(raw) + 16
    grid = out[: nblocks * size].reshape(nblocks, size)
    kstart = FIXED_HEADER.size
    vstart = kstart + count * key_width
    # the template: everything of a block but its key and value bytes and its checksum
    template = np.zeros(size, dtype=np.uint8)
    template[:kstart] = np.frombuffer(FIXED_HEADER.pack(seq, key_width, value_width), np.uint8)
    trailer = align8(raw)
    template[trailer : trailer + 12] = np.frombuffer(
        BLOCK_TRAILER.pack(raw, raw, count, 0)[:12], dtype=np.uint8
    )
    grid[:, :kstart] = template[:kstart]
    grid[:, vstart + count * value_width :] = template[vstart + count * value_width :]
    grid[:, kstart:vstart] = keys[: nblocks * count * key_width].reshape(nblocks, -1)
    # per block: numpy's take buffers any output that is not contiguous, so one call per block
    vals = values.view(f"V{value_width}")
    vend = vstart + count * value_width
    crcs = grid[:, size - 4 :].view("<u4")
    for b in range(nblocks):
        block = grid[b]
        np.take(vals, rows[b * count : (b + 1) * count], out=block[vstart:vend].view(vals.dtype),
                mode="clip")  # indices are in range; "raise" would buffer the output too
        crcs[b, 0] = crc32(block[: size - 4])
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
    """The SST of ``len(rows)`` entries: entry i has key ``keys[i * key_width:(i + 1) *
    key_width]`` (keys sorted ascending and unique), the value that is row ``rows[i]`` of
    ``values`` (``value_width`` bytes per row, rows in any order), sequence number ``seq`` and
    kind "value". Uncompressed only. Returns a view of ``scratch``'s buffer ``"sst"`` (valid until
    that buffer is taken again) and the SST's info."""
    n = len(rows)
    options = options or SstOptions()
    if CODECS[options.compression][1] is not None:
        raise InvalidArgument("the fixed-width encoder writes uncompressed SSTs only")
    if n == 0 or key_width < 1 or value_width < 1 or len(keys) < n * key_width:
        raise InvalidArgument("encode_fixed_sst_into needs entries with non-empty keys and values")
    count = block_entries(key_width, value_width, options.block_size)
    full, rest = divmod(n, count)
    entry = key_width + value_width
    if count * max(key_width, value_width) >= 1 << 31:
        raise InvalidArgument("an SST block of fixed-width entries would exceed 2 GiB")
    full_size = align8(FIXED_HEADER.size + count * entry) + 16
    rest_size = align8(FIXED_HEADER.size + rest * entry) + 16 if rest else 0
    data_len = full * full_size + rest_size

    keys2d = keys[: n * key_width].reshape(n, key_width)
    starts = np.arange(0, n, count)
    ends = np.minimum(starts + count, n) - 1
    firsts = [keys2d[i].tobytes() for i in starts.tolist()]
    lasts = [keys2d[i].tobytes() for i in ends.tolist()]
    counts = [count] * full + ([rest] if rest else [])
    block_offs = [*range(0, full * full_size + 1, full_size)] + ([data_len] if rest else [])
    index = encode_index(block_offs, counts, firsts, lasts)
    key_offs = np.arange(n + 1, dtype=np.int64) * key_width
    filt = bloom.build_filter(bloom.hash_keys(keys[: n * key_width], key_offs),
                              options.bloom_bits_per_key)
    meta = encode_metadata(None)
    tail = Tail(
        index_offset=data_len, index_len=len(index), filter_offset=data_len + len(index),
        filter_len=len(filt), entry_count=n, meta_len=len(meta), codec=CODECS["none"][0],
        format_version=FIXED_FORMAT_VERSION, block_count=len(counts),
    )
    footer = encode_footer(tail, meta)
    total = data_len + len(index) + len(filt) + len(footer)

    out = scratch.take("sst", total)
    pos = _blocks(out, keys, key_width, values, value_width, rows, seq, count)
    if rest:
        pos += _blocks(out[pos:], keys[full * count * key_width :], key_width, values,
                       value_width, rows[full * count :], seq, rest)
    assert pos == data_len
    for piece in (index, filt, footer):
        out[pos : pos + len(piece)] = np.frombuffer(piece, dtype=np.uint8)
        pos += len(piece)
    info = SstInfo(
        first_key=firsts[0], last_key=lasts[-1],
        index_offset=tail.index_offset, index_len=tail.index_len,
        filter_offset=tail.filter_offset, filter_len=tail.filter_len,
        compression=tail.codec, entry_count=n, size_bytes=total,
    )
    return out.data, info
