"""Reading SSTs: open with one ranged GET, point lookups through the block cache, lazy range scans.

Why it is shaped like this: with the manifest's ``SstInfo`` the reader already knows where the index
starts and how long the object is, so opening costs exactly one request; blocks are fetched only when
a lookup or scan needs them. A decoded block is a zero-copy view over the fetched (or decompressed)
bytes, and is validated before anything is built from it, so a damaged object surfaces as
``CorruptionError`` and never as wrong data or a stray ``IndexError``/``ArrowInvalid``.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from functools import lru_cache
from typing import cast

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError, InvalidArgument, StoreError
from slatedb_core.manifest.model import SstInfo
from slatedb_core.sst.bloom import BloomFilter
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.format import (
    BLOCK_TRAILER,
    BLOCK_TRAILER_LEN,
    CODEC_NAMES,
    CODECS,
    ENTRY_SCHEMA,
    FIXED_FORMAT_VERSION,
    FIXED_HEADER,
    FORMAT_VERSION,
    MAGIC,
    TAIL,
    TAIL_LEN,
    Index,
    align8,
    decode_index,
    decode_metadata,
    decode_tail,
    raw_layout,
)
from slatedb_core.store.checksum import crc32
from slatedb_core.store.objectstore import ObjectStore

TAIL_READ = 64 * 1024  # without SstInfo: bytes read from the end, hoping to cover index + filter
READAHEAD_START = 256 * 1024  # a scan's first GET; doubles per GET up to READAHEAD_MAX
READAHEAD_MAX = 8 * 1024 * 1024
_BLOCK_OVERHEAD = 512  # rough Python/Arrow object overhead per cached block
_KEY_OBJECT_OVERHEAD = 40  # a bytes object's header, per key in a block's lookup list
_DECODE_ERRORS = (ValueError, IndexError, struct.error, OverflowError, pa.ArrowException)



@lru_cache(maxsize=64)
def _fixed_offsets(n: int, width: int) -> tuple[np.ndarray, pa.Buffer]:
    """Offsets ``0, width, .., n * width`` of a fixed-width block column (read-only, shared)."""
    offs = np.arange(n + 1, dtype="<i4") * np.int32(width)
    offs.flags.writeable = False
    return offs, pa.py_buffer(offs)


@lru_cache(maxsize=64)
def _fixed_seqs(n: int, value: int, dtype: type = np.uint64) -> tuple[np.ndarray, pa.Buffer]:
    """``n`` copies of ``value`` (a block's seqs, or its kinds as uint8; read-only, shared)."""
    arr = np.full(n, value, dtype=np.dtype(dtype).newbyteorder("<"))
    arr.flags.writeable = False
    return arr, pa.py_buffer(arr)

class Block:
    """One decoded data block: an Arrow batch plus what a point lookup needs to binary-search it."""

    __slots__ = ("_kinds", "_kmv", "_koffs", "_search", "_seqs", "_values", "_voffs", "batch", "n",
                 "nbytes")

    def __init__(
        self, name: str, idx: int, buf: pa.Buffer, expect_n: int, codec: pa.Codec | None,
        layout: int = FORMAT_VERSION,
    ) -> None:
        size = buf.size
        body_len, raw_len, n, crc = BLOCK_TRAILER.unpack_from(buf, size - BLOCK_TRAILER_LEN)
        if crc32(memoryview(buf)[: size - 4]) != crc:
            raise CorruptionError(name, f"block {idx} checksum mismatch")
        if align8(body_len) + BLOCK_TRAILER_LEN != size or n != expect_n:
            raise CorruptionError(name, f"block {idx} length or entry count disagrees with the index")
        if raw_len < (FIXED_HEADER.size if layout == FIXED_FORMAT_VERSION else raw_layout(n)[3]):
            raise CorruptionError(name, f"block {idx} is too short for {n} entries")
        raw = buf.slice(0, body_len)
        if codec is None:
            if raw_len != body_len:
                raise CorruptionError(name, f"block {idx} raw length disagrees with its body")
        else:
            try:
                raw = codec.decompress(raw, decompressed_size=raw_len)
            except (OSError, pa.ArrowException) as e:
                raise CorruptionError(name, f"block {idx} does not decompress: {e}") from None
        if layout == FIXED_FORMAT_VERSION:
            seq, kw, vw = FIXED_HEADER.unpack_from(raw, 0)
            if kw < 1 or FIXED_HEADER.size + n * (kw + vw) != raw_len or n * max(kw, vw) >= 1 << 31:
                raise CorruptionError(name, f"block {idx} widths disagree with its length")
            # every full block of an SST has one shape: its rebuilt columns are shared
            koffs, ko_buf = _fixed_offsets(n, kw)
            voffs, vo_buf = _fixed_offsets(n, vw)
            seqs, seq_buf = _fixed_seqs(n, seq)
            kinds, kind_buf = _fixed_seqs(n, 0, np.uint8)
            key_at, klen, vlen = FIXED_HEADER.size, n * kw, n * vw
        else:
            ko_at, vo_at, kind_at, key_at = raw_layout(n)
            koffs = np.frombuffer(raw, dtype="<i4", count=n + 1, offset=ko_at)
            voffs = np.frombuffer(raw, dtype="<i4", count=n + 1, offset=vo_at)
            klen, vlen = int(koffs[n]), int(voffs[n])
            if (
                koffs[0] != 0 or voffs[0] != 0 or key_at + klen + vlen != raw_len
                or np.any(koffs[1:] <= koffs[:-1]) or np.any(voffs[1:] < voffs[:-1])
            ):
                raise CorruptionError(name, f"block {idx} has inconsistent key or value offsets")
            kinds = np.frombuffer(raw, dtype=np.uint8, count=n, offset=kind_at)
            if int(kinds.max()) > 1:
                raise CorruptionError(name, f"block {idx} has an unknown entry kind")
            seqs = np.frombuffer(raw, dtype="<u8", count=n, offset=0)
            ko_buf, vo_buf = raw.slice(ko_at, 4 * n + 4), raw.slice(vo_at, 4 * n + 4)
            seq_buf, kind_buf = raw.slice(0, 8 * n), raw.slice(kind_at, n)
        kbuf = raw.slice(key_at, klen)
        vbuf = raw.slice(key_at + klen, vlen)
        arrays = [
            pa.Array.from_buffers(pa.binary(), n, [None, ko_buf, kbuf]),
            pa.Array.from_buffers(pa.uint64(), n, [None, seq_buf]),
            pa.Array.from_buffers(pa.uint8(), n, [None, kind_buf]),
            pa.Array.from_buffers(pa.binary(), n, [None, vo_buf, vbuf]),
        ]
        # The CRC proves the block is what the writer wrote, not that the writer sorted it; every
        # lookup bisects, so out-of-order keys would silently hide entries (~15 us per 1k keys).
        if n > 1 and not pc.all(pc.less(arrays[0].slice(0, n - 1), arrays[0].slice(1))).as_py():
            raise CorruptionError(name, f"block {idx} keys are not strictly increasing")
        self.batch = pa.RecordBatch.from_arrays(arrays, schema=ENTRY_SCHEMA)
        self.n = n
        # a fixed-width block's offsets, seqs and kinds are rebuilt, not views of the block
        # (shared by blocks of one shape, so counting them per block over-counts: within budget)
        rebuilt = 17 * n + 8 if layout == FIXED_FORMAT_VERSION else 0
        self.nbytes = raw_len + rebuilt + _BLOCK_OVERHEAD
        self._koffs = koffs
        self._kmv = memoryview(kbuf)
        self._search: list[bytes] | None = None
        self._seqs = seqs
        self._kinds = kinds
        self._values = memoryview(vbuf)
        self._voffs = voffs

    def key(self, i: int) -> bytes:
        ko = self._koffs
        return self._kmv[int(ko[i]) : int(ko[i + 1])].tobytes()

    def searchable(self) -> list[bytes]:
        """The keys as a Python list, so a lookup is one C-level ``bisect`` (~1 µs).

        Built on the first lookup (a plain scan never needs it) and counted in ``nbytes``; the
        reader builds it before caching a block so the cache's accounting stays exact.
        """
        s = self._search
        if s is None:
            s = self._search = self.batch.column(0).to_pylist()
            self.nbytes += 8 * self.n + _KEY_OBJECT_OVERHEAD * self.n + len(self._kmv)
        return s

    def lower_bound(self, key: bytes) -> int:
        """Index of the first entry whose key is >= ``key`` (n if none)."""
        return bisect.bisect_left(self.searchable(), key)

    def find(self, key: bytes) -> int | None:
        """Index of the entry with exactly ``key``, or None."""
        keys = self.searchable()
        i = bisect.bisect_left(keys, key)
        return i if i < self.n and keys[i] == key else None

    def entry(self, i: int) -> tuple[int, int, bytes]:
        vo = self._voffs
        return int(self._seqs[i]), int(self._kinds[i]), self._values[vo[i] : vo[i + 1]].tobytes()


def _as_key(key: object, what: str) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    raise InvalidArgument(f"{what} must be bytes, got {type(key).__name__}")


class SstReader:
    """An open SST. Immutable after opening, so one reader can serve many threads at once."""

    def __init__(
        self, name: str, region: pa.Buffer, region_start: int, object_size: int, *,
        store: ObjectStore | None = None, whole: pa.Buffer | None = None,
        cache: BlockCache | None = None,
    ) -> None:
        """Parse index, filter and footer from ``region``: bytes [region_start, object_size)."""
        self.name = name
        self._store = store
        self._whole = whole
        self._cache = cache
        try:
            mv = memoryview(region)
            tail = decode_tail(name, mv, object_size)
            rel = tail.index_offset - region_start
            if rel < 0:
                raise CorruptionError(name, "index starts before the bytes fetched for it")
            index = decode_index(name, mv[rel : rel + tail.index_len], tail)
            frel = tail.filter_offset - region_start
            self._bloom = BloomFilter(name, mv[frel : frel + tail.filter_len]) if tail.filter_len else None
            meta_at = len(mv) - TAIL_LEN - tail.meta_len
            self.metadata: dict[str, int] = decode_metadata(name, mv[meta_at : len(mv) - TAIL_LEN])
        except _DECODE_ERRORS as e:
            raise CorruptionError(name, f"malformed footer or index: {e}") from None
        self._index: Index = index
        self._offs: list[int] = index.block_offs.tolist()
        self._counts: list[int] = index.entry_counts.tolist()
        codec_name = CODECS[CODEC_NAMES[tail.codec]][1]
        self._codec = pa.Codec(codec_name) if codec_name else None
        self._layout = tail.format_version
        self.entry_count = tail.entry_count
        self.block_count = tail.block_count
        self.first_key: bytes | None = index.first_keys[0] if tail.block_count else None
        self.last_key: bytes | None = index.last_keys[-1] if tail.block_count else None
        self.info = SstInfo(
            first_key=self.first_key, last_key=self.last_key,
            index_offset=tail.index_offset, index_len=tail.index_len,
            filter_offset=tail.filter_offset, filter_len=tail.filter_len,
            compression=tail.codec, entry_count=tail.entry_count, size_bytes=object_size,
        )

    @classmethod
    def from_bytes(cls, data: bytes, name: str, *, cache: BlockCache | None = None) -> SstReader:
        """A reader over an object already in memory (a just-written SST, a WAL file read whole)."""
        whole = pa.py_buffer(data)
        return cls(name, whole, 0, whole.size, whole=whole, cache=cache)

    @classmethod
    def open(
        cls, store: ObjectStore, path: str, info: SstInfo | None = None, *,
        cache: BlockCache | None = None,
    ) -> SstReader:
        """With ``info``: one ranged GET of index + filter + footer. Without: a HEAD, then the end."""
        if info is not None and info.size_bytes > 0:
            size = info.size_bytes
            if not 0 <= info.index_offset < size:
                raise CorruptionError(path, f"SstInfo index offset {info.index_offset} is outside "
                                            f"the {size}-byte object")
            region = _get(store, path, info.index_offset, size, known_size=False)
            reader = cls(path, region, info.index_offset, size, store=store, cache=cache)
            if reader.info != info:
                raise CorruptionError(path, f"SstInfo {info} disagrees with the footer {reader.info}")
            return reader
        size = store.head(path).size
        if size < TAIL_LEN:
            raise CorruptionError(path, f"object of {size} bytes is too short for an SST footer")
        start = max(0, size - TAIL_READ)
        region = _get(store, path, start, size)
        fields = TAIL.unpack_from(region, region.size - TAIL_LEN)
        if fields[-1] == MAGIC and fields[0] < start:  # the index begins before what we fetched
            start = fields[0]
            region = _get(store, path, start, size)
        return cls(path, region, start, size, store=store, cache=cache)

    def __repr__(self) -> str:
        return f"SstReader({self.name!r}, entries={self.entry_count}, blocks={self.block_count})"

    def may_contain(self, key: bytes) -> bool:
        key = _as_key(key, "key")
        if self.first_key is None or self.last_key is None:
            return False
        if key < self.first_key or key > self.last_key:
            return False
        return self._bloom is None or self._bloom.may_contain(key)

    def get(self, key: bytes) -> tuple[int, int, bytes] | None:
        """``(seq, kind, value)`` for ``key``, or None; reads at most one block."""
        if type(key) is not bytes:
            key = _as_key(key, "key")
        first, last = self.first_key, self.last_key
        if first is None or last is None or key < first or key > last:
            return None
        if self._bloom is not None and not self._bloom.may_contain(key):
            return None
        b = bisect.bisect_left(self._index.last_keys, key)
        if b >= self.block_count or key < self._index.first_keys[b]:
            return None
        block = self._block(b)
        i = block.find(key)
        return None if i is None else block.entry(i)

    def scan(
        self, start: bytes | None = None, end: bytes | None = None, *, fill_cache: bool = False
    ) -> Iterator[pa.RecordBatch]:
        """Entries with ``start <= key < end``, one batch per block, blocks fetched lazily.

        Consecutive uncached blocks are fetched with one GET whose size doubles up to
        READAHEAD_MAX. Scanned blocks go into the cache only with ``fill_cache`` so that a
        compaction-sized scan does not evict the point-lookup working set.
        """
        lo_key = None if start is None else _as_key(start, "start")
        hi_key = None if end is None else _as_key(end, "end")
        if self.block_count == 0 or (lo_key is not None and hi_key is not None and lo_key >= hi_key):
            return
        b0 = 0 if lo_key is None else bisect.bisect_left(self._index.last_keys, lo_key)
        b1 = self.block_count if hi_key is None else bisect.bisect_left(self._index.first_keys, hi_key)
        for b, block in self._blocks(b0, b1, fill_cache):
            lo = block.lower_bound(lo_key) if lo_key is not None and b == b0 else 0
            hi = block.lower_bound(hi_key) if hi_key is not None and b == b1 - 1 else block.n
            if hi > lo:
                yield block.batch if hi - lo == block.n else block.batch.slice(lo, hi - lo)

    def read_all(self) -> pa.Table:
        return pa.Table.from_batches(list(self.scan()), schema=ENTRY_SCHEMA)

    # -- blocks -----------------------------------------------------------------------------

    def _read(self, start: int, end: int) -> pa.Buffer:
        if self._whole is not None:
            return self._whole.slice(start, end - start)
        assert self._store is not None
        return _get(self._store, self.name, start, end)

    def _decode(self, b: int, buf: pa.Buffer) -> Block:
        try:
            return Block(self.name, b, buf, self._counts[b], self._codec, self._layout)
        except _DECODE_ERRORS as e:
            raise CorruptionError(self.name, f"block {b} is malformed: {e}") from None

    def _block(self, b: int) -> Block:
        cache = self._cache
        if cache is not None:
            hit = cache.get(self.name, b)
            if hit is not None:
                return cast(Block, hit)
        block = self._decode(b, self._read(self._offs[b], self._offs[b + 1]))
        self._check_bounds(b, block)
        block.searchable()  # before caching, so the cached size is final
        if cache is not None:
            cache.put(self.name, b, block)
        return block

    def _check_bounds(self, b: int, block: Block) -> None:
        """A block must hold exactly the key range the index promised (catches misplaced blocks)."""
        index = self._index
        if block.key(0) != index.first_keys[b] or block.key(block.n - 1) != index.last_keys[b]:
            raise CorruptionError(self.name, f"block {b} keys disagree with the index")

    def _blocks(self, b0: int, b1: int, fill_cache: bool) -> Iterator[tuple[int, Block]]:
        offs, cache, path = self._offs, self._cache, self.name
        budget = READAHEAD_START if self._whole is None else 1 << 62
        b = b0
        while b < b1:
            hit = cache.get(path, b) if cache is not None else None
            if hit is not None:
                yield b, cast(Block, hit)
                b += 1
                continue
            stop = b + 1  # extend the GET over following blocks that are not cached either
            while (
                stop < b1 and offs[stop + 1] - offs[b] <= budget
                and (cache is None or not cache.contains(path, stop))
            ):
                stop += 1
            group = self._read(offs[b], offs[stop])
            budget = min(budget * 2, READAHEAD_MAX) if self._whole is None else budget
            for i in range(b, stop):
                buf = group.slice(offs[i] - offs[b], offs[i + 1] - offs[i])
                if fill_cache and cache is not None and stop - b > 1 and self._codec is None:
                    buf = pa.py_buffer(buf.to_pybytes())  # don't pin the whole read-ahead buffer
                block = self._decode(i, buf)
                self._check_bounds(i, block)
                if fill_cache and cache is not None:
                    block.searchable()
                    cache.put(path, i, block)
                yield i, block
            b = stop


def _get(store: ObjectStore, path: str, start: int, end: int, *, known_size: bool = True) -> pa.Buffer:
    """Bytes [start, end) of an object; a short object is corruption, not a transient failure."""
    try:
        data = store.get(path, byte_range=(start, end)).data
    except StoreError:
        if known_size:
            raise
        size = store.head(path).size  # the manifest's size may be past the end of a truncated object
        if size < end:
            raise CorruptionError(path, f"object is {size} bytes, expected {end}") from None
        raise
    if len(data) != end - start:
        raise CorruptionError(path, f"read of [{start}, {end}) returned {len(data)} bytes")
    return pa.py_buffer(data)
