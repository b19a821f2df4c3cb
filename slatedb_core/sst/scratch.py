"""Reusable scratch buffers for hot paths that build large arrays again and again.

Why: on the virtual machines this store runs on, the first touch of freshly mapped memory costs
about 2.5 ms per MB (page faults), several times what copying into memory already mapped costs.
glibc hands every allocation above 32 MiB straight to ``mmap`` and gives it back on free, so a
bulk encoder that allocates its key, value and SST buffers per call pays those faults on every
call. A :class:`Scratch` keeps its buffers mapped between calls (a Spark Python worker runs many
tasks in one process), so only the first call of a process pays them.

Buffers are per thread (:func:`thread_scratch`) and reused: whatever a caller builds on one (a
NumPy view, an Arrow array over it, a ``memoryview``) is valid only until the same name is taken
again on that thread.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

_GROWTH = 1.25


class Scratch:
    """Named byte buffers that grow and are never shrunk (until :meth:`release`)."""

    def __init__(self) -> None:
        self._bufs: dict[str, npt.NDArray[np.uint8]] = {}
        self._arange: npt.NDArray[np.uint64] = np.arange(0, dtype=np.uint64)

    def take(self, name: str, nbytes: int) -> npt.NDArray[np.uint8]:
        """The first ``nbytes`` of buffer ``name`` (contents undefined), grown if needed."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        buf = self._bufs.get(name)
        if buf is None or buf.size < nbytes:
            size = nbytes if buf is None else max(nbytes, int(buf.size * _GROWTH))
            buf = self._bufs[name] = np.empty(max(size, 64), dtype=np.uint8)
        return buf[:nbytes]

    def take_as(self, name: str, dtype: npt.DTypeLike, count: int) -> np.ndarray:
        """``count`` items of ``dtype`` on buffer ``name`` (contents undefined)."""
        dt = np.dtype(dtype)
        return self.take(name, dt.itemsize * count).view(dt)

    def arange(self, n: int) -> npt.NDArray[np.uint64]:
        """``np.arange(n, dtype=uint64)``, kept between calls (read-only: do not write to it)."""
        if self._arange.size < n:
            self._arange = np.arange(max(n, int(self._arange.size * _GROWTH)), dtype=np.uint64)
            self._arange.flags.writeable = False
        return self._arange[:n]

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self._bufs.values()) + self._arange.nbytes

    def release(self) -> None:
        """Drop every buffer (views handed out stay valid: they keep their memory alive)."""
        self._bufs.clear()
        self._arange = np.arange(0, dtype=np.uint64)


_local = threading.local()


def thread_scratch() -> Scratch:
    """This thread's :class:`Scratch`."""
    s: Scratch | None = getattr(_local, "scratch", None)
    if s is None:
        s = _local.scratch = Scratch()
    return s
