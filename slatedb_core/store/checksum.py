"""The one CRC-32 every object of the store is checked with (the zlib polynomial, as
``zlib.crc32``: the same values, so the formats are unchanged).

Why not ``zlib.crc32`` itself: CPython's zlib computes about 4 GB/s on cached data here and less
on SSTs being written (every block of every SST is checksummed on write and again on read).
ISA-L's ``crc32`` (python-isal) uses carry-less multiplication and measured about 50 GB/s on
the same machine, which takes checksumming off the profile of bulk encoding and scans. Where
no isal wheel exists, zlib's is used.
"""

from __future__ import annotations

from collections.abc import Callable

try:
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - every platform we ship to has isal wheels
    from zlib import crc32 as _crc32

crc32: Callable[..., int] = _crc32
"""``crc32(data, value=0)``: CRC-32 of ``data`` (any buffer), continuing from ``value``."""
