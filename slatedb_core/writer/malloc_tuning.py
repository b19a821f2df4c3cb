"""The opt-in glibc allocator setting of a writer process (``DbOptions.glibc_malloc_threshold_bytes``).

glibc's ``malloc`` keeps memory that was freed resident: a block freed inside a heap stays
mapped, a heap's free top is returned only past the trim threshold, and both thresholds are
*dynamic*: after the first large block is freed, blocks up to that size (at most 32 MiB) come
from the heaps, and a heap keeps up to twice that free at its top. A writer's encoders and
compactor allocate and free blocks of 1-30 MiB in several threads (one heap each), so at the
peak of a 10M-row ingest 160-250 MiB of glibc's heaps were free but resident
(``bench/results/db_ingest_memory.txt``, issue 42, goal 3).

``mallopt(M_MMAP_THRESHOLD)`` and ``mallopt(M_TRIM_THRESHOLD)`` fix both thresholds (which turns
the dynamic adjustment off): blocks of at least the threshold are mapped and unmapped on their
own, and free heap tops past it are returned. That is the environment's ``MALLOC_MMAP_THRESHOLD_``
/ ``MALLOC_TRIM_THRESHOLD_`` (docs/operations.md, "Memory of a writer process"), settable from the
process itself. It is process-wide (every thread, every library of the host) and costs CPU: a
block mapped fresh faults its pages in again on every use. So it is off unless asked for.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter numbers (``malloc.h``)."""

MIN_THRESHOLD_BYTES = 128 * 1024
MAX_THRESHOLD_BYTES = 32 * 1024 * 1024
"""The range accepted: glibc's default mmap threshold (128 KiB) up to the largest it accepts on
64-bit systems (``HEAP_MAX_SIZE / 2``, 32 MiB)."""

_lock = threading.Lock()
_applied: int | None = None


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``gnu_get_libc_version``), else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no dynamic loader
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def apply_glibc_malloc_threshold(threshold_bytes: int) -> bool:
    """Set this process's glibc mmap and trim thresholds to ``threshold_bytes`` (``mallopt``).

    Returns True when they are set (now or by an earlier call with the same value), False where
    the C library is not glibc (nothing is changed: macOS, musl). A second call with another
    value sets that one: the process has one allocator, the last writer to open decides, and
    the change is logged."""
    global _applied
    with _lock:
        if _applied == threshold_bytes:
            return True
        libc = _glibc()
        if libc is None:
            log.info("glibc_malloc_threshold_bytes ignored: the C library is not glibc")
            return False
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        ok = libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, threshold_bytes) == 1 and ok
        if not ok:  # pragma: no cover - the range is checked by DbOptions
            log.warning("mallopt refused a threshold of %d bytes", threshold_bytes)
            return False
        if _applied is not None:
            log.info(
                "glibc malloc thresholds changed from %d to %d bytes", _applied, threshold_bytes
            )
        _applied = threshold_bytes
        return True
