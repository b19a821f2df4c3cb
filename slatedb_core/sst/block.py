"""Decoded data blocks: an Arrow batch per block plus what a point lookup needs to search it.

Blocks are decoded in groups (a scan's read-ahead, or one block for a point lookup) by
:func:`slatedb_core.sst.decode.decode_blocks`; each block of the group is a slice of the group's
columns. The stored CRC of each block is checked, and the block decompressed, before any row is
parsed, so damage surfaces as :class:`CorruptionError`, never as wrong rows.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]
import pyarrow.compute as pc  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError
from slatedb_core.sst.decode import Decoded, decode_blocks
from slatedb_core.sst.decode_fixed import decode_fixed
from slatedb_core.sst.format import CRC_LEN, ENTRY_SCHEMA, MAX_BLOCK_BYTES, U32, decompress
from slatedb_core.store.checksum import crc32

_NO_TS = np.iinfo(np.int64).min
_BLOCK_OVERHEAD = 512  # rough Python/Arrow object overhead per cached block
_KEY_OBJECT_OVERHEAD = 40  # a bytes object's header, per key in a block's lookup list
# per row of a point table: dict slot and index (~48), tuple (64), value bytes header (40), seq
# int (32)
_POINT_OVERHEAD = 184


class Block:
    """One decoded data block."""

    __slots__ = (
        "_ends",
        "_kinds",
        "_search",
        "_seqs",
        "_values",
        "_vdata",
        "_voffs",
        "at",
        "batch",
        "create",
        "distinct",
        "expire",
        "group",
        "has_expire",
        "n",
        "nbytes",
        "points",
        "span",
        "sub_ends",
    )

    def __init__(
        self,
        batch: pa.RecordBatch,
        seqs: npt.NDArray[np.uint64],
        kinds: npt.NDArray[np.uint8],
        expire: npt.NDArray[np.int64],
        create: npt.NDArray[np.int64],
        nbytes: int,
        distinct: bool = False,
        has_expire: bool | None = None,
        group: pa.RecordBatch | None = None,
        at: int = 0,
        sub_ends: tuple[list[bytes], list[bytes]] | None = None,
    ) -> None:
        self.batch = batch
        self.n = batch.num_rows
        # the batch of the blocks decoded together (this one's rows are group[at : at + n]), so
        # a scan can hand over neighbouring blocks of one group as one zero-copy slice
        self.group = batch if group is None else group
        self.at = at
        # keys strictly increasing: every key once (the decoder knows it from its order check),
        # so a scan need not look for older versions inside the block
        self.distinct = distinct
        self.nbytes = nbytes + _BLOCK_OVERHEAD  # the batch's bytes (the decoder counts them)
        self.expire = expire  # per row, int64 min where absent (SlateDB's ms)
        self.create = create
        self.has_expire = bool((expire != _NO_TS).any()) if has_expire is None else has_expire
        self._seqs = seqs
        self._kinds = kinds
        self._values = batch.column(3)
        self._voffs: list[int] | None = None  # built by the first entry() (point lookups)
        self._vdata = memoryview(b"")
        self._search: list[bytes] | None = None
        # what point_table() built (None until then): read directly on the point-read path
        self.points: dict[bytes, tuple[int, int, bytes]] | None = None
        self._ends: tuple[bytes, bytes] | None = None
        # a scan's whole decoded group (:func:`decode_group` with ``whole``): the SST blocks it
        # spans, and each one's first and last key, which the reader checks against its index
        self.sub_ends = sub_ends
        self.span = 1 if sub_ends is None else len(sub_ends[0])
        if sub_ends is not None:
            self._ends = (sub_ends[0][0], sub_ends[1][-1])

    def key(self, i: int) -> bytes:
        return bytes(self.batch.column(0)[i].as_py())

    def ends(self) -> tuple[bytes, bytes]:
        """The first and last key (kept: every scan of the block compares them)."""
        e = self._ends
        if e is None:
            keys = self.batch.column(0)
            e = self._ends = (keys[0].as_py(), keys[self.n - 1].as_py())
        return e

    def searchable(self) -> list[bytes]:
        """The keys as a Python list, so a lookup is one C-level ``bisect`` (~1 µs).

        Built on the first lookup (a plain scan never needs it) and counted in ``nbytes``; the
        reader builds it before caching a block so the cache's accounting stays exact."""
        s = self._search
        if s is None:
            col = self.batch.column(0)
            s = self._search = col.to_pylist()
            # the key list, and the value offsets list entry() builds (counted here, up front)
            self.nbytes += 8 * self.n + _KEY_OBJECT_OVERHEAD * self.n + col.nbytes
            self.nbytes += 8 * (self.n + 1) + 32 * (self.n + 1)
        return s

    def point_table(self) -> dict[bytes, tuple[int, int, bytes]]:
        """Each key's newest row as ``key -> (seq, kind, value)``: a point lookup in a cached
        block is one dict probe returning a ready tuple (no search, no allocation).

        Built with :meth:`searchable` (whose key objects it shares) before a block is cached,
        and counted in ``nbytes``: a tuple, a value object, a seq int and a dict slot per row."""
        p = self.points
        if p is None:
            keys = self.searchable()
            values = self._values.to_pylist()
            if self._values.null_count:
                values = [b"" if v is None else v for v in values]
            rows = zip(self._seqs.tolist(), self._kinds.tolist(), values, strict=True)
            if self.distinct:
                p = dict(zip(keys, rows, strict=True))
            else:  # versions of a key newest first: the first row of each key must win
                p = dict(zip(reversed(keys), reversed(list(rows)), strict=True))
            self.points = p
            self.nbytes += _POINT_OVERHEAD * self.n + self._values.nbytes
        return p

    def lower_bound(self, key: bytes) -> int:
        """Index of the first row whose key is >= ``key`` (n if none): a bisect of the key
        bytes where they lie (a scan's bound needs ~log2(n) keys, not the block's list)."""
        if self._search is not None:
            return bisect.bisect_left(self._search, key)
        return bisect.bisect_left(_KeyView(self.batch.column(0)), key)

    def find(self, key: bytes) -> int | None:
        """Index of the first (newest) row with exactly ``key``, or None."""
        keys = self.searchable()
        i = bisect.bisect_left(keys, key)
        return i if i < self.n and keys[i] == key else None

    def last_index_of(self, key: bytes) -> int | None:
        """Index of the last row with exactly ``key`` in an unsorted (WAL) block, or None."""
        hits = np.flatnonzero(
            np.asarray(
                pc.equal(self.batch.column(0), pa.scalar(key, pa.binary())).to_numpy(
                    zero_copy_only=False
                ),
                dtype=np.bool_,
            )
        )
        return int(hits[-1]) if len(hits) else None

    def first_seq(self) -> int:
        return int(self._seqs[0])

    def last_seq(self) -> int:
        return int(self._seqs[self.n - 1])

    def timestamps(self, lo: int, hi: int) -> tuple[pa.Array, pa.Array]:
        """Rows ``lo..hi``'s expire_ts and create_ts (int64 ms; null where a row has none)."""
        out = []
        for ts in (self.expire[lo:hi], self.create[lo:hi]):
            out.append(pa.array(ts, pa.int64(), mask=ts == _NO_TS))
        return out[0], out[1]

    def entry(self, i: int) -> tuple[int, int, bytes]:
        vo = self._voffs
        if vo is None:
            bufs = self._values.buffers()
            vo = self._voffs = np.frombuffer(
                bufs[1], dtype=np.int32, count=self.n + 1, offset=4 * self._values.offset
            ).tolist()
            self._vdata = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")
        return int(self._seqs[i]), int(self._kinds[i]), self._vdata[vo[i] : vo[i + 1]].tobytes()


class _KeyView:
    """The keys of a binary Arrow array as a read-only sequence of ``bytes``, each cut from the
    array's data when asked for: what :func:`bisect.bisect_left` needs to search a block's
    keys without building their list."""

    __slots__ = ("_data", "_n", "_offs")

    def __init__(self, keys: pa.Array) -> None:
        bufs = keys.buffers()
        self._n = len(keys)
        self._offs = np.frombuffer(bufs[1], np.int32, count=self._n + 1, offset=4 * keys.offset)
        self._data = memoryview(bufs[2]) if bufs[2] is not None else memoryview(b"")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bytes:
        o = self._offs
        return self._data[o[i] : o[i + 1]].tobytes()


def rows_in(
    block: Block, b: int, b0: int, b1: int, lo_key: bytes | None, hi_key: bytes | None
) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of ``block`` (SST blocks ``b..b + span``, of a scan over blocks
    ``b0..b1``) whose keys lie in ``[lo_key, hi_key)``: only block ``b0`` can hold keys below
    ``lo_key`` (every later block's index key, a bound of its keys from below, is >= it), only
    block ``b1 - 1`` keys at or above ``hi_key``. Every reader of a key range of blocks
    (scans, compaction, the change feed) cuts its blocks here."""
    lo = block.lower_bound(lo_key) if lo_key is not None and b == b0 else 0
    hi = block.lower_bound(hi_key) if hi_key is not None and b + block.span == b1 else block.n
    return lo, hi


GROUP_DECODE_BYTES = MAX_BLOCK_BYTES
"""The decoded bytes a group of blocks stops growing at (docs/format.md, "Limits a reader
enforces"). A group is one GET of stored bytes (at most the read-ahead, or a whole SST already
in memory), and zstd blocks of a few KB may each decompress to ``MAX_BLOCK_BYTES``: decoding
stops once the blocks hold this much, so a group holds at most this plus one block, about
twice the largest block, whatever the number of blocks it spans. Eight times the largest
read-ahead (8 MiB): sound SSTs compressed less than that decode a GET in one pass."""


def decode_group(
    name: str,
    group: pa.Buffer,
    rel: list[int],
    first: int,
    codec: int,
    sorted_keys: bool,
    now_ms: int,
    whole: bool = False,
) -> list[Block]:
    """Blocks ``first..`` stored in ``group`` at relative offsets ``rel`` (one more than there
    are blocks: the end of the last), as many as fit :data:`GROUP_DECODE_BYTES`: the blocks
    are decoded until they hold that much, so fewer may come back than ``rel`` names (never
    none) and the caller goes on from the first block not returned. ``whole``: the blocks of
    sorted keys come as one :class:`Block` spanning them all (``span``, and each block's first
    and last key in ``sub_ends`` for the caller's index check): a scan that neither caches nor
    searches them pays the group's per-block work once, in vectorised calls (4 KiB blocks,
    SlateDB's default, cost a scan 3.7x 64 KiB ones block by block: issue 42)."""
    mv = memoryview(group)
    spans: list[tuple[int, int]] = []
    pieces: list[bytes | memoryview] = []
    pos = 0
    held = 0  # decoded bytes of the blocks so far
    for j in range(len(rel) - 1):
        a, b = rel[j], rel[j + 1]
        if b - a <= CRC_LEN + 2:
            raise CorruptionError(name, f"block {first + j} is too short")
        body = mv[a : b - CRC_LEN]
        if crc32(body) != U32.unpack_from(mv, b - CRC_LEN)[0]:
            raise CorruptionError(name, f"block {first + j} checksum mismatch")
        if codec:
            raw = decompress(codec, body, name, f"block {first + j}", MAX_BLOCK_BYTES)
            pieces.append(raw)
            spans.append((pos, pos + len(raw)))
            pos += len(raw)
            held = pos
        else:
            spans.append((a, b - CRC_LEN))
            held += b - CRC_LEN - a
        if held >= GROUP_DECODE_BYTES:
            break
    raw_buf = pa.py_buffer(b"".join(pieces)) if codec else group
    del pieces  # joined: not held while the rows decode
    return _blocks_of(name, raw_buf, spans, first, sorted_keys, now_ms, whole)


def _blocks_of(
    name: str,
    raw_buf: pa.Buffer,
    spans: list[tuple[int, int]],
    first: int,
    sorted_keys: bool,
    now_ms: int,
    whole: bool = False,
) -> list[Block]:
    """The blocks at ``spans`` of ``raw_buf`` (uncompressed, checked), decoded."""
    dec = decode_fixed(raw_buf, spans)  # rows of one shape (issue 42, goal 4)
    if dec is None:
        dec = decode_blocks(name, raw_buf, spans, first, now_ms)
    batch = pa.RecordBatch.from_arrays(
        [
            dec.keys,
            pa.array(dec.seqs, pa.uint64()),
            pa.array(dec.kinds, pa.uint8()),
            dec.values,
        ],
        schema=ENTRY_SCHEMA,
    )
    nblocks = len(dec.counts)
    where = f"block {first}" if nblocks == 1 else f"block {first}+"
    distinct = [sorted_keys] * nblocks
    repeats = False
    if sorted_keys and batch.num_rows > 1:
        keys = batch.column(0)
        a, b = keys.slice(0, batch.num_rows - 1), keys.slice(1)
        if not pc.all(pc.less(a, b)).as_py():  # unique keys (the common case) end here
            if not pc.all(pc.less_equal(a, b)).as_py():
                raise CorruptionError(name, f"{where} keys are not in order")
            same = np.asarray(pc.equal(a, b).to_numpy(zero_copy_only=False), dtype=np.bool_)
            if np.any(dec.seqs[1:][same] >= dec.seqs[:-1][same]):
                raise CorruptionError(name, f"{where} has versions of a key out of order")
            repeats = True
            # repeats per block: row i repeats row i-1; a block's first row is not compared
            # with the block before (that boundary is the scan's to check)
            ends = np.cumsum(dec.counts)
            rep = np.concatenate([[0], np.cumsum(same)])
            distinct = (rep[ends - 1] - rep[ends - dec.counts] == 0).tolist()
    if nblocks == 1:  # a point lookup's block: the whole batch
        return [_whole(dec, batch, distinct[0])]
    # each block's share of the columns: key and value bytes, offsets, seq and kind per row
    ends = np.cumsum(dec.counts)
    bounds = np.concatenate([[0], ends])
    if whole and sorted_keys:
        # one Block for the group: its order was checked across the blocks above, so within
        # it no version of a key can straddle blocks out of order
        edge = dec.keys.take(pa.array(np.concatenate([bounds[:-1], ends - 1]))).to_pylist()
        return [_whole(dec, batch, not repeats, (edge[:nblocks], edge[nblocks:]))]
    kinds_of = (_offsets(dec.keys), _offsets(dec.values))
    sizes = sum(np.diff(offs[bounds]) for offs in kinds_of) + 17 * np.asarray(dec.counts) + 8
    out: list[Block] = []
    for at, end, size, dist in zip(
        bounds[:-1].tolist(), ends.tolist(), sizes.tolist(), distinct, strict=True
    ):
        out.append(
            Block(
                batch.slice(at, end - at),
                dec.seqs[at:end],
                dec.kinds[at:end],
                dec.expire[at:end],
                dec.create[at:end],
                size,
                dist,
                dec.has_expire and bool((dec.expire[at:end] != _NO_TS).any()),
                batch,
                at,
            )
        )
    return out


def _whole(
    dec: Decoded,
    batch: pa.RecordBatch,
    distinct: bool,
    sub_ends: tuple[list[bytes], list[bytes]] | None = None,
) -> Block:
    """One Block of every decoded row: a point lookup's block, or a scan's group of blocks
    (``sub_ends``: each block's first and last key)."""
    size = dec.keys.nbytes + dec.values.nbytes + 17 * batch.num_rows + 8
    return Block(
        batch,
        dec.seqs,
        dec.kinds,
        dec.expire,
        dec.create,
        size,
        distinct,
        dec.has_expire,
        sub_ends=sub_ends,
    )


def _offsets(arr: pa.Array) -> npt.NDArray[np.int64]:
    return np.frombuffer(
        arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=4 * arr.offset
    ).astype(np.int64)


def flagged_pieces(
    name: str,
    blocks: Iterable[tuple[int, Block]],
    b0: int,
    b1: int,
    lo_key: bytes | None,
    hi_key: bytes | None,
    join: bool,
) -> Iterator[tuple[pa.RecordBatch, bool, bytes, bytes]]:
    """``(batch, keys distinct, first key, last key)`` of the rows of blocks ``b0..b1`` (numbered
    in ``blocks``) in ``[lo_key, hi_key)``: only the first block can hold keys below ``lo_key``
    (every later block's index key, a bound of its keys from below, is >= it), only the last
    keys >= ``hi_key``. With ``join``, whole neighbouring blocks of one group batch come as one
    zero-copy slice of it (a merge then takes a few large batches, never gluing, i.e. copying,
    many small ones). Versions of one key that straddle two blocks must be newest first
    (a :class:`CorruptionError` otherwise), whether one GET decoded both blocks or not."""
    run: list[Block] = []
    prev: tuple[bytes, int] | None = None  # the last key and seq of the block before
    for b, block in blocks:
        first, last = block.ends()
        if prev is not None and prev[0] == first and block.first_seq() >= prev[1]:
            # versions of a key newest first (docs/format.md, "SSTs and WAL SSTs"): a GET's
            # decode checks this inside its blocks, the boundary between GETs is checked here
            raise CorruptionError(name, f"block {b} has versions of a key out of order")
        prev = (last, block.last_seq())
        lo, hi = rows_in(block, b, b0, b1, lo_key, hi_key)
        if hi <= lo:
            continue
        if lo == 0 and hi == block.n:
            if not join:
                yield block.batch, block.distinct, first, last
                continue
            if run and (block.group is not run[-1].group or block.at != run[-1].at + run[-1].n):
                yield _joined(run)
                run = []
            run.append(block)
            continue
        if run:
            yield _joined(run)
            run = []
        yield block.batch.slice(lo, hi - lo), block.distinct, block.key(lo), block.key(hi - 1)
    if run:
        yield _joined(run)


def _joined(run: list[Block]) -> tuple[pa.RecordBatch, bool, bytes, bytes]:
    """Whole neighbouring blocks of one group batch as one slice of it. Its keys are distinct
    when each block's are and no block starts with the key the one before ends with (keys are
    sorted, so that is the only place a key can repeat across blocks)."""
    first = run[0]
    if len(run) == 1:
        lo, hi = first.ends()
        return first.batch, first.distinct, lo, hi
    ends = [bl.ends() for bl in run]
    distinct = all(bl.distinct for bl in run) and all(
        a[1] != b[0] for a, b in itertools.pairwise(ends)
    )
    rows = run[-1].at + run[-1].n - first.at
    return first.group.slice(first.at, rows), distinct, ends[0][0], ends[-1][1]
