"""Reading SSTs: open with one ranged GET, point lookups through the block cache, lazy range scans.

Why it is shaped like this: with the manifest's ``SstInfo`` the reader knows where the filter
starts (the metadata sections follow the data blocks: filter, index, stats, info) and, for SSTs
we wrote, how long the object is, so opening costs one request; without the size (SSTs SlateDB
wrote) it costs a suffix read of the end (and a second read when the metadata is longer).
Blocks are fetched only when a lookup or scan needs them, decoded many at a time
(:mod:`slatedb_core.sst.decode`), and checked before anything is built from them, so a damaged
object surfaces as ``CorruptionError``.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import struct
from collections.abc import Callable, Iterator
from typing import cast

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.sst_info import decode_sst_info
from slatedb_core.sst.block import (
    Block,
    decode_group,
    flagged_pieces,
)
from slatedb_core.sst.bloom import BloomFilter, bloom_from_filter_block, hash_key
from slatedb_core.sst.cache import BlockCache
from slatedb_core.sst.fetch import get_range, get_range_bytes, info_agrees, metadata_start
from slatedb_core.sst.format import (
    CODEC_NAMES,
    CRC_LEN,
    ENTRY_SCHEMA,
    FILTER_FORMAT_COMPOSITE,
    FOOTER_LEN,
    ROW_SCHEMA,
    SST_TYPE_WAL,
    decode_footer,
    unseal,
)
from slatedb_core.sst.index import Stats, bisect_all, decode_index, decode_stats
from slatedb_core.sst.raw_block import RawBlock, raw_block
from slatedb_core.store.objectstore import ObjectStore

TAIL_READ = 64 * 1024  # without a known size: bytes read from the end, hoping to cover the footer
READAHEAD_START = 256 * 1024  # a scan's first GET; doubles per GET up to READAHEAD_MAX
READAHEAD_MAX = 8 * 1024 * 1024
TS_SCHEMA = ROW_SCHEMA  # the rows with SlateDB's timestamps (slatedb_core.lsm.row_model)
_DECODE_ERRORS = (ValueError, IndexError, struct.error, OverflowError, pa.ArrowException)
_NO_CLOCK = -(1 << 63)  # before every expire_ts: nothing expires
Flagged = tuple[pa.RecordBatch, bool, bytes, bytes]  # batch, keys distinct, first key, last key


def _as_key(key: object, what: str) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, bytearray | memoryview):
        return bytes(key)
    raise InvalidArgument(f"{what} must be bytes, got {type(key).__name__}")


class SstScan(Iterator[pa.RecordBatch]):
    """The batches of :meth:`SstReader.scan`. :meth:`flagged` yields each with whether its keys
    are distinct (strictly increasing, as the block decoder found them) and its first and last
    key, so that dropping older versions (SlateDB's SSTs may hold several of a key, newest
    first: docs/format.md) need not compare neighbouring keys inside a block that has none."""

    __slots__ = ("_flagged", "may_hold_merges")

    def __init__(self, flagged: Iterator[Flagged], *, may_hold_merges: bool = True) -> None:
        self._flagged = flagged
        # False when the SST's stats count no merge operand (SlateDB's SstStats.num_merges):
        # reads then skip looking for operand chains batch by batch (lsm.iterators)
        self.may_hold_merges = may_hold_merges

    def __next__(self) -> pa.RecordBatch:
        return next(self._flagged)[0]

    def flagged(self) -> Iterator[Flagged]:
        """``(batch, keys distinct, first key, last key)``, sharing this iterator's position."""
        return self._flagged


class SstReader:
    """An open SST. Immutable after opening, so one reader can serve many threads at once.

    ``now_ms``: a clock (SlateDB's: ms since the epoch) at or past which a row's expire_ts makes
    it read as a tombstone. By default none: SlateDB 0.17 applies expiry when it rewrites rows
    (a memtable flush or a compaction, by its clock's last tick), not when it reads them, and a
    reader that must read what SlateDB reads leaves them as they are (``has_expiring_rows`` says
    whether there are any). A rewrite that expires rows as SlateDB does passes its clock."""

    def __init__(
        self,
        name: str,
        region: pa.Buffer,
        region_start: int,
        object_size: int,
        *,
        store: ObjectStore | None = None,
        whole: pa.Buffer | None = None,
        cache: BlockCache | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Parse filter, index, stats and info from ``region``: bytes [region_start, object_size)."""
        self.name = name
        self._store = store
        self._whole = whole
        self._cache = cache
        self._now = now_ms
        self._clock = now_ms if now_ms is not None else _NO_CLOCK  # what lookups compare with
        self._expiring: bool | None = None
        try:
            mv = memoryview(region)
            info_offset, _ = decode_footer(name, mv, object_size)
            rel = info_offset - region_start
            if rel < 0:
                raise CorruptionError(name, "SST info starts before the bytes fetched for it")
            raw_info = mv[rel : len(mv) - FOOTER_LEN]
            unsealed = unseal(0, raw_info, name, "SST info")
            info = decode_sst_info(unsealed, name)
            self._check_layout(info, info_offset)
            if info.size_bytes and info.size_bytes != object_size:
                raise CorruptionError(
                    name, f"SST info records {info.size_bytes} bytes, the object has {object_size}"
                )
            code = info.compression
            if code not in CODEC_NAMES:
                raise CorruptionError(name, f"unknown compression codec {code}")

            def section(off: int, length: int, what: str) -> bytes | memoryview:
                if off < region_start:
                    raise CorruptionError(name, f"{what} starts before the bytes fetched for it")
                return unseal(
                    code, mv[off - region_start : off - region_start + length], name, what
                )

            offsets, keys = decode_index(name, section(info.index_offset, info.index_len, "index"))
            self._bloom: BloomFilter | None = None
            if info.filter_len:
                self._bloom = bloom_from_filter_block(
                    name,
                    section(info.filter_offset, info.filter_len, "filter"),
                    info.filter_format == FILTER_FORMAT_COMPOSITE,
                )
            self.stats: Stats | None = None
            if info.stats_len:
                self.stats = decode_stats(name, section(info.stats_offset, info.stats_len, "stats"))
        except _DECODE_ERRORS as e:
            raise CorruptionError(name, f"malformed SST footer: {e}") from None
        data_end = metadata_start(info)
        if offsets and (
            offsets[0] != 0
            or any(map(operator.le, offsets[1:], offsets))  # C-level passes: an SST
            or offsets[-1] >= data_end  # of 164 MB has ~2,500 blocks, opened per reopen
        ):
            raise CorruptionError(name, "index block offsets do not tile the data region")
        if not offsets and data_end:
            raise CorruptionError(name, "data region without an index entry")
        if info.sst_type != SST_TYPE_WAL and any(map(operator.lt, keys[1:], keys)):
            raise CorruptionError(name, "index keys are out of order")
        self._offs: list[int] = [*offsets, data_end]
        self._index_keys = keys
        self._index_after = [*keys, b""]  # at a bisect's result: the next block's key, or b""
        self._codec = info.compression
        self.wal = info.sst_type == SST_TYPE_WAL
        # each block's row count (SlateDB's BlockStats), when the stats hold one per block:
        # a block with as many rows as restarts skips the full row check (raw_block)
        st = self.stats
        self._block_rows: list[int] = (
            list(
                map(
                    operator.add,
                    map(operator.add, st.block_puts, st.block_deletes),
                    st.block_merges,
                )
            )
            if st is not None and len(st.block_puts) == len(offsets) and not self.wal
            else []
        )
        self.block_count = len(offsets)
        stats_rows = (
            self.stats.num_puts + self.stats.num_deletes + self.stats.num_merges
            if self.stats
            else 0
        )
        self.entry_count = info.entry_count or stats_rows
        self.first_key: bytes | None = None if self.wal else info.first_key
        self.last_key: bytes | None = None if self.wal else info.last_key
        self.info = info

    def _check_layout(self, info: SstInfo, info_offset: int) -> None:
        """Filter, index and stats lie between the data blocks and the info (SlateDB's order)."""
        sections = [
            (info.filter_offset, info.filter_len),
            (info.index_offset, info.index_len),
            (info.stats_offset, info.stats_len),
        ]
        data_end = metadata_start(info)
        for off, length in sections:
            if length and (length <= CRC_LEN or off < data_end or off + length > info_offset):
                raise CorruptionError(
                    self.name, f"SST section [{off}, +{length}) is outside the metadata region"
                )
        if info.index_len == 0:
            raise CorruptionError(self.name, "SST has no index")

    @classmethod
    def from_bytes(
        cls, data: bytes, name: str, *, cache: BlockCache | None = None, now_ms: int | None = None
    ) -> SstReader:
        """A reader over an object already in memory (a just-written SST, a WAL file read whole)."""
        whole = pa.py_buffer(data)
        return cls(name, whole, 0, whole.size, whole=whole, cache=cache, now_ms=now_ms)

    @classmethod
    def open(
        cls,
        store: ObjectStore,
        path: str,
        info: SstInfo | None = None,
        *,
        cache: BlockCache | None = None,
        now_ms: int | None = None,
    ) -> SstReader:
        """With ``info`` of a known size: one ranged GET of filter, index, stats and info.
        Otherwise one suffix GET of the object's end (and a ranged GET of the rest of the
        metadata when it is longer)."""
        if info is not None and info.size_bytes > 0:
            size = info.size_bytes
            start = metadata_start(info)
            if not 0 <= start < size:
                raise CorruptionError(
                    path, f"SstInfo metadata offset {start} is outside the {size}-byte object"
                )
            region = get_range(store, path, start, size, known_size=False, opening=True)
            reader = cls(path, region, start, size, store=store, cache=cache, now_ms=now_ms)
            if not info_agrees(info, reader.info):
                raise CorruptionError(
                    path, f"SstInfo {info} disagrees with the footer {reader.info}"
                )
            return reader
        got = store.get_suffix(path, TAIL_READ)
        size = got.meta.size
        if size <= FOOTER_LEN or len(got.data) != min(size, TAIL_READ):
            raise CorruptionError(
                path,
                f"object of {size} bytes is too short for an SST, or "
                f"its suffix read returned {len(got.data)} bytes",
            )
        start = size - len(got.data)
        region = pa.py_buffer(got.data)
        info_offset, _ = decode_footer(path, memoryview(region), size)
        if info_offset < start:
            start = info_offset
            region = get_range(store, path, start, size, opening=True)
        head = decode_sst_info(
            unseal(
                0,
                memoryview(region)[info_offset - start : region.size - FOOTER_LEN],
                path,
                "SST info",
            ),
            path,
        )
        meta_start = metadata_start(head)
        if 0 <= meta_start < start:
            region = (
                get_range(store, path, meta_start, start, opening=True).to_pybytes()
                + region.to_pybytes()
            )
            region, start = pa.py_buffer(region), meta_start
        reader = cls(path, region, start, size, store=store, cache=cache, now_ms=now_ms)
        if info is not None and not info_agrees(info, reader.info):
            raise CorruptionError(path, f"SstInfo {info} disagrees with the footer {reader.info}")
        return reader

    def __repr__(self) -> str:
        return f"SstReader({self.name!r}, entries={self.entry_count}, blocks={self.block_count})"

    @property
    def index_keys(self) -> list[bytes]:
        """Each block's index key (block 0's is empty; a WAL SST's are first seqs, u64 BE)."""
        return list(self._index_keys)

    @property
    def block_offsets(self) -> list[int]:
        """Where each data block starts, plus the end of the last."""
        return list(self._offs)

    @property
    def has_expiring_rows(self) -> bool:
        """Whether any row of the SST carries an expire_ts (decodes every block once)."""
        if self._expiring is None:
            found = False
            for _, block in self._blocks(0, self.block_count, False, None):
                found = found or block.has_expire
            self._expiring = found
        return self._expiring

    def may_contain(self, key: bytes) -> bool:
        key = _as_key(key, "key")
        if self.first_key is None or self.last_key is None:
            return self.wal and self.block_count > 0
        if key < self.first_key or key > self.last_key:
            return False
        return self._bloom is None or self._bloom.may_contain(key)

    def get(self, key: bytes) -> tuple[int, int, bytes] | None:
        """``(seq, kind, value)`` of the newest row of ``key``, or None; reads one block
        (two when the key's versions straddle a block boundary)."""
        if type(key) is not bytes:
            key = _as_key(key, "key")
        if self.wal:
            return self._get_wal(key)
        first, last = self.first_key, self.last_key
        if first is None or last is None or key < first or key > last:
            return None
        # A key's first SST probes the cache first: a cached block answers without hashing
        # the key, and the bloom filter is probed only before a block is read (a miss is
        # counted then). Cached blocks are RawBlocks (searched in place) or, after a scan that
        # fills the cache, Blocks with their point table built.
        bloom = self._bloom
        if bloom is not None and _ASKED[0][0] is key:
            # the key was looked for in another SST (L0, or another run): its hash costs one
            # SipHash for all of them, and a probe is cheaper than the index bisect, a cache
            # probe and a search
            if not bloom.may_contain_hash(_hash_of(key)):
                return None
            bloom = None
        # Block i (the first whose index key is >= key) starts at or after key, so the newest
        # row of key is in block i - 1, or in block i when its index key is key itself.
        keys = self._index_keys
        i = bisect.bisect_left(keys, key)
        b = i - 1 if i else 0
        cache = self._cache
        hit = cache.get(self.name, b, count_miss=False) if cache is not None else None
        if hit is None:
            if bloom is not None and not bloom.may_contain_hash(_hash_of(key)):
                return None
            hit = self._read_block(b)
        now = self._clock
        found = (
            hit.find(key, now) if type(hit) is RawBlock else cast(Block, hit).point_table().get(key)
        )
        if found is None:
            if i != b and i < self.block_count and keys[i] == key:
                found = _find(self._block(i), key, now)
            if found is None and _ASKED[0][0] is not key:
                _ASKED[0] = (key, -1)  # a lookup that goes on to the next SST probes blooms
        return found

    def get_sorted(self, keys: list[bytes]) -> list[tuple[int, int, bytes] | None]:
        """:meth:`get` of each of ``keys`` (sorted, distinct bytes), each block read once. Each
        step is a C-level pass over the keys: the bloom filter for all of them at once
        (vectorised SipHash: a probe costs less than a search in a cached block), their blocks
        (:func:`bisect_all`), one cache probe per block, one search per key in its block."""
        n = len(keys)
        if self.wal:
            return [self._get_wal(k) for k in keys]
        first, last = self.first_key, self.last_key
        if first is None or last is None or not n:
            return [None] * n
        lo = bisect.bisect_left(keys, first)
        hi = bisect.bisect_right(keys, last)
        if lo >= hi:
            return [None] * n
        ks = keys if lo == 0 and hi == n else keys[lo:hi]
        if self._bloom is not None:
            maybe = self._bloom.may_contain_keys(ks)
            if not all(maybe):  # keys the SST lacks: answered without a block
                pos = list(itertools.compress(range(len(ks)), maybe))
                found: list[tuple[int, int, bytes] | None] = [None] * len(ks)
                if pos:
                    got = self._search_sorted(list(map(ks.__getitem__, pos)))
                    for j, f in zip(pos, got, strict=True):
                        found[j] = f
                return found if lo == 0 and hi == n else [None] * lo + found + [None] * (n - hi)
        found = self._search_sorted(ks)
        if lo == 0 and hi == n:
            return found
        return [None] * lo + found + [None] * (n - hi)

    def _search_sorted(self, ks: list[bytes]) -> list[tuple[int, int, bytes] | None]:
        """The newest row of each of ``ks`` (sorted, distinct, within the SST's key range,
        past its bloom filter), each block read once."""
        at = bisect_all(self._index_keys, ks)
        bs = list(map(operator.sub, at, itertools.repeat(1)))
        if bs[0] < 0:  # only the first key can equal index key 0 (keys are distinct)
            bs[0] = 0
        blocks = list(dict.fromkeys(bs))  # distinct, in order
        cache = self._cache
        hits = cache.get_many(self.name, blocks) if cache is not None else [None] * len(blocks)
        now = self._now if self._now is not None else _NO_CLOCK
        maybe_finders: dict[int, Finder | None] = dict(
            zip(blocks, map(_finder, hits, itertools.repeat(now)), strict=True)
        )
        finders = cast(dict[int, Finder], maybe_finders)
        if None in maybe_finders.values():  # blocks to read
            for b in [b for b, t in maybe_finders.items() if t is None]:
                finders[b] = _finder_of(self._read_block(b), now)
        found = list(map(operator.call, map(finders.__getitem__, bs), ks))
        # a key not found in its block that equals the next block's index key may have its
        # newest version there (a key found in its block has its newest version there)
        misses = (
            list(
                itertools.compress(range(len(ks)), map(operator.is_, found, itertools.repeat(None)))
            )
            if None in found
            else []
        )
        nxt = map(self._index_after.__getitem__, map(at.__getitem__, misses))
        for j in itertools.compress(misses, map(operator.eq, nxt, map(ks.__getitem__, misses))):
            i = at[j]
            if i != bs[j]:
                t = finders.get(i)
                if t is None:
                    t = finders[i] = _finder_of(self._block(i), now)
                found[j] = t(ks[j])
        return found

    def _get_wal(self, key: bytes) -> tuple[int, int, bytes] | None:
        """A WAL SST's rows are in write order: the last row of ``key`` is its newest."""
        found = None
        for _, block in self._blocks(0, self.block_count, False, None):
            i = block.last_index_of(key)
            if i is not None:
                found = block.entry(i)
        return found

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        fill_cache: bool = False,
        readahead: int | None = None,
        groups: bool = False,
    ) -> SstScan:
        """Rows with ``start <= key < end`` (a WAL SST's: every row, in write order), one batch
        per block, blocks fetched lazily.

        Consecutive uncached blocks are fetched with one GET (never cut inside a block) of
        ``readahead`` bytes, about what the scan holds decoded (a merge of many whole views
        passes its share of a budget), by default doubling from READAHEAD_START to READAHEAD_MAX
        for scans that may stop early. Scanned blocks are cached only with ``fill_cache``: a
        compaction-sized scan must not evict the point-lookup working set. ``groups``: whole
        blocks decoded together come as one batch (:func:`~slatedb_core.sst.block.flagged_pieces`)."""
        lo_key = None if start is None else _as_key(start, "start")
        hi_key = None if end is None else _as_key(end, "end")
        if readahead is not None and (type(readahead) is not int or readahead < 1):
            raise InvalidArgument(f"readahead must be a positive int, got {readahead!r}")
        merges = self.stats is None or self.stats.num_merges > 0
        return SstScan(
            self._scan(lo_key, hi_key, fill_cache, readahead, groups), may_hold_merges=merges
        )

    def _scan(
        self,
        lo_key: bytes | None,
        hi_key: bytes | None,
        fill_cache: bool,
        ahead: int | None,
        groups: bool = False,
    ) -> Iterator[Flagged]:
        if self.block_count == 0 or (
            lo_key is not None and hi_key is not None and lo_key >= hi_key
        ):
            return
        if self.wal:
            for _, block in self._blocks(0, self.block_count, fill_cache, ahead):
                first, last = block.ends()
                yield block.batch, False, first, last
            return
        keys = self._index_keys
        b0 = 0 if lo_key is None else max(0, bisect.bisect_left(keys, lo_key) - 1)
        b1 = self.block_count if hi_key is None else bisect.bisect_left(keys, hi_key)
        # Only the first block can hold keys below ``start`` (every later block's index key, a
        # bound of its keys from below, is >= start) and only the last keys >= ``end``.
        yield from flagged_pieces(
            self.name,
            self._blocks(b0, b1, fill_cache, ahead, groups),
            b0,
            b1,
            lo_key,
            hi_key,
            groups,
        )

    def read_all(self, *, timestamps: bool = False) -> pa.Table:
        """Every row; with ``timestamps``, also SlateDB's ``expire_ts`` and ``create_ts``
        columns (int64 ms since the epoch, null where a row has none)."""
        if not timestamps:
            table = pa.Table.from_batches(list(self.scan()), schema=ENTRY_SCHEMA)
            n = table.num_rows
            keys = table.column(0)
            self._check_totals(
                n, keys[0].as_py() if n else None, keys[n - 1].as_py() if n else None
            )
            return table
        batches = []
        for _, block in self._blocks(0, self.block_count, False, None):
            expire, create = block.timestamps(0, block.n)
            batches.append(
                pa.RecordBatch.from_arrays([*block.batch.columns, expire, create], schema=TS_SCHEMA)
            )
        return pa.Table.from_batches(batches, schema=TS_SCHEMA)

    def verify(self) -> int:
        """Every block read, checked and let go (as :meth:`read_all` checks them, without holding
        the rows: a whole-SST check holds one read-ahead group at a time); the row count."""
        n = 0
        first = last = None
        for batch in self.scan():
            if batch.num_rows:
                keys = batch.column(0)
                first = keys[0].as_py() if first is None else first
                last = keys[batch.num_rows - 1].as_py()
                n += batch.num_rows
        self._check_totals(n, first, last)
        return n

    def _check_totals(self, n: int, first: bytes | None, last: bytes | None) -> None:
        """Every row read: the counts and key range the info records must be the rows'."""
        if self.info.entry_count and n != self.info.entry_count:
            raise CorruptionError(
                self.name, f"{n} rows, the SST info records {self.info.entry_count}"
            )
        if self.stats is not None and n != (
            self.stats.num_puts + self.stats.num_deletes + self.stats.num_merges
        ):
            raise CorruptionError(self.name, f"{n} rows disagree with the SST stats")
        if n and not self.wal and (first != self.first_key or last != self.last_key):
            raise CorruptionError(self.name, "the first or last key disagrees with the SST info")

    # -- blocks -----------------------------------------------------------------------------

    def blocks(self, b0: int, b1: int, readahead: int | None = None) -> Iterator[tuple[int, Block]]:
        """Blocks ``b0..b1`` decoded at the reader's clock, not cached, ``readahead`` bytes per
        GET: for rewrites that carry every column of a row, timestamps included (compaction,
        :mod:`slatedb_core.compactor.sources`). Each Block may span several SST blocks (its
        ``span``, one decode's): cut their rows with :func:`~slatedb_core.sst.block.rows_in`."""
        return self._blocks(b0, b1, False, readahead, True)

    def _read(self, start: int, end: int) -> pa.Buffer:
        if self._whole is not None:
            return self._whole.slice(start, end - start)
        assert self._store is not None
        return get_range(self._store, self.name, start, end)

    def _decode(self, b0: int, b1: int, buf: pa.Buffer, whole: bool = False) -> list[Block]:
        """Blocks ``b0..`` of ``buf`` (the stored bytes of blocks ``b0..b1``), as many as
        :func:`~slatedb_core.sst.block.decode_group` decodes at once (at least one); with
        ``whole``, as one Block spanning them (its ``span``)."""
        base = self._offs[b0]
        rel = [o - base for o in self._offs[b0 : b1 + 1]]
        now = self._now if self._now is not None else _NO_CLOCK
        try:
            try:
                blocks = decode_group(
                    self.name, buf, rel, b0, self._codec, not self.wal, now, whole
                )
            except _DECODE_ERRORS as e:
                raise CorruptionError(self.name, f"block {b0}+ is malformed: {e}") from None
        except CorruptionError:
            if b1 - b0 > 1:  # name the damaged block: decode the group's blocks one by one
                for b in range(b0, b1):
                    self._decode(b, b + 1, buf.slice(rel[b - b0], rel[b - b0 + 1] - rel[b - b0]))
            raise
        b = b0
        for block in blocks:
            self._check_bounds(b, block)
            b += block.span
        return blocks

    def _block(self, b: int) -> Block | RawBlock:
        """Block ``b`` for a point lookup: the cached one, or its bytes read, checked and cached
        as a :class:`RawBlock` (about its stored size: issue 42, goal 1), never decoded."""
        cache = self._cache
        if cache is not None:
            hit = cache.get(self.name, b, count_miss=False)
            if hit is not None:
                return cast(Block | RawBlock, hit)
        return self._read_block(b)

    def _read_block(self, b: int) -> RawBlock:
        """Block ``b`` read, checked and cached as a :class:`RawBlock` (a cache miss, counted):
        :meth:`_block` once the cache was probed."""
        cache = self._cache
        raw = raw_block(
            self.name,
            b,
            self._read_bytes(self._offs[b], self._offs[b + 1]),
            self._codec,
            self._block_rows[b] if self._block_rows else -1,
        )
        keys = self._index_keys
        raw.check_bounds(keys[b], keys[b + 1] if b + 1 < len(keys) else None)
        if cache is not None:
            cache.put(self.name, b, raw, miss=True)
        return raw

    def _read_bytes(self, start: int, end: int) -> bytes:
        if self._whole is not None:
            data: bytes = self._whole.slice(start, end - start).to_pybytes()
            return data
        assert self._store is not None
        return get_range_bytes(self._store, self.name, start, end)

    def _check_bounds(self, b: int, block: Block) -> None:
        """A block's keys must lie between its index key and the next (catches misplaced
        blocks); a WAL block's first seq must be its index key."""
        keys = self._index_keys
        if self.wal:
            if block.first_seq().to_bytes(8, "big") != keys[b]:
                raise CorruptionError(self.name, f"block {b} seqs disagree with the index")
            return
        sub = block.sub_ends
        if sub is not None:  # a group's blocks, each checked (in C) against its index keys
            firsts, lasts = sub
            n = len(firsts)
            if any(map(operator.lt, firsts, keys[b : b + n])) or any(
                map(operator.gt, lasts, keys[b + 1 : b + n + 1])
            ):
                for i in range(n):
                    if firsts[i] < keys[b + i] or (
                        b + i + 1 < len(keys) and lasts[i] > keys[b + i + 1]
                    ):
                        raise CorruptionError(
                            self.name, f"block {b + i} keys disagree with the index"
                        )
            return
        first, last = block.ends()
        if first < keys[b] or (b + 1 < len(keys) and last > keys[b + 1]):
            raise CorruptionError(self.name, f"block {b} keys disagree with the index")

    def _blocks(
        self, b0: int, b1: int, fill: bool, ra: int | None, groups: bool = False
    ) -> Iterator[tuple[int, Block]]:
        """``(b, block)`` for blocks ``b0..b1``: cached decoded ones as they are, the others read
        (one GET per run of them) and decoded, cached with ``fill``. ``groups``: the blocks of
        one decode come as one Block spanning them (``span``; never cached, never a WAL's)."""
        offs, cache, path, in_memory = self._offs, self._cache, self.name, self._whole is not None
        whole = groups and not fill and not self.wal
        budget, cap = (READAHEAD_START, READAHEAD_MAX) if ra is None else (ra, ra)
        b = b0
        while b < b1:
            # Blocks cached decoded (a scan's that filled the cache) are used as they are. A
            # point lookup's RawBlock is read again with its neighbours instead: random lookups
            # leave one cached here and there, and decoding each short run between them on its
            # own cost a 4 KiB-block scan (SlateDB's default size) 8x a whole GET's decode.
            # The block looked at is the one yielded: another thread may evict it, or put a
            # lookup's RawBlock over it, before the get that counts the hit (review 52).
            hit = cache.peek(path, b) if cache is not None else None
            if _decoded(hit):
                assert cache is not None
                cache.get(path, b, count_miss=False)  # a hit: referenced, counted
                yield b, cast(Block, hit)
                b += 1
                continue
            stop = b + 1  # extend the GET over following blocks not cached decoded either
            while (
                stop < b1
                and (in_memory or offs[stop + 1] - offs[b] <= budget)
                and (cache is None or not _decoded(cache.peek(path, stop)))
            ):
                stop += 1
            buf: pa.Buffer | None = self._read(offs[b], offs[stop])
            budget = min(budget * 2, cap)
            start = offs[b]
            while b < stop:  # decoding stops at a decoded-bytes budget: go on from there
                assert buf is not None
                blocks = self._decode(b, stop, buf.slice(offs[b] - start), whole)
                if b + sum(block.span for block in blocks) >= stop:
                    buf = None  # the GET's bytes: freed once decoded (keys and values are copies)
                for block in blocks:
                    if fill and cache is not None:
                        if self.wal:
                            block.searchable()
                        else:
                            block.point_table()
                        cache.put(path, b, block)
                    yield b, block
                    b += block.span
                del blocks, block  # not held while the next blocks decode


def _decoded(cached: object) -> bool:
    """Whether a cached block is decoded (a scan's), not a point lookup's raw bytes."""
    return cached is not None and type(cached) is not RawBlock


_ASKED: list[tuple[bytes, int]] = [(b"", -1)]
"""The last key a point lookup missed in an SST, and its bloom hash once computed (-1 until
then). One tuple, replaced whole: a thread reading it sees one key's pair. It holds a reference
to the key, so ``is`` identifies it (a freed key's address is never reused while held)."""


def probe_blooms_first(key: bytes) -> None:
    """Have the next :meth:`SstReader.get` of ``key`` probe its bloom filter before its block.

    A key's first SST normally looks in its cached block first: right when one SST can hold
    the key (a compacted run). When several can (L0 SSTs, each over the whole key range, then the
    runs), the newest usually lacks it, and a probe (~0.6 us, one SipHash per lookup) rejects
    it for less than a search in its block (~2.5 us): ``DbState`` calls this first there."""
    if _ASKED[0][0] is not key:
        _ASKED[0] = (key, -1)


def _hash_of(key: bytes) -> int:
    """The bloom hash of ``key`` (SipHash-1-3: docs/format.md), computed once per lookup of
    one key object across SSTs."""
    asked = _ASKED[0]
    if asked[0] is key and asked[1] >= 0:
        return asked[1]
    h = hash_key(key)
    _ASKED[0] = (key, h)
    return h


Finder = Callable[[bytes], "tuple[int, int, bytes] | None"]


def _find(block: Block | RawBlock, key: bytes, now: int) -> tuple[int, int, bytes] | None:
    """The newest row of ``key`` in a point lookup's block (cached or just read)."""
    if type(block) is RawBlock:
        return block.find(key, now)
    return cast(Block, block).point_table().get(key)


def _finder(block: object, now: int) -> Finder | None:
    """A one-key lookup in a point lookup's block (None for a cache miss)."""
    return None if block is None else _finder_of(cast("Block | RawBlock", block), now)


def _finder_of(block: Block | RawBlock, now: int) -> Finder:
    """A one-key lookup in a point lookup's block."""
    if type(block) is RawBlock:
        return functools.partial(block.find, now=now)
    return cast(Block, block).point_table().get
