"""Encoding a sorted Arrow batch into SST bytes (layout in ``slatedb_core.sst.format``).

Why it is shaped like this: the engine flushes memtables and compacts in batches of up to millions of
entries, so the writer works on the batch's Arrow buffers directly. Block boundaries come from a
cumulative-size array and ``searchsorted``; each block is then a few buffer slices joined together,
so the Python-level work is per block, never per entry.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.sst import bloom
from slatedb_core.sst.format import (
    BLOCK_TRAILER,
    CODECS,
    FORMAT_VERSION,
    U32,
    Tail,
    align8,
    encode_footer,
    encode_index,
    encode_metadata,
)
from slatedb_core.sst.scratch import Scratch
from slatedb_core.store.checksum import crc32

_MAX_BLOCK_SIZE = 1 << 30
_ZEROS = bytes(8)
ENTRY_OVERHEAD = 17  # seq u64 + two i32 offsets + kind u8 per entry in a raw block


@dataclass(frozen=True)
class SstOptions:
    """How to build an SST. Readers need none of this: everything is recorded in the object."""

    block_size: int = 65536
    bloom_bits_per_key: int = 10
    compression: str = "none"

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or not 1 <= self.block_size <= _MAX_BLOCK_SIZE:
            raise InvalidArgument(f"block_size must be 1..{_MAX_BLOCK_SIZE}, got {self.block_size}")
        if not isinstance(self.bloom_bits_per_key, int) or not 0 <= self.bloom_bits_per_key <= 64:
            raise InvalidArgument(
                f"bloom_bits_per_key must be 0..64, got {self.bloom_bits_per_key}"
            )
        if self.compression not in CODECS:
            raise InvalidArgument(
                f"compression must be one of {sorted(CODECS)}, got {self.compression!r}"
            )


class _Binary:
    """A binary column as numpy views of its offsets and data (no copies)."""

    def __init__(self, arr: pa.Array) -> None:
        n = len(arr)
        width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
        bufs = arr.buffers()
        if n == 0 or bufs[1] is None:
            self.offs: npt.NDArray[np.int64] = np.zeros(n + 1, dtype=np.int64)
            self.data: npt.NDArray[np.uint8] = np.zeros(0, dtype=np.uint8)
            return
        offs = np.frombuffer(bufs[1], dtype=width, count=n + 1, offset=arr.offset * width().itemsize)
        self.offs = offs.astype(np.int64)
        self.data = (
            np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(0, dtype=np.uint8)
        )


def _column(batch: pa.RecordBatch | pa.Table, name: str, want: pa.DataType) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise InvalidArgument(f"SST input has no {name!r} column (schema: {batch.schema})")
    col = batch.column(idx)
    arr: pa.Array = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if arr.null_count:
        if name != "value":
            raise InvalidArgument(f"SST input column {name!r} has nulls")
        arr = pc.fill_null(arr, pa.scalar(b"", arr.type))
    if pa.types.is_binary(want):
        if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            raise InvalidArgument(f"SST input column {name!r} must be binary, got {arr.type}")
        return arr
    if arr.type != want:
        try:
            arr = arr.cast(want)  # safe cast: rejects negative or oversized integers
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidArgument(f"SST input column {name!r} must be {want}: {e}") from None
    return arr


def _check_input(keys: pa.Array, k: _Binary, v: _Binary, kinds: npt.NDArray[np.uint8]) -> None:
    """Reject what would make a wrong SST; all checks are vectorised."""
    klens = np.diff(k.offs)
    if len(klens) and int(klens.min()) == 0:
        raise InvalidArgument("SST keys must not be empty")
    if len(keys) > 1:
        ordered = pc.all(pc.less(keys.slice(0, len(keys) - 1), keys.slice(1))).as_py()
        if not ordered:
            raise InvalidArgument("SST input keys must be sorted ascending and unique")
    if len(kinds) and int(kinds.max()) > 1:
        raise InvalidArgument("SST entry kind must be 0 (value) or 1 (tombstone)")
    tomb = kinds == 1
    if tomb.any() and np.diff(v.offs)[tomb].any():
        raise InvalidArgument("SST tombstones must have empty values")


def _block_bounds(sizes: npt.NDArray[np.int64], block_size: int) -> list[int]:
    """Entry indices where blocks start (plus the end): greedy fill up to block_size raw bytes."""
    n = len(sizes)
    cum = np.cumsum(sizes)
    bounds = [0]
    start = 0
    base = 0
    while start < n:
        end = int(np.searchsorted(cum, base + block_size - 8, side="right"))
        end = max(end, start + 1)  # a single oversized entry gets a block of its own
        bounds.append(end)
        base = int(cum[end - 1])
        start = end
    return bounds


def encode_sst(
    batch: pa.RecordBatch | pa.Table,
    options: SstOptions = SstOptions(),  # frozen, so sharing it is safe
    *,
    metadata: Mapping[str, int] | None = None,
) -> tuple[bytes, SstInfo]:
    """Encode entries already sorted by key (unique) into one SST object and what the manifest keeps."""
    parts, info = _encode_parts(batch, options, metadata)
    return b"".join(parts), info


def encode_sst_into(
    batch: pa.RecordBatch | pa.Table,
    scratch: Scratch,
    options: SstOptions = SstOptions(),
    *,
    metadata: Mapping[str, int] | None = None,
) -> tuple[memoryview, SstInfo]:
    """:func:`encode_sst` into ``scratch``'s buffer ``"sst"``: the same bytes, as a view that is
    valid until that buffer is taken again (write it out first). Bulk encoders use it to skip
    mapping a fresh buffer for every SST (see :mod:`slatedb_core.sst.scratch`)."""
    parts, info = _encode_parts(batch, options, metadata)
    out = scratch.take("sst", info.size_bytes).data
    pos = 0
    for piece in parts:
        mv = memoryview(piece).cast("B")
        out[pos : pos + mv.nbytes] = mv
        pos += mv.nbytes
    assert pos == info.size_bytes
    return out, info


def _encode_parts(
    batch: pa.RecordBatch | pa.Table,
    options: SstOptions,
    metadata: Mapping[str, int] | None,
) -> tuple[list[bytes | memoryview], SstInfo]:
    """The SST's bytes as a list of pieces to concatenate, and its SstInfo."""
    if not isinstance(batch, pa.RecordBatch | pa.Table):
        raise InvalidArgument(f"encode_sst needs a pyarrow RecordBatch or Table, got {type(batch)}")
    meta = encode_metadata(metadata)
    keys = _column(batch, "key", pa.binary())
    values = _column(batch, "value", pa.binary())
    seqs = np.asarray(_column(batch, "seq", pa.uint64()).to_numpy(zero_copy_only=False), np.uint64)
    kinds = np.asarray(_column(batch, "kind", pa.uint8()).to_numpy(zero_copy_only=False), np.uint8)
    k, v = _Binary(keys), _Binary(values)
    _check_input(keys, k, v, kinds)
    n = len(keys)
    code, codec_name = CODECS[options.compression]
    codec = pa.Codec(codec_name) if codec_name else None

    sizes = np.diff(k.offs) + np.diff(v.offs) + ENTRY_OVERHEAD
    bounds = _block_bounds(sizes, options.block_size) if n else [0]
    kdata, vdata = k.data.data, v.data.data
    seqs_le = seqs.astype("<u8", copy=False)
    parts: list[bytes | memoryview] = []
    block_offs = [0]
    counts: list[int] = []
    firsts: list[bytes] = []
    lasts: list[bytes] = []
    pos = 0
    for s, e in itertools.pairwise(bounds):
        k0, k1, v0, v1 = int(k.offs[s]), int(k.offs[e]), int(v.offs[s]), int(v.offs[e])
        if k1 - k0 >= 1 << 31 or v1 - v0 >= 1 << 31:
            raise InvalidArgument("an SST entry is too large (keys or values of 2 GiB or more)")
        raw_parts: list[bytes | memoryview] = [
            seqs_le[s:e].data,
            (k.offs[s : e + 1] - k0).astype("<i4").tobytes(),
            (v.offs[s : e + 1] - v0).astype("<i4").tobytes(),
            kinds[s:e].data,
            kdata[k0:k1],
            vdata[v0:v1],
        ]
        raw_len = 17 * (e - s) + 8 + (k1 - k0) + (v1 - v0)
        if codec is not None:
            body: list[bytes | memoryview] = [codec.compress(b"".join(raw_parts), asbytes=True)]
            body_len = len(body[0])
        else:
            body, body_len = raw_parts, raw_len
        pad = _ZEROS[: align8(body_len) - body_len]
        head = BLOCK_TRAILER.pack(body_len, raw_len, e - s, 0)[:12]
        crc = 0
        for piece in body:
            crc = crc32(piece, crc)
        crc = crc32(head, crc32(pad, crc))
        parts += body
        parts += (pad, head, U32.pack(crc))
        pos += align8(body_len) + 16
        block_offs.append(pos)
        counts.append(e - s)
        firsts.append(bytes(kdata[k0 : int(k.offs[s + 1])]))
        lasts.append(bytes(kdata[int(k.offs[e - 1]) : k1]))

    index = encode_index(block_offs, counts, firsts, lasts)
    filt = bloom.build_filter(bloom.hash_keys(k.data, k.offs), options.bloom_bits_per_key)
    tail = Tail(
        index_offset=pos, index_len=len(index), filter_offset=pos + len(index),
        filter_len=len(filt), entry_count=n, meta_len=len(meta), codec=code,
        format_version=FORMAT_VERSION, block_count=len(counts),
    )
    footer = encode_footer(tail, meta)
    parts += (index, filt, footer)
    info = SstInfo(
        first_key=firsts[0] if n else None, last_key=lasts[-1] if n else None,
        index_offset=tail.index_offset, index_len=tail.index_len,
        filter_offset=tail.filter_offset, filter_len=tail.filter_len,
        compression=code, entry_count=n, size_bytes=pos + len(index) + len(filt) + len(footer),
    )
    return parts, info
