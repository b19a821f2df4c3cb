"""A data block kept as its uncompressed bytes and searched in place, without decoding its rows.

Why (issue 42, goal 1): a block decoded into Arrow columns and a per-key dict takes about four
times its bytes in memory, so a cache of decoded blocks holds a quarter of the SSTs it could,
and past that every point lookup decodes a whole block (0.7-1 ms for 64 KiB). A raw block costs
its bytes plus its restart offsets (2 bytes each), and a lookup binary-searches the restart
offsets at the block's end (docs/format.md, "SSTs and WAL SSTs": every restart row holds its
key whole), then walks at most the restart interval before the one found (SlateDB writes one
restart per 16 rows, our writer one per row) to the newest version of the key.

What is checked: the CRC of the stored block and the decompression limit before the bytes are
kept (:func:`raw_block`), the restart array when the block is kept (count, first and last
offset; the others rise where rows are checked), and every row a lookup reads (varints,
lengths and flags inside the block, keys in order along the path). Damage anywhere else in the
block surfaces when a scan decodes it.
A block whose row count (the SST's block stats) equals its restart count, one row per restart
as our writer lays them out, is not walked row by row when it is read (a 64 KiB block's row
check cost more than reading it: issue 42, goal 1), nor checked whole at once: past the cache
a block is read for one lookup. Each lookup checks the rows it reads instead (header varints,
no shared prefix, a key, its end where the next row begins): the first :data:`PREFIX_AT` - 1
the ~9 restart rows of their binary search, lookups :data:`PREFIX_AT` to :data:`CHECK_AT` - 1
the two rows around where a search of the restart keys' 8-byte prefixes lands; the
:data:`CHECK_AT`-th gathers every restart row's header and flags bytes
(:meth:`RawBlock.check_restarts`), enough to prove each row ends where the next begins, so
later searches read no key through a damaged length without a check per row. A block with a
two-byte header varint (a key or value of 128 bytes or more) is never checked whole; every
lookup checks its binary search's rows. A failed check sends the block
to the row walk, which raises. Under an intact CRC its bytes are the writer's; damage under a
recomputed CRC (a buggy writer) can still only raise ``CorruptionError`` or give a wrong answer
(keys out of order, as before the skip), never another error.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError
from slatedb_core.sst.decode import decode_blocks
from slatedb_core.sst.format import (
    CRC_LEN,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
    MAX_BLOCK_BYTES,
    U32,
    decompress,
)
from slatedb_core.sst.rows import F_CREATE, F_EXPIRE, F_MERGE, F_TOMBSTONE
from slatedb_core.store.checksum import crc32

_U16 = struct.Struct(">H")
_SWAP = sys.byteorder == "little"
_KNOWN = F_TOMBSTONE | F_EXPIRE | F_CREATE | F_MERGE
_TAIL = np.array(
    [9 + 8 * bool(f & F_EXPIRE) + 8 * bool(f & F_CREATE) for f in range(256)], dtype=np.int64
)  # a row's seq, flags and timestamps, by its flags byte
_TAILS: list[int] = _TAIL.tolist()
_BAD_FLAGS = np.array(
    [bool(f & ~_KNOWN) or bool(f & F_TOMBSTONE and f & F_MERGE) for f in range(256)]
)
_MIN_ROW = 13  # the shortest row: three header bytes, a key byte, seq and flags
_OVERHEAD = 200  # the object, its bytes' header and the offsets array's header
CHECK_AT = 16
"""The lookup of a lazy block (:func:`raw_block`) that checks it whole: the earlier ones check
the rows their search reads (the first :data:`PREFIX_AT` - 1 a binary search's ~9, the next ones the
two rows around where a search of the restart keys' prefixes lands). A check costs ~20 us of numpy calls per
64 KiB and spares each later lookup ~1 us: a block read for a few lookups (the first 10k gets
after an open fill the cache so) never pays it (issue 42, goal 1)."""
PREFIX_AT = 5
"""The lookup of a lazy block from which searches go through its restart keys' prefixes
(built then, ~12 us of numpy calls per 64 KiB block; a search through them ~2 us, a checked
binary search ~4.5 us): the earlier ones search as the first does. Past the cache a block is
looked up once or twice before it is evicted, and a prefix build at its second lookup cost more
than it saved (issue 42, goal 1); from the fifth on it pays for itself."""
Entry = tuple[int, int, bytes]  # (seq, kind, value), as Block.point_table's


def raw_block(name: str, b: int, stored: bytes, codec: int, rows: int = -1) -> RawBlock:
    """Block ``b`` of ``name`` from its stored bytes (body, then u32 CRC): CRC checked, then
    decompressed within :data:`MAX_BLOCK_BYTES` (as the decoder does: docs/format.md).

    ``rows``: the block's row count from the SST's block stats (-1: unknown). When it equals
    the block's restart count, every restart interval is one row (a block holds at least one
    row per restart) and :meth:`RawBlock.check_restarts` replaces the row check: the CRC
    already proved the bytes are the writer's, and a lookup reads only restart rows."""
    n = len(stored)
    if n <= CRC_LEN + 2:
        raise CorruptionError(name, f"block {b} is too short")
    body = memoryview(stored)[: n - CRC_LEN]
    if crc32(body) != U32.unpack_from(stored, n - CRC_LEN)[0]:
        raise CorruptionError(name, f"block {b} checksum mismatch")
    if codec:
        data = bytes(decompress(codec, body, name, f"block {b}", MAX_BLOCK_BYTES))
        raw = RawBlock(name, b, data, len(data))
    else:
        raw = RawBlock(name, b, stored, n - CRC_LEN)
    if rows == len(raw.restarts) and raw.limit < _MIN_ROW * 0x10000:
        raw.lazy = True  # each lookup checks the rows on its path, the CHECK_AT-th all of them
    else:
        raw.check_rows()
    return raw


class RawBlock:
    """One block's uncompressed bytes ``data[:end]`` (rows, u16 restart offsets, u16 count)."""

    __slots__ = (
        "b",
        "data",
        "end",
        "finds",
        "lazy",
        "limit",
        "name",
        "nbytes",
        "prefixes",
        "restarts",
        "single",
        "wide",
    )

    def __init__(self, name: str, b: int, data: bytes, end: int) -> None:
        self.name = name
        self.b = b
        self.data = data
        self.end = end
        if end < 2:
            raise CorruptionError(name, f"block {b} is too short")
        (r,) = _U16.unpack_from(data, end - 2)
        limit = end - 2 - 2 * r  # where the rows end
        if r == 0 or limit < 1:
            raise CorruptionError(name, f"block {b} has {r} restart points")
        rs = array("H")
        rs.frombytes(data[limit : end - 2])
        if _SWAP:
            rs.byteswap()
        if rs[0] != 0 or rs[-1] >= limit:  # increasing: checked by check_rows
            raise CorruptionError(name, f"block {b} has bad restart offsets")
        self.restarts = rs
        self.limit = limit
        # every restart interval one row with one-byte header varints (check_rows found it so)
        self.single = False
        # one row per restart by the SST's block stats, not yet checked (:func:`raw_block`):
        # a lookup checks each row its search reads until the second checks them all
        self.lazy = False
        # one row per restart with a header varint of two bytes (a key or value of 128 bytes
        # or more): not searched through prefixes; every lookup checks the rows it reads
        self.wide = False
        # each restart key's first 8 bytes as a big-endian int, built by a lazy block's
        # PREFIX_AT-th lookup, a checked one's second; counted in nbytes up front
        self.prefixes: array[int] | None = None
        self.finds = 0
        self.nbytes = len(data) + 10 * r + _OVERHEAD

    def check_restarts(self) -> bool:
        """Whether every restart row's header is three one-byte varints, no shared prefix and a
        key (:attr:`single` set then, and :attr:`prefixes` built from the same gathers), for a
        block known to hold one row per restart: gathers of the restart rows' header and flags
        bytes instead of :meth:`check_rows`' walk of every row. Every row must end where the
        next begins (the last where the restart offsets begin), so no binary search step reads
        a key through a damaged length. Each numpy call costs about a microsecond whatever its
        size (issue 42, goal 1): the gathers index the bytes directly (an offset past the rows
        is an IndexError, i.e. not so), and offsets need no order check of their own, since a
        row of positive length ending where the next begins makes them increase."""
        d = self.data
        limit = self.limit
        try:
            at = np.frombuffer(self.restarts, np.uint16).astype(np.intp)
            buf = np.frombuffer(d, np.uint8, count=limit)
            u = buf[at + 1]
            v = buf[at + 2]
            # a restart row sharing a prefix, an empty key, a length of two bytes or more
            if buf[at].any() or not u.all():
                return False
            if int((u | v).max()) >= 0x80:
                self.wide = True  # searched with each lookup's rows checked (_find_lazy)
                return False
            end = at + 3
            end += u
            end += v  # each row's seq
            if int(end.max()) + 9 > limit:
                return False
            end += _TAIL[buf[end + 8]]  # each row's end
        except IndexError:  # an offset past the rows
            return False
        if end[-1] != limit or (end[:-1] != at[1:]).any():
            return False
        self.single = True
        if self.prefixes is None:
            if int(u.min()) >= 8:  # each key's first 8 bytes, big-endian, as ints
                pre = np.ndarray((limit - 10,), np.uint64, buffer=d, offset=3, strides=(1,))[at]
                out: array[int] = array("Q")
                out.frombytes((pre.byteswap() if _SWAP else pre).tobytes())
                self.prefixes = out
            else:
                self.prefixes = self._build_prefixes()
        return True

    def _build_prefixes(self) -> array[int]:
        """Each restart key's first 8 bytes (zeros past a shorter key) as a big-endian u64:
        ordered as the keys are (ties aside), so a search compares ints in C first."""
        buf = np.frombuffer(self.data, np.uint8, count=self.limit)
        at = np.frombuffer(self.restarts, np.uint16).astype(np.intp)
        at += 3  # the key (a restart row has at least 13 bytes: 8 from its key on are in it)
        rows = np.ndarray((self.limit - 7, 8), np.uint8, buffer=self.data, strides=(1, 1))[at]
        lens = buf[at - 2]
        if int(lens.min()) < 8:
            rows[np.arange(8) >= lens[:, None]] = 0
        out: array[int] = array("Q")
        out.frombytes(rows.view(">u8").astype(np.uint64).tobytes())
        return out

    def check_rows(self) -> None:
        """Every row well formed (as the decoder checks them: docs/format.md, row codec v2),
        so damage anywhere in a block a lookup reads is ``CorruptionError``, not a wrong answer.
        Vectorised over the restart rows when each restart interval is one row whose header
        varints are one byte each (our writer's default); otherwise the decoder walks the rows."""
        limit = self.limit
        p = np.frombuffer(self.restarts, np.uint16).astype(np.int64)
        e = np.append(p[1:], limit)
        if int((e - p).min()) >= 13:  # header, a key byte, seq, flags: every read below in range
            # each restart row's three header bytes, gathered at once (one index per row)
            h = np.ndarray((limit - 2, 3), np.uint8, buffer=self.data, strides=(1, 1))[p]
            if int(h.max()) < 0x80:
                sp = p + 3 + h[:, 1] + h[:, 2]
                if int((e - sp).min()) >= 9:
                    f = np.frombuffer(self.data, np.uint8, count=limit)[sp + 8]
                    if np.array_equal(sp + _TAIL[f], e):
                        if h[:, 0].any():
                            raise self._bad("a restart row shares a prefix")
                        if not h[:, 1].all():
                            raise self._bad("a row has an empty key")
                        if _BAD_FLAGS[f].any():
                            raise self._bad(
                                "a row has unknown flags, or is both a tombstone and a merge "
                                "operand"
                            )
                        self.single = True
                        return
        try:
            decode_blocks(self.name, pa.py_buffer(self.data), [(0, self.end)], self.b, 0)
        except (ValueError, IndexError, struct.error, OverflowError, pa.ArrowException) as e:
            raise self._bad(str(e)) from None

    def check_bounds(self, lo: bytes, hi: bytes | None) -> None:
        """The block's first key must be at or above its index key ``lo``, its last restart's
        key at or below the next block's ``hi`` (None for the last block): catches a misplaced
        block, as the decoder's check of its first and last key does."""
        if self.single:  # restart rows' headers checked (check_restarts, check_rows)
            d = self.data
            p = self.restarts[-1]
            first = d[3 : 3 + d[1]]
            last = d[p + 3 : p + 3 + d[p + 1]]
        elif self.lazy and (
            (first_ := self._lazy_key(0)) is not None
            and (last_ := self._lazy_key(len(self.restarts) - 1)) is not None
        ):
            first, last = first_, last_
        else:
            if self.lazy:
                self._check_all(settle=True)
                self.check_bounds(lo, hi)
                return
            first = self._restart_key(0)
            last = self._restart_key(self.restarts[-1])
        if first < lo or (hi is not None and last > hi):
            raise CorruptionError(self.name, f"block {self.b} keys disagree with the index")

    def _lazy_key(self, i: int) -> bytes | None:
        """The key of restart row ``i`` when the row is one row of our writer's layout, checked
        as each row of a lazy search is (:meth:`_find_lazy`); None when it is not (damage,
        or another layout: :meth:`_check_all` decides)."""
        kp = self._lazy_row(i)
        return None if kp is None else self.data[kp[0] : kp[0] + kp[1]]

    def _lazy_row(self, i: int) -> tuple[int, int, int, int] | None:
        """``(key position, key length, value length, seq position)`` of restart row ``i`` as
        :meth:`_find_lazy` reads and checks it, or None where that check fails."""
        d = self.data
        rs = self.restarts
        lim = self.limit
        try:
            p = rs[i]
            u = d[p + 1]
            q = p + 2
            if u >= 0x80:
                c = d[q]
                q += 1
                if c >= 0x80:
                    return None
                u = u & 0x7F | c << 7
            v = d[q]
            q += 1
            if v >= 0x80:
                c = d[q]
                q += 1
                if c >= 0x80:
                    return None
                v = v & 0x7F | c << 7
            sp = q + u + v
            nxt = rs[i + 1] if i + 1 < len(rs) else lim
            if d[p] or not u or sp + 9 > lim or nxt > lim or sp + _TAILS[d[sp + 8]] != nxt:
                return None
        except IndexError:
            return None
        return q, u, v, sp

    def _find_lazy(self, key: bytes, now: int) -> Entry | None:
        """:meth:`find` in a block of one row per restart by its stats, not checked as a
        whole: the binary search checks each restart row it reads as :meth:`_lazy_key` does
        (inlined), so no step compares a key read through a damaged length, and the row it
        lands on (one of those read) is checked whole. A block read once past the cache pays
        for the ~9 rows of its search, not a check of its ~500 (issue 42, goal 1). A row not
        of our writer's layout (a length of 128 or more, or damage) ends the shortcut: the
        block is checked whole (:meth:`_check_all`) and searched as any other."""
        d = self.data
        rs = self.restarts
        lim = self.limit
        lo = 0
        hi = n = len(rs)
        try:
            while lo < hi:
                mid = (lo + hi) >> 1
                p = rs[mid]
                u = d[p + 1]
                q = p + 2
                if u >= 0x80:  # a varint of two bytes (of more: not our writer's)
                    c = d[q]
                    q += 1
                    if c >= 0x80:
                        break
                    u = u & 0x7F | c << 7
                v = d[q]
                q += 1
                if v >= 0x80:
                    c = d[q]
                    q += 1
                    if c >= 0x80:
                        break
                    v = v & 0x7F | c << 7
                sp = q + u + v
                nxt = rs[mid + 1] if mid + 1 < n else lim
                if d[p] or not u or sp + 9 > lim or nxt > lim or sp + _TAILS[d[sp + 8]] != nxt:
                    break  # not our writer's layout here (or damaged): checked whole below
                if d[q : q + u] < key:
                    lo = mid + 1
                else:
                    hi = mid
            else:
                return self._landed(key, now, lo)
        except IndexError:
            pass
        self._check_all(settle=True)  # raises for damage; else searched as any block is
        return self.find(key, now)

    def _find_bracketed(self, key: bytes, now: int) -> Entry | None:
        """:meth:`find` in a lazy block through its restart keys' prefixes (built unchecked,
        :meth:`_unchecked_prefixes`): a prefix of a row the block's damage moved can steer the
        search anywhere, so the rows around where it lands are checked as :meth:`_find_lazy`
        checks its rows and must bracket the key (the row before below it, the row landed on
        at or above it: the first row of the key, its newest version). As with every search
        here, keys out of order under a recomputed CRC are not looked for (docs: module)."""
        pre = self.prefixes
        if pre is None:
            pre = self._unchecked_prefixes()
            if pre is None:
                if self.wide:  # a key shorter than 8 bytes behind a two-byte varint
                    return self._find_lazy(key, now)
                self._check_all(settle=True)
                return self.find(key, now)
        n = len(pre)
        if len(key) >= 8:
            x = int.from_bytes(key[:8], "big")
        else:
            x = int.from_bytes(key, "big") << (64 - 8 * len(key))
        lo = bisect_left(pre, x)
        hi = bisect_right(pre, x, lo) if lo + 1 < n and pre[lo + 1] == x else lo
        lazy_key = self._lazy_key
        while lo < hi:  # restart keys sharing the key's prefix: compared as bytes
            mid = (lo + hi) >> 1
            k = lazy_key(mid)
            if k is None:
                break
            if k < key:
                lo = mid + 1
            else:
                hi = mid
        else:
            below = lazy_key(lo - 1) if lo else b""
            if below is not None and below < key:
                if lo == n:
                    return None
                row = self._lazy_row(lo)
                if row is not None:
                    kp, u, v, sp = row
                    d = self.data
                    k = d[kp : kp + u]
                    if k >= key:
                        if k != key:
                            return None
                        f = d[sp + 8]
                        if not f:
                            return int.from_bytes(d[sp : sp + 8], "big"), KIND_VALUE, d[kp + u : sp]
                        return self._entry(d, kp + u, v, sp, f, self.limit, now)
        self._check_all(settle=True)  # a row on the way is damaged, or the search strayed
        return self.find(key, now)

    def _unchecked_prefixes(self) -> array[int] | None:
        """:meth:`_build_prefixes` for a block whose rows are not checked, each key found after
        its row's header varints of one or two bytes (:attr:`wide` set when one has two):
        None when a restart offset is too near the rows' end for a row of our writer's layout
        (damage), or when a wide block has a key shorter than 8 bytes (no masked prefixes)."""
        limit = self.limit
        at = np.frombuffer(self.restarts, np.uint16).astype(np.intp)
        if int(at.max()) + _MIN_ROW > limit:
            return None
        buf = np.frombuffer(self.data, np.uint8, count=limit)
        u = buf[at + 1]
        v = buf[at + 2]
        if int((u | v).max()) >= 0x80:
            self.wide = True
            uw = u >= 0x80  # a two-byte key length: the value length starts a byte later
            vw = np.where(uw, buf[at + 3], v) >= 0x80
            if int(np.where(uw, 8, u).min()) < 8:
                return None
            at = at + uw
            at += vw
            if int(at.max()) + 11 > limit:
                return None
        elif int(u.min()) < 8:
            self.prefixes = self._build_prefixes()  # keys shorter than 8 bytes: masked
            return self.prefixes
        pre = np.ndarray((limit - 10,), np.uint64, buffer=self.data, offset=3, strides=(1,))[at]
        out: array[int] = array("Q")
        out.frombytes((pre.byteswap() if _SWAP else pre).tobytes())
        self.prefixes = out
        return out

    def _landed(self, key: bytes, now: int, lo: int) -> Entry | None:
        """The row :meth:`_find_lazy`'s search landed on, which it read and checked."""
        if lo == len(self.restarts):
            return None
        # row lo was read (and checked) by the search: the last step that lowered hi read it
        row = self._lazy_row(lo)
        assert row is not None
        kp, u, v, sp = row
        d = self.data
        if d[kp : kp + u] != key:
            return None
        f = d[sp + 8]
        if not f:
            return int.from_bytes(d[sp : sp + 8], "big"), KIND_VALUE, d[kp + u : sp]
        return self._entry(d, kp + u, v, sp, f, self.limit, now)

    def _check_all(self, *, settle: bool = False) -> None:
        """A lazy block's CHECK_AT-th lookup: every row checked (:meth:`check_restarts`, else the
        row walk), so later lookups search without checking rows on the way. A block of wide
        headers stays lazy (the walk costs ~200 us for 64 KiB), unless ``settle``: a lookup's
        check failed, and the row walk decides whether the block is damaged."""
        if self.check_restarts():
            self.lazy = False
        elif settle or not self.wide:
            self.check_rows()
            self.lazy = False

    def _bad(self, what: str) -> CorruptionError:
        return CorruptionError(self.name, f"block {self.b} is malformed: {what}")

    def find(self, key: bytes, now: int) -> Entry | None:
        """``(seq, kind, value)`` of the first (newest) row of ``key``, or None. A row whose
        expire_ts is at or before ``now`` reads as a tombstone (as the decoder reads it)."""
        d = self.data
        rs = self.restarts
        lim = self.limit
        lo = 0
        hi = n = len(rs)
        if self.lazy:  # unchecked: lookups check their path until the CHECK_AT-th checks all
            self.finds += 1
            if self.finds < PREFIX_AT:
                return self._find_lazy(key, now)
            if self.finds < CHECK_AT or self.wide:
                return self._find_bracketed(key, now)
            self._check_all()
            if self.lazy:  # wide headers: each lookup goes on checking where it lands
                return self._find_bracketed(key, now)
        if self.single:  # restart headers checked (check_restarts, check_rows): search them
            pre = self.prefixes
            if pre is None:
                self.finds += 1
                if self.finds > 1:
                    pre = self.prefixes = self._build_prefixes()
            if pre is not None:  # the keys' first 8 bytes in C; bytes only among equal ones
                if len(key) >= 8:
                    x = int.from_bytes(key[:8], "big")
                else:
                    x = int.from_bytes(key, "big") << (64 - 8 * len(key))
                lo = bisect_left(pre, x)
                # the bytes search runs only among several keys of this prefix; with one (or
                # none) the row at lo is the key's if any row is
                hi = bisect_right(pre, x, lo) if lo + 1 < n and pre[lo + 1] == x else lo
            while lo < hi:
                mid = (lo + hi) >> 1
                p = rs[mid] + 3
                if d[p : p + d[p - 2]] < key:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == n:
                return None
            p = rs[lo]
            u = d[p + 1]
            v = d[p + 2]
            kp = p + 3
            sp = kp + u + v
            # the row landed on is checked whole (check_restarts read only its header): damage
            # under a recomputed CRC is CorruptionError, as the row walk found it
            if sp + 9 > lim:
                raise self._bad("a row runs past the block's rows")
            f = d[sp + 8]
            lo += 1
            if sp + _TAILS[f] != (rs[lo] if lo < n else lim):
                raise self._bad("a row's lengths disagree with where the next row starts")
            if d[kp : kp + u] != key:
                return None
            if not f:  # a plain value, the common row
                return int.from_bytes(d[sp : sp + 8], "big"), KIND_VALUE, d[kp + u : sp]
            return self._entry(d, kp + u, v, sp, f, lim, now)
        try:
            while lo < hi:  # the first restart whose key is >= key
                mid = (lo + hi) >> 1
                p = rs[mid]
                u = d[p + 1]
                if d[p] or u >= 0x80 or d[p + 2] >= 0x80:
                    k = self._restart_key(p)
                else:
                    k = d[p + 3 : p + 3 + u]
                if k < key:
                    lo = mid + 1
                else:
                    hi = mid
            # the newest version may start inside the interval before (several rows a restart)
            p = rs[lo - 1] if lo else 0
            prev = b""
            while p < lim:
                s, u, v, kp = self._header(p)
                if s:
                    if s > len(prev):
                        raise self._bad("a row shares more bytes than the previous key has")
                    k = prev[:s] + d[kp : kp + u]
                else:
                    k = d[kp : kp + u]
                if not k:
                    raise self._bad("a row has an empty key")
                if k < prev:
                    raise self._bad("keys are not in order")
                sp = kp + u + v
                if sp + 9 > lim:
                    raise self._bad("a row runs past the block's rows")
                f = d[sp + 8]
                if k >= key:
                    if k != key:
                        return None
                    return self._entry(d, kp + u, v, sp, f, lim, now)
                prev = k
                p = sp + 9 + (8 if f & F_EXPIRE else 0) + (8 if f & F_CREATE else 0)
            return None
        except IndexError:
            raise self._bad("a row runs past the block") from None

    def _entry(self, d: bytes, vp: int, v: int, sp: int, f: int, lim: int, now: int) -> Entry:
        if f & ~_KNOWN or (f & F_TOMBSTONE and f & F_MERGE):
            raise self._bad("a row has unknown flags, or is both a tombstone and a merge operand")
        seq = int.from_bytes(d[sp : sp + 8], "big")
        if f & F_TOMBSTONE:
            return seq, KIND_TOMBSTONE, b""
        if f & F_EXPIRE:
            if sp + 17 > lim:
                raise self._bad("a row runs past the block's rows")
            if int.from_bytes(d[sp + 9 : sp + 17], "big", signed=True) <= now:
                return seq, KIND_TOMBSTONE, b""
        return seq, KIND_MERGE if f & F_MERGE else KIND_VALUE, d[vp : vp + v]

    def _restart_key(self, p: int) -> bytes:
        s, u, _, kp = self._header(p)
        if s:
            raise self._bad("a restart row shares a prefix")
        if not u:
            raise self._bad("a row has an empty key")
        return self.data[kp : kp + u]

    def _header(self, p: int) -> tuple[int, int, int, int]:
        """``(shared, unshared, value_len, key position)`` of the row at ``p``."""
        d = self.data
        lim = self.limit
        out = [0, 0, 0]
        for j in range(3):
            val = shift = 0
            while True:
                if p >= lim or shift > 28:
                    raise self._bad("a row header runs past the block's rows")
                c = d[p]
                p += 1
                val |= (c & 0x7F) << shift
                if c < 0x80:
                    break
                shift += 7
            out[j] = val
        if p + out[1] + out[2] > lim:
            raise self._bad("a row runs past the block's rows")
        return out[0], out[1], out[2], p
