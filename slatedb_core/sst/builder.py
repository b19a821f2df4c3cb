"""Encoding Arrow batches into SlateDB 0.17 SST objects (layout in :mod:`slatedb_core.sst.format`).

Why it is shaped like this: the engine flushes memtables and compacts batches of up to millions of
rows, so the rows of the whole batch are encoded at once (:mod:`slatedb_core.sst.rows`) and the
Python-level work left is per block: cutting the rows' bytes into blocks, their trailers and
CRCs, and the index keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.sst_info import encode_sst_info
from slatedb_core.sst import bloom
from slatedb_core.sst.format import (
    CODECS,
    FILTER_FORMAT_COMPOSITE,
    FOOTER_LEN,
    KIND_MERGE,
    KIND_TOMBSTONE,
    MAX_BLOCK_SIZE,
    SST_TYPE_COMPACTED,
    SST_TYPE_WAL,
    U32,
    encode_footer,
    seal,
)
from slatedb_core.sst.index import encode_index, encode_stats, separator
from slatedb_core.sst.rows import EncodedRows, block_trailers, encode_rows
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32

_NO_TS = np.iinfo(np.int64).min


@dataclass(frozen=True)
class SstOptions:
    """How to build an SST. Readers need none of this: everything is recorded in the object.

    ``min_filter_keys``: SSTs with fewer rows get no bloom filter (SlateDB's setting of the same
    name; its default is 1000, ours 0: a filter on every SST that has rows).

    ``restart_interval``: rows per restart point of a data block. SlateDB writes 16 (each
    restart row stores its key whole, the rows after it only what differs from the previous
    key); its reader accepts any interval, as it finds rows through the restart offsets. Ours
    is 1 by default: every key stored whole (2 bytes more per row for its restart offset), so
    a block's rows are all found at once from its restart array when decoding, and encoding
    needs no shared prefixes. 16 writes exactly SlateDB's bytes."""

    block_size: int = 65536
    bloom_bits_per_key: int = 10
    compression: str = "none"
    min_filter_keys: int = 0
    restart_interval: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be 1..{MAX_BLOCK_SIZE}, got {self.block_size}")
        if not isinstance(self.bloom_bits_per_key, int) or not 0 <= self.bloom_bits_per_key <= 64:
            raise InvalidArgument(
                f"bloom_bits_per_key must be 0..64, got {self.bloom_bits_per_key}"
            )
        if self.compression not in CODECS:
            raise InvalidArgument(
                f"compression must be one of {sorted(CODECS)}, got {self.compression!r}"
            )
        if not isinstance(self.min_filter_keys, int) or self.min_filter_keys < 0:
            raise InvalidArgument(f"min_filter_keys must be >= 0, got {self.min_filter_keys}")
        if not isinstance(self.restart_interval, int) or not 1 <= self.restart_interval <= 1 << 16:
            raise InvalidArgument(f"restart_interval must be 1..65536, got {self.restart_interval}")


def _column(batch: pa.RecordBatch | pa.Table, name: str, want: pa.DataType) -> pa.Array | None:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        if name in ("expire_ts", "create_ts"):
            return None
        raise InvalidArgument(f"SST input has no {name!r} column (schema: {batch.schema})")
    col = batch.column(idx)
    arr: pa.Array = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count and name in ("key", "seq", "kind"):
        raise InvalidArgument(f"SST input column {name!r} has nulls")
    if pa.types.is_binary(want):
        if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            raise InvalidArgument(f"SST input column {name!r} must be binary, got {arr.type}")
        if arr.null_count:
            arr = pc.fill_null(arr, pa.scalar(b"", arr.type))
        if pa.types.is_large_binary(arr.type):
            try:
                arr = arr.cast(pa.binary())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidArgument(f"SST input column {name!r} is too large: {e}") from None
        return arr
    if arr.type != want:
        try:
            arr = arr.cast(want)  # safe cast: rejects negative or oversized integers
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgument(f"SST input column {name!r} must be {want}: {e}") from None
    return arr


def _binary(arr: pa.Array) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A binary column's data and offsets (zero-copy views)."""
    n = len(arr)
    bufs = arr.buffers()
    if n == 0 or bufs[1] is None:
        return np.zeros(0, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64)
    offs = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1, offset=4 * arr.offset)
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(0, dtype=np.uint8))
    return data, offs.astype(np.int64)


def _timestamps(batch: pa.RecordBatch | pa.Table, name: str) -> npt.NDArray[np.int64] | None:
    arr = _column(batch, name, pa.int64())
    if arr is None or arr.null_count == len(arr):
        return None
    if not arr.null_count:  # every row has one (a WAL SST's create_ts): a view, no mask
        out = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.int64)
        if out.min() == _NO_TS:
            raise InvalidArgument(f"SST input column {name!r} holds int64's minimum")
        return out
    out = np.asarray(pc.fill_null(arr, _NO_TS).to_numpy(zero_copy_only=False), dtype=np.int64)
    if np.any(out[arr.is_valid().to_numpy(zero_copy_only=False)] == _NO_TS):
        raise InvalidArgument(f"SST input column {name!r} holds int64's minimum")
    return out


def encode_sst(
    batch: pa.RecordBatch | pa.Table,
    options: SstOptions = SstOptions(),  # frozen, so sharing it is safe
    *,
    wal: bool = False,
) -> tuple[bytes, SstInfo]:
    """Encode rows into one SST object and what the manifest keeps.

    Rows have ``key``, ``seq``, ``kind`` (0 value, 1 tombstone, 2 merge operand) and ``value``
    columns, optionally ``expire_ts`` / ``create_ts`` (int64 ms, null where absent). A compacted
    SST's keys are sorted ascending (the versions of one key newest first, as SlateDB
    keeps them); a WAL SST's (``wal=True``, SlateDB's
    ``SstType::Wal``) rows are in write order, their seqs ascending."""
    parts, info = _encode_parts(batch, options, wal)
    return b"".join(parts), info


def encode_sst_into(
    batch: pa.RecordBatch | pa.Table,
    scratch: Scratch,
    options: SstOptions = SstOptions(),
) -> tuple[memoryview, SstInfo]:
    """:func:`encode_sst` into ``scratch``'s buffer ``"sst"``: the same bytes, as a view that is
    valid until that buffer is taken again (write it out first). Bulk encoders use it to skip
    mapping a fresh buffer for every SST (see :mod:`slatedb_core.sst.scratch`)."""
    parts, info = _encode_parts(batch, options, False)
    out = scratch.take("sst", info.size_bytes).data
    pos = 0
    for piece in parts:
        mv = memoryview(piece).cast("B")
        out[pos : pos + mv.nbytes] = mv
        pos += mv.nbytes
    assert pos == info.size_bytes
    return out, info


def _check_input(keys: pa.Array, koffs: npt.NDArray[np.int64], seqs: npt.NDArray[np.uint64],
                 kinds: npt.NDArray[np.uint8], vlen: npt.NDArray[np.int64], wal: bool) -> None:
    """Reject what would make a wrong SST; all checks are vectorised."""
    klens = np.diff(koffs)
    if len(klens) and int(klens.min()) == 0:
        raise InvalidArgument("SST keys must not be empty")
    if len(klens) and int(klens.max()) >= 1 << 16:
        raise InvalidArgument("SST keys must be shorter than 64 KiB")
    if len(keys) > 1:
        if wal:
            # SlateDB 0.17 gives every row of one write batch the same seq
            if np.any(seqs[1:] < seqs[:-1]):
                raise InvalidArgument("WAL SST rows must be in seq order")
        else:
            a, b = keys.slice(0, len(keys) - 1), keys.slice(1)
            if not pc.all(pc.less(a, b)).as_py():  # unique keys (the common case) end here
                if not pc.all(pc.less_equal(a, b)).as_py():
                    raise InvalidArgument("SST input keys must be sorted ascending")
                same = np.asarray(pc.equal(a, b).to_numpy(zero_copy_only=False), dtype=np.bool_)
                if np.any(seqs[1:][same] >= seqs[:-1][same]):
                    raise InvalidArgument("SST rows of one key must have descending seqs")
    if len(kinds) and int(kinds.max()) > KIND_MERGE:
        raise InvalidArgument("SST row kind must be 0 (value), 1 (tombstone) or 2 (merge)")
    if np.any(vlen[kinds == KIND_TOMBSTONE]):
        raise InvalidArgument("SST tombstones must have empty values")


def _blocks(enc: EncodedRows, code: int) -> tuple[list[bytes | memoryview], list[int]]:
    """Every data block as stored (rows, trailer, compressed unless code 0, CRC) and the
    offsets at which the blocks start (plus the end)."""
    parts: list[bytes | memoryview] = []
    offsets = [0]
    mv = memoryview(enc.data)
    at = enc.row_offs[np.asarray(enc.bounds, dtype=np.int64)].tolist()  # where blocks' rows start
    trailers, tstarts = block_trailers(enc)
    tmv = memoryview(trailers)
    for b in range(len(enc.bounds) - 1):
        rows = mv[at[b] : at[b + 1]]
        trailer = tmv[tstarts[b] : tstarts[b + 1]]
        if code:
            sealed = seal(code, b"".join([rows, trailer]))
            parts += sealed
            size = len(sealed[0]) + 4
        else:
            parts += (rows, trailer, U32.pack(crc32(trailer, crc32(rows))))
            size = len(rows) + len(trailer) + 4
        offsets.append(offsets[-1] + size)
    return parts, offsets


def _encode_parts(
    batch: pa.RecordBatch | pa.Table, options: SstOptions, wal: bool
) -> tuple[list[bytes | memoryview], SstInfo]:
    """The SST's bytes as a list of pieces to concatenate, and its SstInfo."""
    if not isinstance(batch, pa.RecordBatch | pa.Table):
        raise InvalidArgument(f"encode_sst needs a pyarrow RecordBatch or Table, got {type(batch)}")
    keys = _column(batch, "key", pa.binary())
    values = _column(batch, "value", pa.binary())
    seq_col = _column(batch, "seq", pa.uint64())
    kind_col = _column(batch, "kind", pa.uint8())
    assert keys is not None and values is not None and seq_col is not None and kind_col is not None
    seqs = np.asarray(seq_col.to_numpy(zero_copy_only=False), np.uint64)
    kinds = np.asarray(kind_col.to_numpy(zero_copy_only=False), np.uint8)
    kdata, koffs = _binary(keys)
    vlen = np.diff(_binary(values)[1])
    _check_input(keys, koffs, seqs, kinds, vlen, wal)
    n = len(keys)
    code = CODECS[options.compression][0]
    enc = encode_rows(kdata, koffs, values, seqs, kinds, _timestamps(batch, "expire_ts"),
                      _timestamps(batch, "create_ts"), options.block_size,
                      interval=options.restart_interval)
    parts, offsets = _blocks(enc, code)
    starts = enc.bounds[:-1]
    data_len = offsets[-1]

    def key(i: int) -> bytes:
        return kdata[int(koffs[i]) : int(koffs[i + 1])].tobytes()

    if wal:
        index_keys = [int(seqs[s]).to_bytes(8, "big") for s in starts]
    else:
        index_keys = [b"" if b == 0 else separator(key(s - 1), key(s))
                      for b, s in enumerate(starts)]
    filt: list[bytes | memoryview] = []
    if not wal and n and options.bloom_bits_per_key and n >= options.min_filter_keys:
        hashes = bloom.hash_keys(kdata, koffs)
        filt = seal(code, bloom.build_filter_block(hashes, options.bloom_bits_per_key))
    filter_len = sum(len(p) for p in filt)
    index = seal(code, encode_index(offsets[:-1], index_keys))
    index_offset = data_len + filter_len
    index_len = sum(len(p) for p in index)
    stats: list[bytes | memoryview] = []
    if not wal:
        bounds = np.asarray(enc.bounds[:-1], dtype=np.int64)
        per_block = [np.add.reduceat((kinds == k).astype(np.int64), bounds) if n
                     else np.zeros(0, dtype=np.int64) for k in range(3)]
        stats = seal(code, encode_stats(per_block[0], per_block[1], per_block[2],
                                        int(koffs[-1] - koffs[0]), int(vlen.sum())))
    stats_offset = index_offset + index_len if stats else 0
    stats_len = sum(len(p) for p in stats)
    meta_offset = index_offset + index_len + stats_len
    if wal:
        first, last = (int(seqs[0]).to_bytes(8, "big") if n else None), None
    else:
        first, last = (key(0), key(n - 1)) if n else (None, None)
    info = SstInfo(
        first_key=first, last_key=last, index_offset=index_offset, index_len=index_len,
        filter_offset=data_len, filter_len=filter_len, compression=code, entry_count=n,
        size_bytes=1, sst_type=SST_TYPE_WAL if wal else SST_TYPE_COMPACTED,
        stats_offset=stats_offset, stats_len=stats_len, filter_format=FILTER_FORMAT_COMPOSITE,
    )
    probe = encode_sst_info(info)
    size = meta_offset + len(probe) + 4 + FOOTER_LEN
    info = dataclasses.replace(info, size_bytes=size)
    info_bytes = encode_sst_info(info)
    assert len(info_bytes) == len(probe)
    parts += (*filt, *index, *stats, encode_footer(info_bytes, meta_offset))
    return parts, info

