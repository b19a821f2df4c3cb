"""A compaction's output SSTs: the merged stream cut into SSTs, each encoded as its rows arrive and
written before the next one is started.

Memory, whatever the size of the compaction: the merge's batches (a few per source), the rows of
one unfinished block, and the encoded bytes of the one SST being built (about
``max_sst_size_bytes``: an object is created with one request, so its bytes are held until
then). Nothing holds the merged rows of a whole SST, let alone of a whole run.
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

WriteSst = Callable[[memoryview, SstInfo], CompactedSst]
"""Creates one output SST from its bytes (announcing its id first) and returns it; the bytes are
a view of a buffer that is dropped once this returns."""


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
    each SST is written (``write``) as soon as its last row is encoded, and dropped before the
    next is started. Returns the written SSTs in key order and the rows they hold."""
    outputs: list[CompactedSst] = []
    rows = 0
    enc = SstStreamEncoder(options)
    for piece, ends_sst in split_stream(batches, target):
        if piece.num_rows:
            enc.add(piece)
        del piece  # the encoder copied what it keeps
        if ends_sst and enc.rows:
            rows += enc.rows
            outputs.append(_write(enc, write))
            enc = SstStreamEncoder(options)
    if enc.rows:
        rows += enc.rows
        outputs.append(_write(enc, write))
    return outputs, rows


def _write(enc: SstStreamEncoder, write: WriteSst) -> CompactedSst:
    data, info = enc.finish()
    try:
        return write(data, info)
    finally:
        del data
        # Arrow's allocator (mimalloc) keeps pages the merge and the encoder freed resident for
        # reuse; an SST's worth of them is handed back here (measured: ~80 MiB less peak RSS
        # over a 10M-row ingest, bench/results/memory.txt)
        pa.default_memory_pool().release_unused()
