"""A bloom filter over an SST's keys, built for a whole batch in numpy.

Why this hash: keys have variable length, so a per-key hash in Python would cost ~1 µs per key and
dominate an SST build. Instead each key is read as little-endian u64 words (the last one zero-padded)
and hashed as the polynomial ``sum(word[t] * P**t) + len * C mod 2**64``: a dot product with a power
table, which numpy evaluates for a whole batch at once (a reshape when all keys have one length, a
scatter into padded words plus ``np.add.reduceat`` otherwise). The length term keeps keys that
differ only in trailing zero bytes apart. The sum is finalised with the SplitMix64 mixer twice (with
different inputs) into two 64-bit hashes, and probe ``i`` is ``h1 + i * h2`` (Kirsch-Mitzenmacher
double hashing), mapped onto ``m`` bits with a multiply-shift instead of a modulo. The single-key
path computes exactly the same arithmetic with Python ints (a couple of words for typical keys).

Filter section layout (little-endian)::

    u8 hash_version = 1, u8 k (probes), u16 reserved = 0, u32 m (bits)
    ceil(m / 8) bytes of bits; bit p is (byte[p >> 3] >> (p & 7)) & 1
    u32 crc32 of everything above
"""

from __future__ import annotations

import math
import struct
import threading

import numpy as np
import numpy.typing as npt

from slatedb_core.errors import CorruptionError
from slatedb_core.store.checksum import crc32

HASH_VERSION = 1
HEADER = struct.Struct("<BBHI")
_MASK = (1 << 64) - 1
_P = 0x9E3779B97F4A7C15
_LEN_MULT = 0xC2B2AE3D27D4EB4F
_H2_SALT = 0x165667B19E3779F9
_MAX_BITS = (1 << 32) - 64
_CHUNK_BYTES = 1 << 16  # key bytes hashed per numpy pass: keeps temporaries in cache
_SHORT_KEY = 64  # longer single keys are hashed with numpy rather than a Python loop

_pow_lock = threading.Lock()
_pow: npt.NDArray[np.uint64] = np.ones(1, dtype=np.uint64)


def _powers(n: int) -> npt.NDArray[np.uint64]:
    """P**j mod 2**64 for j < n, grown on demand and shared (keys can be up to 64 KiB or more)."""
    global _pow
    table = _pow
    if len(table) >= n:
        return table
    with _pow_lock:
        if len(_pow) < n:
            size = max(n, 2 * len(_pow), 1024)
            grown = np.empty(size, dtype=np.uint64)
            grown[0] = 1
            np.cumprod(np.full(size - 1, _P, dtype=np.uint64), out=grown[1:])
            _pow = grown
        return _pow


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _poly(data: npt.NDArray[np.uint8], offs: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Word-polynomial hash of each key ``data[offs[i]:offs[i+1]]``."""
    n = len(offs) - 1
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    lens = np.diff(offs)
    width = int(lens[0])
    if int(lens.min()) == int(lens.max()) and width > 0:
        out = _poly_fixed(data[int(offs[0]) : int(offs[n])], n, width)
    else:
        out = _poly_general(data, offs, lens)
    out += lens.astype(np.uint64) * np.uint64(_LEN_MULT)
    return out


def _poly_fixed(data: npt.NDArray[np.uint8], n: int, width: int) -> npt.NDArray[np.uint64]:
    """All keys ``width`` bytes long: pad each row to whole words, then one column op per word."""
    words = (width + 7) >> 3
    rows = data.reshape(n, width)
    if width != 8 * words:
        padded = np.zeros((n, 8 * words), dtype=np.uint8)
        padded[:, :width] = rows
        rows = padded
    else:
        rows = np.ascontiguousarray(rows)
    cols = rows.view("<u8")
    pw = _powers(words)
    out = np.zeros(n, dtype=np.uint64)
    for t in range(words):
        out += cols[:, t] * pw[t]
    return out


def _poly_general(
    data: npt.NDArray[np.uint8], offs: npt.NDArray[np.int64], lens: npt.NDArray[np.int64]
) -> npt.NDArray[np.uint64]:
    """Variable lengths: scatter keys into zero-padded words, ~_CHUNK_BYTES of keys per pass."""
    n = len(offs) - 1
    out = np.empty(n, dtype=np.uint64)
    nwords = (lens + 7) >> 3
    pw = _powers(int(nwords.max()))
    i = 0
    while i < n:
        j = int(np.searchsorted(offs, offs[i] + _CHUNK_BYTES, side="right")) - 1
        j = min(max(j, i + 1), n)
        a, b = int(offs[i]), int(offs[j])
        wl = nwords[i:j]
        wstart = np.zeros(j - i, dtype=np.int64)
        np.cumsum(wl[:-1], out=wstart[1:])
        total = int(wstart[-1] + wl[-1])
        padded = np.zeros(8 * total, dtype=np.uint8)
        dest = np.arange(b - a, dtype=np.int64) + np.repeat(8 * wstart - (offs[i:j] - a), lens[i:j])
        padded[dest] = data[a:b]
        words = padded.view("<u8")
        words *= pw[np.arange(total, dtype=np.int64) - np.repeat(wstart, wl)]
        out[i:j] = np.add.reduceat(words, wstart) if total else 0
        i = j
    return out


def hash_keys(data: npt.NDArray[np.uint8], offs: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """The 64-bit key hash of every key in a batch (``offs`` index into ``data``)."""
    return _poly(data, offs)


_WORDS = [struct.Struct(f"<{i}Q") for i in range(_SHORT_KEY // 8 + 1)]


def hash_key(key: bytes) -> int:
    """The same hash as :func:`hash_keys`, for one key, without numpy's per-call overhead."""
    n = len(key)
    if n > _SHORT_KEY:
        arr = np.frombuffer(key, dtype=np.uint8)
        return int(_poly(arr, np.array([0, n], dtype=np.int64))[0])
    full = n >> 3
    h = 0
    pw = 1
    for word in _WORDS[full].unpack_from(key):
        h += word * pw
        pw = (pw * _P) & _MASK
    if n & 7:
        h += int.from_bytes(key[8 * full :], "little") * pw
    return (h + n * _LEN_MULT) & _MASK


def num_probes(bits_per_key: int) -> int:
    return max(1, min(30, round(bits_per_key * math.log(2))))


def build_filter(hashes: npt.NDArray[np.uint64], bits_per_key: int) -> bytes:
    """The encoded filter section for these key hashes; empty when disabled or there are no keys."""
    n = len(hashes)
    if bits_per_key <= 0 or n == 0:
        return b""
    m = min(max(64, n * bits_per_key), _MAX_BITS)
    k = num_probes(bits_per_key)
    h1 = _mix(hashes)
    h2 = _mix(hashes ^ np.uint64(_H2_SALT))
    bits = np.zeros(m, dtype=np.bool_)
    mm = np.uint64(m)
    s32 = np.uint64(32)
    g = h1.copy()
    for _ in range(k):
        bits[((g >> s32) * mm) >> s32] = True
        g += h2
    body = HEADER.pack(HASH_VERSION, k, 0, m) + np.packbits(bits, bitorder="little").tobytes()
    return body + struct.pack("<I", crc32(body))


class BloomFilter:
    """A decoded filter section; :meth:`may_contain` answers for one key."""

    __slots__ = ("_bits", "_k", "_m")

    def __init__(self, name: str, buf: bytes | memoryview) -> None:
        size = len(buf)
        if size < HEADER.size + 4:
            raise CorruptionError(name, f"bloom filter of {size} bytes is too short")
        if crc32(buf[: size - 4]) != struct.unpack_from("<I", buf, size - 4)[0]:
            raise CorruptionError(name, "bloom filter checksum mismatch")
        version, k, reserved, m = HEADER.unpack_from(buf, 0)
        if version != HASH_VERSION or reserved != 0 or not 1 <= k <= 30:
            raise CorruptionError(name, f"unsupported bloom filter (version {version}, k {k})")
        if not 64 <= m <= _MAX_BITS or HEADER.size + (m + 7) // 8 + 4 != size:
            raise CorruptionError(name, f"bloom filter size does not match its {m} bits")
        self._bits = bytes(buf[HEADER.size : size - 4])
        self._k = k
        self._m = m

    def may_contain(self, key: bytes) -> bool:
        return self.may_contain_hash(hash_key(key))

    def may_contain_hash(self, h: int) -> bool:
        # _mix_int twice, inlined: this runs on every point lookup.
        z = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        h1 = z ^ (z >> 31)
        z = h ^ _H2_SALT
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        h2 = z ^ (z >> 31)
        bits, m = self._bits, self._m
        for _ in range(self._k):
            p = ((h1 >> 32) * m) >> 32
            if not (bits[p >> 3] >> (p & 7)) & 1:
                return False
            h1 = (h1 + h2) & _MASK
        return True
