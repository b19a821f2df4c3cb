"""A compaction's output SSTs: the merged stream cut into SSTs, each encoded as its rows arrive and
written before the next one is started.

Memory, whatever the size of the compaction: the merge's batches (a few per source), the rows of
one unfinished block, and one part (:data:`PART_BYTES`) of the SST being built: each SST is
streamed to the store in parts as its blocks are encoded (:meth:`ObjectStore.create_streamed
<slatedb_core.store.objectstore.ObjectStore.create_streamed>`: a staged file written part by
part on a local disk, a multipart upload on S3), as SlateDB 0.17 streams its compacted SSTs
(its ``tablestore.rs`` writes them through a buffered multipart writer; WAL SSTs keep one
conditional PUT, and so do our L0 flushes). Nothing holds the merged rows of a whole SST, let
alone of a whole run, nor (where the store streams) an SST's bytes (issue 42, goal 3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.lsm.iterators import key_reader, search_sorted
from slatedb_core.manifest.model import CompactedSst, SstInfo
from slatedb_core.sst import SstOptions
from slatedb_core.sst.builder import SstStreamEncoder

ROW_OVERHEAD = 17  # per-entry bytes of an SST block besides key and value (see sst.format)

PART_BYTES = 8 << 20
"""The encoded bytes handed to the store at a time (S3's multipart parts must be >= 5 MiB)."""

_MIN_SLICE_ROWS = 1024
"""The fewest rows :meth:`SstParts._add` encodes at once (each add has a fixed cost)."""


class SstParts:
    """One output SST's bytes, encoded while they are iterated: the parts (each of at least
    :data:`PART_BYTES` but the last few) are produced as the merged rows arrive, and each is
    dropped by the encoder once handed out. Iterate once; :attr:`info` and :attr:`rows` are
    known when the iteration has ended."""

    def __init__(
        self,
        options: SstOptions,
        first: pa.RecordBatch,
        ends: bool,
        pieces: Iterator[tuple[pa.RecordBatch, bool]],
        part_bytes: int = PART_BYTES,
    ) -> None:
        self._options = options
        self._first: pa.RecordBatch | None = first
        self._ends = ends
        self._pieces = pieces
        self._part_bytes = part_bytes
        self._info: SstInfo | None = None
        self.rows = 0

    @property
    def info(self) -> SstInfo:
        """The SST's info, once every part has been iterated."""
        if self._info is None:
            raise RuntimeError("SstParts.info read before the SST's last part was taken")
        return self._info

    def __iter__(self) -> Iterator[bytearray | bytes | memoryview]:
        first, self._first = self._first, None
        if first is None:
            raise RuntimeError("an SST's parts can be iterated once")
        enc = SstStreamEncoder(self._options)
        yield from self._add(enc, first)
        del first  # the encoder copied what it keeps
        if not self._ends:
            for piece, ends_sst in self._pieces:
                yield from self._add(enc, piece)
                del piece
                if ends_sst:
                    break
        self.rows = enc.rows
        rest, info = enc.finish_parts()
        del enc
        while rest:
            yield rest.pop(0)
        self._info = info

    def _add(self, enc: SstStreamEncoder, piece: pa.RecordBatch) -> Iterator[memoryview]:
        """Encode ``piece`` in slices of about a part's bytes, handing out each part as soon as
        it is due: a merge round can yield tens of MiB of rows at once, whose encoded bytes
        would otherwise be held twice (the rows encoded, then appended) before the first part
        is taken. The slices only cut where :meth:`SstStreamEncoder.add` is called, which
        does not change the SST's bytes."""
        n = piece.num_rows
        if not n:
            return
        step = max(_MIN_SLICE_ROWS, n * self._part_bytes // max(1, piece.nbytes))
        for at in range(0, n, step):
            enc.add(piece.slice(at, step) if step < n else piece)
            part = enc.take_part(self._part_bytes)
            if part is not None:
                yield part
                del part
                release_freed_arrow_memory()


def release_freed_arrow_memory() -> None:
    """Return the memory freed in Arrow's allocator to the system now, whichever thread freed it.

    Arrow's default allocator (mimalloc) keeps freed pages resident for a while (a purge delay
    of 1 s in pyarrow 26's mimalloc 3.4) and purges them only as allocations go on; with the
    writer's memtable flushes, the WAL and a compaction each freeing tens of MiB a second, that
    held ~130 MiB more than Arrow had allocated at the peak of a 10M-row ingest. A forced
    collect from a thread that allocates through Arrow purges every arena's pending pages (not
    only its own thread's), in well under a millisecond; the encoders call it after each part
    they hand out (issue 42, goal 3). Nothing else changes: no allocator setting of the host
    process is touched."""
    pa.default_memory_pool().release_unused()


WriteSst = Callable[[SstParts], CompactedSst]
"""Creates one output SST from its parts (announcing its id before it takes the first part),
and returns it once every part has been written."""


def row_sizes(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    keys = pc.binary_length(batch.column(0)).fill_null(0).to_numpy(zero_copy_only=False)
    values = pc.binary_length(batch.column(3)).fill_null(0).to_numpy(zero_copy_only=False)
    sizes: npt.NDArray[np.int64] = keys.astype(np.int64) + values.astype(np.int64)
    return sizes + ROW_OVERHEAD


def split_stream(
    batches: Iterable[pa.RecordBatch], target: int
) -> Iterator[tuple[pa.RecordBatch, bool]]:
    """A key-sorted stream as pieces (zero-copy slices of its batches), each with whether it
    ends an output SST of about ``target`` bytes of entries.

    An SST is ended by the row that reaches ``target``, or by the last version of that row's key
    (the versions of a key stay in one SST: a sorted run's SSTs do not overlap), so every SST but
    the last holds at least ``target`` bytes; the last SST ends with the stream. A piece may be
    empty (it only ends the SST: the key ran to the end of the previous batch).
    """
    acc = 0
    pending: bytes | None = None  # the SST ends after this key's last version
    for b in batches:
        n = b.num_rows
        if n == 0:
            continue
        start = 0
        if pending is not None:
            end = search_sorted(b.column(0), pending, "right")
            pending = None
            if end >= n:  # the key goes on: still no cut
                pending = key_reader(b.column(0))(n - 1)
                yield b, False
                continue
            yield b.slice(0, end), True
            acc, start = 0, end
        cum = np.cumsum(row_sizes(b))
        key_at = key_reader(b.column(0))
        while start < n:
            base = int(cum[start - 1]) if start else 0
            end = int(np.searchsorted(cum, base + target - acc, side="left")) + 1
            if end > n:
                yield (b.slice(start) if start else b), False
                acc += int(cum[-1]) - base
                break
            if end == n or key_at(end) == key_at(end - 1):  # not inside a key's versions
                end = n if end == n else search_sorted(b.column(0), key_at(end - 1), "right")
                if end >= n:  # the next batch may go on with this key: it decides the cut
                    pending = key_at(n - 1)
                    yield (b.slice(start) if start else b), False
                    break
            yield b.slice(start, end - start), True
            acc, start = 0, end
    # a pending cut at the very end needs no piece: the last SST ends with the stream


def write_ssts(
    batches: Iterable[pa.RecordBatch], target: int, options: SstOptions, write: WriteSst
) -> tuple[list[CompactedSst], int]:
    """Encode a key-sorted stream into SSTs of about ``target`` bytes of entries, streaming:
    each SST is written (``write``, which takes its :class:`SstParts` as they are encoded) and
    dropped before the next is started. Returns the written SSTs in key order and the rows they
    hold."""
    outputs: list[CompactedSst] = []
    rows = 0
    pieces = split_stream(batches, target)
    for piece, ends_sst in pieces:
        if not piece.num_rows:
            continue  # an empty piece only ends an SST, and none is started
        parts = SstParts(options, piece, ends_sst, pieces)
        del piece
        try:
            out = write(parts)
            _ = parts.info  # raises unless ``write`` took every part
            outputs.append(out)
            rows += parts.rows
        finally:
            del parts
            # Arrow's allocator (mimalloc) keeps pages the merge and the encoder freed resident
            # for reuse; an SST's worth of them is handed back here (measured: ~80 MiB less
            # peak RSS over a 10M-row ingest, bench/results/memory.txt)
            release_freed_arrow_memory()
    return outputs, rows
