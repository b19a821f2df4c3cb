"""SlateDB's bloom filter, bit for bit, built for a whole batch of keys in numpy.

What SlateDB 0.17 stores (its ``filter.rs`` and ``filter_policy.rs``; checked against the wheel's
bytes): each key's hash is SipHash-1-3 with a zero key over the key's bytes alone. A filter over
``n`` hashes with ``b`` bits per key has ``ceil(n * b / 8)`` bytes (``m`` bits) and
``k = int(float32(b) * 0.69)`` probes (6 for the default 10). Probes are enhanced double
hashing: ``h = lo32(hash) % m``, ``d = hi32(hash) % m``; for ``i`` in ``0..k``:
``d = (d + i) % m``, set bit ``h``, ``h = (h + d) % m``. Bit ``p`` is
``byte[p // 8] >> (p % 8) & 1``. The filter's bytes are ``u16 k`` (big-endian) then the bits.

The SST's filter section is a composite block (``FilterFormat::Composite``)::

    u16 filter_count | per filter: u16 name_len, name, u64 data_len, data

with one filter named ``_bf`` (SlateDB's BloomFilterPolicy with whole-key filtering). All
integers big-endian. Filters of other names are skipped by both engines.

SipHash runs on all keys at once: keys are grouped by their number of 8-byte words, and each
group is one matrix whose columns are hashed with numpy's wrapping u64 arithmetic.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from siphash24 import siphash13 as _siphash13

from slatedb_core.errors import CorruptionError

BLOOM_NAME = b"_bf"
_MASK = (1 << 64) - 1
_C0, _C1, _C2, _C3 = 0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_WORDS = [struct.Struct(f"<{i}Q") for i in range(65)]
_CHUNK = 1 << 20  # key bytes per matrix, to bound temporaries


def num_probes(bits_per_key: int) -> int:
    return int(np.float32(bits_per_key) * np.float32(0.69))


def _sip_words(words: npt.NDArray[np.uint64], last: int | None = None) -> npt.NDArray[np.uint64]:
    """SipHash-1-3 (zero key) of rows of u64 words already in message order, final word last,
    or, given ``last``, that final word for every row (keys of one width a multiple of 8: it
    holds only the length). In-place numpy arithmetic (wrapping u64), one temporary for the
    rotations."""
    n, w = words.shape
    v0 = np.full(n, _C0, dtype=np.uint64)
    v1 = np.full(n, _C1, dtype=np.uint64)
    v2 = np.full(n, _C2, dtype=np.uint64)
    v3 = np.full(n, _C3, dtype=np.uint64)
    tmp = np.empty(n, dtype=np.uint64)
    shifts = {b: (np.uint64(b), np.uint64(64 - b)) for b in (13, 16, 17, 21, 32)}

    def rotl(x: npt.NDArray[np.uint64], b: int) -> None:
        left, right = shifts[b]
        np.right_shift(x, right, out=tmp)
        np.left_shift(x, left, out=x)
        x |= tmp

    def rnd() -> None:
        nonlocal v0, v1, v2, v3  # in-place updates: the same arrays throughout
        v0 += v1
        rotl(v1, 13)
        v1 ^= v0
        rotl(v0, 32)
        v2 += v3
        rotl(v3, 16)
        v3 ^= v2
        v0 += v3
        rotl(v3, 21)
        v3 ^= v0
        v2 += v1
        rotl(v1, 17)
        v1 ^= v2
        rotl(v2, 32)

    for t in range(w):
        m = np.ascontiguousarray(words[:, t])
        v3 ^= m
        rnd()
        v0 ^= m
    if last is not None:
        v3 ^= np.uint64(last)
        rnd()
        v0 ^= np.uint64(last)
    v2 ^= np.uint64(0xFF)
    rnd()
    rnd()
    rnd()
    v0 ^= v1
    v0 ^= v2
    v0 ^= v3
    return v0


def _group_matrix(
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lens: npt.NDArray[np.int64],
    nwords: int,
) -> npt.NDArray[np.uint64]:
    """Keys (all with ``nwords`` message words) as rows of LE words, the length byte on top."""
    width = 8 * nwords
    padded = np.concatenate([data, np.zeros(width, dtype=np.uint8)])
    mat = np.lib.stride_tricks.sliding_window_view(padded, width)[starts]
    mat *= np.arange(width)[None, :] < lens[:, None]
    mat[:, width - 1] = (lens & 0xFF).astype(np.uint8)
    return mat.view("<u8").astype(np.uint64, copy=False)


def hash_keys(data: npt.NDArray[np.uint8], offs: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """SipHash-1-3 of every key ``data[offs[i]:offs[i+1]]``."""
    n = len(offs) - 1
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    starts = offs[:-1].astype(np.int64, copy=False)
    lens = np.diff(offs).astype(np.int64, copy=False)
    nwords = lens // 8 + 1
    lo, hi = int(nwords.min()), int(nwords.max())
    if lo == hi and int(lens.min()) == int(lens.max()):
        width = int(lens[0])
        step = max(1, _CHUNK // max(width, 1))
        base = int(offs[0])
        for a in range(0, n, step):
            b = min(n, a + step)
            if width and width % 8 == 0:
                # the keys' own bytes are the message words; the final word is the length alone
                rows = data[base + a * width : base + b * width].view("<u8")
                out[a:b] = _sip_words(
                    rows.reshape(b - a, width // 8).astype(np.uint64, copy=False),
                    (width & 0xFF) << 56,
                )
                continue
            mat = np.zeros((b - a, 8 * lo), dtype=np.uint8)
            if width:
                mat[:, :width] = data[base + a * width : base + b * width].reshape(b - a, width)
            mat[:, 8 * lo - 1] = width & 0xFF
            out[a:b] = _sip_words(mat.view("<u8").astype(np.uint64, copy=False))
        return out
    for w in np.unique(nwords).tolist():
        idx = np.flatnonzero(nwords == w)
        step = max(1, _CHUNK // (8 * w))
        for a in range(0, len(idx), step):
            part = idx[a : a + step]
            out[part] = _sip_words(_group_matrix(data, starts[part], lens[part], w))
    return out


def hash_key(key: bytes) -> int:
    """:func:`hash_keys` of one key (a point lookup hashes one key): SipHash-1-3 with a zero key,
    in C (the ``siphash24`` package; its ``intdigest`` is signed, the filter's hash unsigned).
    ``tests/sst/test_bloom.py`` checks it against :func:`hash_keys` and SlateDB's filters."""
    h: int = _siphash13(key).intdigest()
    return h & _MASK


_PROBE_CHUNK = 1 << 16
"""Hashes probed at a time by :func:`build_bloom`: its temporaries are a few arrays of this many
integers, not of the filter's keys (a 256 MiB output SST has ~2M keys: ~60 MiB of temporaries
when they were probed all at once, issue 42, goal 3)."""


def build_bloom(
    hashes: npt.NDArray[np.uint64] | Sequence[npt.NDArray[np.uint64]], bits_per_key: int
) -> bytes:
    """One bloom filter's bytes (``u16 k`` + bits) over these key hashes (one array, or the
    arrays of a streamed SST's batches in order: the filter of their concatenation, which is
    never made). The bits are set in one array in place, ``_PROBE_CHUNK`` hashes at a time."""
    parts = [hashes] if isinstance(hashes, np.ndarray) else list(hashes)
    n = sum(len(p) for p in parts)
    nbytes = (((n * bits_per_key) & 0xFFFFFFFF) + 7) // 8
    k = num_probes(bits_per_key)
    if nbytes == 0:
        return _U16.pack(k)
    m = 8 * nbytes
    bits = np.zeros(m, dtype=np.bool_)
    # in u32 (half the memory traffic) while 2 * m fits
    dt: type[np.unsignedinteger[Any]] = np.uint32 if m < 1 << 31 else np.uint64
    for part in parts:
        for a in range(0, len(part), _PROBE_CHUNK):
            _probe(bits, part[a : a + _PROBE_CHUNK], m, k, dt)
    return _U16.pack(k) + np.packbits(bits, bitorder="little").tobytes()


def _probe(
    bits: npt.NDArray[np.bool_],
    hashes: npt.NDArray[np.uint64],
    m: int,
    k: int,
    dt: type[np.unsignedinteger[Any]],
) -> None:
    """Set the ``k`` probe bits of each hash in ``bits`` (``m`` of them): one u32 modulo each to
    start, then h + d (and d + i) below 2 * m, brought under m by min(x, x - m) in wrapping
    arithmetic (k < m always: k = 0.69 * bits per key and m >= 8 * bits per key)."""
    m32 = np.uint32(m)
    h = (hashes.astype(np.uint32) % m32).astype(dt, copy=False)
    d = ((hashes >> np.uint64(32)).astype(np.uint32) % m32).astype(dt, copy=False)
    mu = dt(m)
    tmp = np.empty(len(hashes), dtype=dt)
    for i in range(k):
        if i:
            d += dt(i)
            np.subtract(d, mu, out=tmp)
            np.minimum(d, tmp, out=d)
        bits[h] = True
        h += d
        np.subtract(h, mu, out=tmp)
        np.minimum(h, tmp, out=h)


def build_filter_block(
    hashes: npt.NDArray[np.uint64] | Sequence[npt.NDArray[np.uint64]], bits_per_key: int
) -> bytes:
    """The composite filter block holding one ``_bf`` bloom filter (before compression), over
    ``hashes`` as :func:`build_bloom` takes them."""
    data = build_bloom(hashes, bits_per_key)
    return b"".join(
        [_U16.pack(1), _U16.pack(len(BLOOM_NAME)), BLOOM_NAME, _U64.pack(len(data)), data]
    )


def bloom_from_filter_block(
    name: str, buf: bytes | memoryview, composite: bool
) -> BloomFilter | None:
    """The ``_bf`` filter of a filter section (already checked and decompressed), or None.
    The filter's bits are not copied when they are most of ``buf`` (:class:`BloomFilter`): a
    large SST's filter is megabytes of fresh memory, each copy ~1 ms per 1.5 MB when a
    reopened database opens its SSTs (issue 42, goal 1)."""
    data = memoryview(buf)
    if not composite:
        return BloomFilter(name, data)
    try:
        (count,) = _U16.unpack_from(data, 0)
        pos = 2
        found: BloomFilter | None = None
        for _ in range(count):
            (nlen,) = _U16.unpack_from(data, pos)
            fname = data[pos + 2 : pos + 2 + nlen]
            pos += 2 + nlen
            (dlen,) = _U64.unpack_from(data, pos)
            pos += 8
            if len(fname) != nlen or pos + dlen > len(data):
                raise CorruptionError(name, "composite filter block entry runs past its end")
            if fname == BLOOM_NAME:
                found = BloomFilter(name, data[pos : pos + dlen])
            pos += dlen
    except struct.error:
        raise CorruptionError(name, "composite filter block is truncated") from None
    return found


class BloomFilter:
    """A decoded bloom filter; :meth:`may_contain` answers for one key."""

    __slots__ = ("_bits", "_k", "_m")

    def __init__(self, name: str, buf: bytes | memoryview) -> None:
        if len(buf) < 2:
            raise CorruptionError(name, f"bloom filter of {len(buf)} bytes is too short")
        self._k: int = _U16.unpack_from(buf, 0)[0]
        bits = memoryview(buf)[2:]
        # the bits stay where they are when they are most of a read-only buffer they lie in
        # (an SST's metadata region read for it), else they are copied out: a reader over a
        # whole SST in memory would otherwise keep all of it, and a writable buffer reused by
        # its owner would change the filter under us (review51)
        base = bits.obj
        held = len(bits) if base is None else memoryview(base).nbytes
        keep = bits.readonly and held <= 2 * len(bits)
        self._bits: bytes | memoryview = bits if keep else bytes(bits)
        self._m = 8 * len(self._bits)

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(hash_key(key))

    def may_contain_hash(self, h: int) -> bool:
        m = self._m
        if m == 0:
            return False
        bits = self._bits
        p = (h & 0xFFFFFFFF) % m
        # the first probe before the loop: most probes of a key the SST lacks stop there
        if not (bits[p >> 3] >> (p & 7)) & 1:
            return self._k == 0
        d = (h >> 32) % m
        p = (p + d) % m
        for i in range(1, self._k):
            d = (d + i) % m
            if not (bits[p >> 3] >> (p & 7)) & 1:
                return False
            p = (p + d) % m
        return True

    def may_contain_keys(self, keys: list[bytes]) -> list[bool]:
        """:meth:`may_contain` of each key, hashed all at once (:func:`hash_keys`)."""
        if len(keys) < 4:  # numpy's fixed cost exceeds a few scalar hashes
            return [self.may_contain(k) for k in keys]
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        offs = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        data = np.frombuffer(b"".join(keys), dtype=np.uint8)
        return self.may_contain_many(hash_keys(data, offs)).tolist()  # type: ignore[no-any-return]

    def may_contain_many(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        out = np.ones(len(hashes), dtype=np.bool_)
        if self._m == 0:
            return ~out
        m = np.uint64(self._m)
        bits = np.frombuffer(self._bits, dtype=np.uint8)
        h = (hashes & np.uint64(0xFFFFFFFF)) % m
        d = (hashes >> np.uint64(32)) % m
        for i in range(self._k):
            d = (d + np.uint64(i)) % m
            out &= ((bits[h >> np.uint64(3)] >> (h & np.uint64(7)).astype(np.uint8)) & 1) == 1
            h = (h + d) % m
        return out
