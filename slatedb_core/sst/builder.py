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
from slatedb_core.sst.rows import EncodedRows, block_trailers, encode_rows, pooled_concat
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
    data = (
        np.frombuffer(bufs[2], dtype=np.uint8)
        if bufs[2] is not None and bufs[2].size
        else np.zeros(0, dtype=np.uint8)
    )
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


def _check_input(
    keys: pa.Array,
    koffs: npt.NDArray[np.int64],
    seqs: npt.NDArray[np.uint64],
    kinds: npt.NDArray[np.uint8],
    vlen: npt.NDArray[np.int64],
    wal: bool,
) -> None:
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


@dataclass(frozen=True, slots=True)
class _Rows:
    """A batch's columns as the encoder needs them (checked by :func:`_check_input`)."""

    kdata: npt.NDArray[np.uint8]
    koffs: npt.NDArray[np.int64]
    values: pa.Array
    seqs: npt.NDArray[np.uint64]
    kinds: npt.NDArray[np.uint8]
    vlen: npt.NDArray[np.int64]
    expire: npt.NDArray[np.int64] | None
    create: npt.NDArray[np.int64] | None

    def key(self, i: int) -> bytes:
        return self.kdata[int(self.koffs[i]) : int(self.koffs[i + 1])].tobytes()


def _rows(batch: pa.RecordBatch | pa.Table, wal: bool) -> _Rows:
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
    return _Rows(
        kdata,
        koffs,
        values,
        seqs,
        kinds,
        vlen,
        _timestamps(batch, "expire_ts"),
        _timestamps(batch, "create_ts"),
    )


def _encode(r: _Rows, options: SstOptions) -> EncodedRows:
    return encode_rows(
        r.kdata,
        r.koffs,
        r.values,
        r.seqs,
        r.kinds,
        r.expire,
        r.create,
        options.block_size,
        interval=options.restart_interval,
    )


def _kind_counts(
    kinds: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64]
) -> list[npt.NDArray[np.int64]]:
    """Values, tombstones and merge operands per block (blocks start at ``starts``)."""
    if not len(kinds):
        return [np.zeros(0, dtype=np.int64) for _ in range(3)]
    return [np.add.reduceat((kinds == k).astype(np.int64), starts) for k in range(3)]


@dataclass(frozen=True, slots=True)
class _Summary:
    """What the SST's filter, index, stats and info are made of, besides its data blocks."""

    n: int
    data_len: int
    block_offsets: list[int]  # where each data block starts
    index_keys: list[bytes]
    # every key's bloom hash, in one array or per batch (None: a WAL SST)
    hashes: npt.NDArray[np.uint64] | list[npt.NDArray[np.uint64]] | None
    per_block: list[npt.NDArray[np.int64]] | None  # _kind_counts (None: a WAL SST)
    key_bytes: int
    value_bytes: int
    first: bytes | None
    last: bytes | None


def _meta_parts(
    s: _Summary, options: SstOptions, code: int, wal: bool
) -> tuple[list[bytes | memoryview], SstInfo]:
    """The pieces after the data blocks (filter, index, stats, info and footer) and the info."""
    filt: list[bytes | memoryview] = []
    if not wal and s.n and options.bloom_bits_per_key and s.n >= options.min_filter_keys:
        assert s.hashes is not None
        filt = seal(code, bloom.build_filter_block(s.hashes, options.bloom_bits_per_key))
    filter_len = sum(len(p) for p in filt)
    index = seal(code, encode_index(s.block_offsets, s.index_keys))
    index_offset = s.data_len + filter_len
    index_len = sum(len(p) for p in index)
    stats: list[bytes | memoryview] = []
    if not wal:
        assert s.per_block is not None
        stats = seal(
            code,
            encode_stats(
                s.per_block[0], s.per_block[1], s.per_block[2], s.key_bytes, s.value_bytes
            ),
        )
    stats_offset = index_offset + index_len if stats else 0
    stats_len = sum(len(p) for p in stats)
    meta_offset = index_offset + index_len + stats_len
    info = SstInfo(
        first_key=s.first,
        last_key=s.last,
        index_offset=index_offset,
        index_len=index_len,
        filter_offset=s.data_len,
        filter_len=filter_len,
        compression=code,
        entry_count=s.n,
        size_bytes=1,
        sst_type=SST_TYPE_WAL if wal else SST_TYPE_COMPACTED,
        stats_offset=stats_offset,
        stats_len=stats_len,
        filter_format=FILTER_FORMAT_COMPOSITE,
    )
    probe = encode_sst_info(info)
    size = meta_offset + len(probe) + 4 + FOOTER_LEN
    info = dataclasses.replace(info, size_bytes=size)
    info_bytes = encode_sst_info(info)
    assert len(info_bytes) == len(probe)
    return [*filt, *index, *stats, encode_footer(info_bytes, meta_offset)], info


def _encode_parts(
    batch: pa.RecordBatch | pa.Table, options: SstOptions, wal: bool
) -> tuple[list[bytes | memoryview], SstInfo]:
    """The SST's bytes as a list of pieces to concatenate, and its SstInfo."""
    r = _rows(batch, wal)
    n = len(r.seqs)
    code = CODECS[options.compression][0]
    enc = _encode(r, options)
    parts, offsets = _blocks(enc, code)
    starts = enc.bounds[:-1]
    if wal:
        index_keys = [int(r.seqs[s]).to_bytes(8, "big") for s in starts]
        first, last = (int(r.seqs[0]).to_bytes(8, "big") if n else None), None
    else:
        index_keys = [
            b"" if b == 0 else separator(r.key(s - 1), r.key(s)) for b, s in enumerate(starts)
        ]
        first, last = (r.key(0), r.key(n - 1)) if n else (None, None)
    wants_filter = not wal and n and options.bloom_bits_per_key and n >= options.min_filter_keys
    summary = _Summary(
        n=n,
        data_len=offsets[-1],
        block_offsets=offsets[:-1],
        index_keys=index_keys,
        hashes=bloom.hash_keys(r.kdata, r.koffs) if wants_filter else None,
        per_block=None if wal else _kind_counts(r.kinds, np.asarray(starts, dtype=np.int64)),
        key_bytes=int(r.koffs[-1] - r.koffs[0]),
        value_bytes=int(r.vlen.sum()),
        first=first,
        last=last,
    )
    meta, info = _meta_parts(summary, options, code, wal)
    return [*parts, *meta], info


def _with_timestamps(table: pa.Table) -> pa.Table:
    """``table`` with null ``expire_ts`` / ``create_ts`` columns where it has none."""
    for name in ("expire_ts", "create_ts"):
        if table.schema.get_field_index(name) < 0:
            table = table.append_column(
                pa.field(name, pa.int64()), pa.nulls(table.num_rows, pa.int64())
            )
    return table


class SstStreamEncoder:
    """A compacted SST built from key-sorted batches, block by block, with the bytes
    :func:`encode_sst` makes of the batches' concatenation.

    Each :meth:`add` encodes the rows it can place in finished blocks and appends those blocks'
    bytes to the output; only the rows of the last, unfinished block are kept (copied out of
    the batch, so the batch's buffers are not kept alive), and are encoded again with the next
    batch (block boundaries only depend on the rows from a block's start on, so the blocks come
    out as the one-shot encoder cuts them). What else is kept grows by a few bytes per row: each
    key's bloom hash, per block its offset, index key and row counts. Compacted SSTs only.

    The encoded bytes are either taken whole from :meth:`finish`, or streamed: :meth:`take_part`
    hands out the finished blocks' bytes whenever at least ``min_bytes`` of them are pending
    (the caller writes them to the store and drops them), and :meth:`finish_parts` the rest;
    the parts' concatenation is :meth:`finish`'s bytes. Streamed, the encoder holds one part
    instead of the whole SST (issue 42, goal 3)."""

    def __init__(self, options: SstOptions = SstOptions()) -> None:  # frozen, so sharing is safe
        self.options = options
        self._code = CODECS[options.compression][0]
        # the encoded blocks not yet handed out, as the pieces :func:`_blocks` made (views of
        # the encoded rows, in Arrow's pool), copied once into a part in Arrow's pool too:
        # a bytearray grown block by block is realloc'd in glibc's heaps, which keep the
        # freed memory resident (issue 42, goal 3)
        self._out: list[bytes | memoryview] = []
        self._pending = 0  # their bytes
        self._taken = 0  # bytes handed out by take_part
        self._offsets: list[int] = []
        self._index_keys: list[bytes] = []
        self._hashes: list[npt.NDArray[np.uint64]] = []
        self._per_block: list[list[npt.NDArray[np.int64]]] = []
        self._carry: pa.Table | None = None
        self._rows = self._key_bytes = self._value_bytes = 0
        self._first: bytes | None = None
        self._last: bytes | None = None

    @property
    def rows(self) -> int:
        """Rows added so far."""
        return self._rows + self.buffered_rows

    @property
    def buffered_rows(self) -> int:
        """Rows added but not yet encoded: at most those of one block."""
        return 0 if self._carry is None else self._carry.num_rows

    @property
    def encoded_bytes(self) -> int:
        """Bytes of the data blocks written so far (handed out or not)."""
        return self._taken + self._pending

    def take_part(self, min_bytes: int) -> memoryview | None:
        """The encoded bytes not yet handed out, if there are at least ``min_bytes`` of them
        (None otherwise), in one buffer from Arrow's memory pool (a byte ``memoryview``). The
        encoder keeps no reference to the buffer it returns."""
        if self._pending < min_bytes or not self._pending:
            return None
        return self._take_pending()

    def _take_pending(self) -> memoryview:
        part = pooled_concat(self._out)
        self._out = []
        self._taken += self._pending
        self._pending = 0
        return part

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Add rows whose keys follow (are above) every key added before."""
        if not isinstance(batch, pa.RecordBatch | pa.Table):
            raise InvalidArgument(
                f"encode_sst needs a pyarrow RecordBatch or Table, got {type(batch)}"
            )
        if batch.num_rows == 0:
            return
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if self._carry is not None:
            carry = self._carry
            if carry.num_columns != table.num_columns:  # rows with and without timestamps
                carry, table = _with_timestamps(carry), _with_timestamps(table)
            table = pa.concat_tables([carry, table.select(carry.column_names)])
        self._carry = None
        self._encode_blocks(table, final=False)

    def finish(self) -> tuple[memoryview, SstInfo]:
        """The SST's bytes (a view of a buffer this encoder no longer uses) and its info; only
        when no part was taken (:meth:`take_part`)."""
        if self._taken:
            raise InvalidArgument("finish after take_part: use finish_parts")
        parts, info = self.finish_parts()
        out = pooled_concat(parts)
        assert len(out) == info.size_bytes
        return out, info

    def finish_parts(self) -> tuple[list[bytes | memoryview], SstInfo]:
        """The SST's bytes not yet handed out by :meth:`take_part`, as pieces to write in order
        (the first the data blocks' bytes in a buffer from Arrow's memory pool, which this
        encoder no longer uses), and the SST's info."""
        if self._carry is not None:
            carry, self._carry = self._carry, None
            self._encode_blocks(carry, final=True)
        n = self._rows
        wants_filter = n and self.options.bloom_bits_per_key and n >= self.options.min_filter_keys
        empty = np.zeros(0, dtype=np.int64)
        summary = _Summary(
            n=n,
            data_len=self.encoded_bytes,
            block_offsets=self._offsets,
            index_keys=self._index_keys,
            hashes=self._hashes if wants_filter else None,  # not joined: build_bloom
            per_block=[
                np.concatenate([p[k] for p in self._per_block]) if self._per_block else empty
                for k in range(3)
            ],
            key_bytes=self._key_bytes,
            value_bytes=self._value_bytes,
            first=self._first,
            last=self._last,
        )
        meta, info = _meta_parts(summary, self.options, self._code, False)
        out = self._take_pending()
        assert self._taken + sum(len(p) for p in meta) == info.size_bytes
        return [out, *meta], info

    def _encode_blocks(self, table: pa.Table, *, final: bool) -> None:
        """Append the finished blocks of ``table``'s rows (all of them when ``final``) and keep
        the rest as the carry."""
        r = _rows(table, False)
        enc = _encode(r, self.options)
        keep = len(enc.bounds) - 1 if final else len(enc.bounds) - 2
        end = enc.bounds[keep]
        if keep == 0:
            self._carry = table
            return
        if end < table.num_rows:  # a copy: a slice would keep the whole batch's buffers alive
            self._carry = table.take(pa.array(np.arange(end, table.num_rows)))
        done = EncodedRows(
            enc.data, enc.row_offs[: end + 1], enc.bounds[: keep + 1], enc.restart[:end]
        )
        parts, offsets = _blocks(done, self._code)
        base = self.encoded_bytes
        self._out += parts
        self._pending += offsets[-1]
        starts = done.bounds[:-1]
        prev = self._last  # the key before row 0: the last key of the previous block
        self._index_keys += [
            b""
            if prev is None and s == 0
            else separator(r.key(s - 1) if s else prev or b"", r.key(s))
            for s in starts
        ]
        self._offsets += [base + o for o in offsets[:-1]]
        if self.options.bloom_bits_per_key:
            self._hashes.append(bloom.hash_keys(r.kdata, r.koffs[: end + 1]))
        self._per_block.append(_kind_counts(r.kinds[:end], np.asarray(starts, dtype=np.int64)))
        self._key_bytes += int(r.koffs[end] - r.koffs[0])
        self._value_bytes += int(r.vlen[:end].sum())
        if self._first is None:
            self._first = r.key(0)
        self._last = r.key(end - 1)
        self._rows += end
