"""Sorting user rows once and encoding them as SSTs cut at key-range boundaries, for bulk loads
that write SSTs outside a writer (a Spark task per input partition) and attach them later with
:meth:`slatedb_core.writer.db.Db.ingest_ssts`.

:func:`encode_ranges` takes the rows as they arrive (unsorted Arrow batches of ``key`` and a
nullable ``value``, null deleting the key), sorts them by key once (a key sort also groups them by
range, ranges being contiguous), keeps one row per key, cuts them at the split points and encodes
each range's rows as SSTs of about ``target_sst_bytes``. Everything is vectorised; the large
intermediate arrays (keys, values, their sorted copies, each SST's bytes) live on a
:class:`~slatedb_core.sst.scratch.Scratch`, so a process that encodes many partitions maps that memory
once (fresh memory costs page faults that otherwise dominate the encoding). When every key has
one width and every value another (no tombstones), the SSTs come from
:mod:`slatedb_core.sst.fixed_width`, which gathers the values from the input straight into the SST
bytes (no sorted copy of the values).

Duplicate keys: one row per key is kept, which one is unspecified (the sort is not stable).

TTLs (SlateDB RFC 0003): a batch may carry a ``ttl`` column (int64 milliseconds, null for the
database's default), and :func:`encode_ranges` a fixed ``ttl_ms``; each put row then stores
``expire_ts = now + ttl`` and every row ``create_ts = now``, as a SlateDB put with that TTL does
(and ``put_arrow``: one function, :func:`slatedb_core.writer.ttl.timestamp_columns`); the SSTs
carry them (``ROW_SCHEMA``, :mod:`slatedb_core.lsm.row_model`). Tombstones never expire.
Rows with no TTL at all stay on the fast paths above.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from slatedb_core.errors import InvalidArgument
from slatedb_core.lsm.arrow_rows import arrow_entries, split_for_ssts, sst_cuts
from slatedb_core.lsm.entries import ENTRY_SCHEMA, binary_buffers, sortable_keys
from slatedb_core.lsm.iterators import search_sorted
from slatedb_core.lsm.row_model import ROW_SCHEMA, now_ms
from slatedb_core.manifest.model import SstInfo
from slatedb_core.options import DbOptions
from slatedb_core.sst.builder import SstOptions, encode_sst_into
from slatedb_core.sst.fixed_width import encode_fixed_sst_into
from slatedb_core.sst.format import CODECS
from slatedb_core.sst.scratch import Scratch
from slatedb_core.writer.ttl import NoExpiry, Ttl, check_ttl, is_plain, timestamp_columns


@dataclass(frozen=True)
class RangeSst:
    """One encoded SST of range ``range_index``; ``data`` is valid until the next one is made."""

    range_index: int
    part: int
    """Position among the range's SSTs of this call (they are disjoint and ascending)."""
    data: memoryview
    info: SstInfo


def _uniform_width(chunks: Sequence[pa.Array]) -> int | None:
    """The one width of every value of these binary chunks (no nulls), if there is one."""
    width: int | None = None
    for c in chunks:
        if c.null_count:
            return None
        offs, _ = binary_buffers(c)
        if len(offs) < 2:
            continue
        w = int(offs[1] - offs[0])
        if w <= 0 or (width is not None and w != width):
            return None
        if int(offs[-1] - offs[0]) != w * (len(offs) - 1) or not bool(np.all(np.diff(offs) == w)):
            return None
        width = w
    return width


def _flatten(
    chunks: Sequence[pa.Array], width: int, n: int, scratch: Scratch, name: str
) -> npt.NDArray[np.uint8]:
    """The data of fixed-width binary ``chunks``, concatenated on scratch."""
    flat = scratch.take(name, n * width)
    row = 0
    for c in chunks:
        offs, data = binary_buffers(c)
        m = len(offs) - 1
        flat[row * width : (row + m) * width] = data[int(offs[0]) : int(offs[-1])]
        row += m
    return flat


def _take_fixed(
    flat: npt.NDArray[np.uint8],
    width: int,
    order: npt.NDArray[np.intp],
    scratch: Scratch,
    name: str,
) -> pa.Array:
    """Rows ``order`` of the fixed-width values ``flat`` as a binary array on scratch."""
    out = scratch.take(f"{name}.sorted", len(order) * width)
    np.take(flat.view(f"S{width}"), order, out=out.view(f"S{width}"))
    offsets = scratch.take_as(f"{name}.offs", np.int32, len(order) + 1)
    np.multiply(np.arange(len(order) + 1, dtype=np.int32), width, out=offsets)
    return pa.Array.from_buffers(
        pa.binary(), len(order), [None, pa.py_buffer(offsets), pa.py_buffer(out)]
    )


def packed_order(
    flat: npt.NDArray[np.uint8], width: int, n: int, scratch: Scratch
) -> npt.NDArray[np.int64] | None:
    """The sorting permutation of fixed-width keys of at least 8 bytes from ONE ``np.sort`` of
    uint64 words packing each key's leading bits above its row number (a plain sort is about
    twice as fast as an argsort, and works in place on scratch). Rows whose packed prefixes tie
    are put in key order afterwards, run by run; None when that would be most of them (keys
    sharing long prefixes), for the caller to sort the keys themselves."""
    bits = max(1, int(n - 1).bit_length())
    words = scratch.take_as("sort.words", np.uint64, n)
    # the leading 8 bytes of each key, read big-endian: integer order is byte order
    words.view(np.uint8).reshape(n, 8)[:] = flat.reshape(n, width)[:, :8]
    words.byteswap(inplace=True)
    words >>= np.uint64(bits)
    words <<= np.uint64(bits)
    words |= scratch.arange(n)
    words.sort()
    order = scratch.take_as("sort.order", np.int64, n)
    np.bitwise_and(words, np.uint64((1 << bits) - 1), out=order.view(np.uint64))
    if n < 2:
        return order
    gaps = scratch.take_as("sort.gaps", np.uint64, n - 1)
    np.bitwise_xor(words[1:], words[:-1], out=gaps)
    ties = np.flatnonzero(gaps < np.uint64(1 << bits))  # prefix equal to the next row's
    if not len(ties):
        return order
    if len(ties) > n // 64:
        return None
    keys = flat.view(f"S{width}")
    # runs of consecutive tied positions: run [s, e] covers rows s..e+1
    breaks = np.flatnonzero(np.diff(ties) != 1)
    starts = np.concatenate(([ties[0]], ties[breaks + 1]))
    ends = np.concatenate((ties[breaks], [ties[-1]])) + 2
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        rows = order[s:e]
        order[s:e] = rows[np.argsort(keys[rows], kind="stable")]
    return order


def _sort_order(
    key_chunks: Sequence[pa.Array],
    flat: npt.NDArray[np.uint8] | None,
    width: int | None,
    scratch: Scratch,
) -> tuple[npt.NDArray[np.intp], np.ndarray | None]:
    """A permutation sorting the keys, and (not for ``flat`` keys, whose sorted copy the caller
    gathers itself) the sorted keys as an ``S`` array; None where only Arrow can compare them.
    ``flat``: the keys concatenated, when they all have one ``width``."""
    if flat is not None and width is not None:
        n = len(flat) // width
        if width >= 8 and n < 1 << 40:
            order = packed_order(flat, width, n, scratch)
            if order is not None:
                return order, None
        return np.argsort(flat.view(f"S{width}")), None
    padded = sortable_keys(key_chunks)
    if padded is not None:
        order = np.argsort(padded)
        return order, padded[order]
    keys = pa.concat_arrays(list(key_chunks)) if len(key_chunks) != 1 else key_chunks[0]
    return pc.sort_indices(keys).to_numpy(), None


TTL_COLUMN = "ttl"
"""The optional column of :func:`encode_ranges`'s input: each row's TTL in ms (null: the
default)."""


def encode_ranges(
    batches: Sequence[pa.RecordBatch],
    split_points: Sequence[bytes],
    *,
    seq: int = 0,
    options: DbOptions | None = None,
    scratch: Scratch | None = None,
    ttl_ms: Ttl = None,
    now: int | None = None,
) -> Iterator[RangeSst]:
    """Sort ``batches`` (``key`` binary, ``value`` binary, null = delete, and optionally
    :data:`TTL_COLUMN`) and encode them as SSTs per key range: range i holds keys in
    ``[split_points[i-1], split_points[i])``. Every entry gets sequence number ``seq``. SSTs are
    about ``options.l0_sst_size_bytes`` each.

    TTL (module doc): a row's TTL is its ``ttl`` value, else ``ttl_ms``, else
    ``options.default_ttl``; its ``expire_ts`` is ``now`` (default: :func:`now_ms` at the call)
    plus that TTL.

    Raises InvalidArgument (before anything is yielded) for null or empty keys, keys or values
    over the limits of ``options``, bad TTLs, or split points that are not strictly ascending.
    """
    opts = options or DbOptions()
    fixed = check_ttl("ttl", ttl_ms)
    sopts = SstOptions(opts.block_size, opts.bloom_bits_per_key, opts.compression)
    scratch = scratch or Scratch()
    splits = list(split_points)
    if any(not s for s in splits) or any(a >= b for a, b in itertools.pairwise(splits)):
        raise InvalidArgument("split points must be non-empty and strictly ascending")
    full = [b for b in batches if b.num_rows]
    entries = [arrow_entries(b, "key", "value", opts) for b in full]
    if not entries:
        return
    stamps = _timestamps(full, entries, fixed, opts.default_ttl, now)
    key_chunks = [e.column(0) for e in entries]
    n = sum(len(c) for c in key_chunks)
    width = _uniform_width(key_chunks)
    kflat = _flatten(key_chunks, width, n, scratch, "keys") if width is not None else None
    order, skeys = _sort_order(key_chunks, kflat, width, scratch)
    if kflat is not None and width is not None:
        keys_sorted = _take_fixed(kflat, width, order, scratch, "keys")
        skeys = np.frombuffer(keys_sorted.buffers()[2], dtype=f"S{width}", count=n)
    else:
        keys_sorted = pa.chunked_array(key_chunks).take(pa.array(order)).combine_chunks()
    # one row per key: the last of each run of equal keys
    if skeys is not None:
        dup = skeys[1:] == skeys[:-1]
    else:
        dup = pc.equal(keys_sorted.slice(1), keys_sorted.slice(0, n - 1)).to_numpy(
            zero_copy_only=False
        )
    if bool(np.any(dup)):
        keep = np.flatnonzero(np.append(~dup, True))
        order = order[keep]
        keys_sorted = keys_sorted.take(pa.array(keep))
    m = len(order)
    value_chunks = [e.column(3) for e in entries]
    vwidth = _uniform_width(value_chunks)
    if (
        stamps is None
        and width is not None
        and vwidth is not None
        and CODECS[sopts.compression][1] is None
    ):
        # one key width, one value width (so no tombstones: theirs are empty): the values go
        # from the input straight into the SSTs
        _, kdata = binary_buffers(keys_sorted)
        yield from _encode_fixed(
            kdata,
            width,
            _flatten(value_chunks, vwidth, n, scratch, "values"),
            vwidth,
            order,
            _range_cuts(keys_sorted, splits),
            seq,
            opts,
            sopts,
            scratch,
        )
        return
    values_sorted = (
        _take_fixed(
            _flatten(value_chunks, vwidth, n, scratch, "values"), vwidth, order, scratch, "values"
        )
        if vwidth is not None
        else pa.chunked_array(value_chunks).take(pa.array(order)).combine_chunks()
    )
    kinds = np.concatenate([e.column(2).to_numpy(zero_copy_only=False) for e in entries])[order]
    seqs = scratch.take_as("seqs", np.uint64, m)
    seqs.fill(seq)
    columns = [keys_sorted, pa.array(seqs), pa.array(kinds), values_sorted]
    if stamps is None:
        rows = pa.RecordBatch.from_arrays(columns, schema=ENTRY_SCHEMA)
    else:
        taken = pa.array(order)
        columns += [c.take(taken).combine_chunks() for c in stamps]
        rows = pa.RecordBatch.from_arrays(columns, schema=ROW_SCHEMA)
    cuts = _range_cuts(keys_sorted, splits)
    for index, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        if hi <= lo:
            continue
        for part, piece in enumerate(
            split_for_ssts(rows.slice(lo, hi - lo), opts.l0_sst_size_bytes)
        ):
            data, info = encode_sst_into(piece, scratch, sopts)
            yield RangeSst(index, part, data, info)


def _timestamps(
    batches: Sequence[pa.RecordBatch],
    entries: Sequence[pa.RecordBatch],
    ttl: int | NoExpiry | None,
    default_ttl: int | None,
    now: int | None,
) -> tuple[pa.ChunkedArray, pa.ChunkedArray] | None:
    """``expire_ts`` and ``create_ts`` of every row of ``entries`` (one chunk per batch), as
    ``put_arrow`` stamps them (:func:`~slatedb_core.writer.ttl.timestamp_columns`: a row's
    :data:`TTL_COLUMN` value, else ``ttl``, else the default; deletes never expire); None when
    no row has a TTL (the fast path, nothing allocated)."""
    column = any(TTL_COLUMN in b.schema.names for b in batches)
    if not column and is_plain(ttl, default_ttl):
        return None
    at = now_ms() if now is None else now
    expire: list[pa.Array] = []
    create: list[pa.Array] = []
    for b, e in zip(batches, entries, strict=True):
        name = TTL_COLUMN if TTL_COLUMN in b.schema.names else None
        ex, cr = timestamp_columns(b, e.column(2), name, ttl, default_ttl, at)
        expire.append(ex)
        create.append(cr)
    return pa.chunked_array(expire, pa.int64()), pa.chunked_array(create, pa.int64())


def _range_cuts(keys_sorted: pa.Array, splits: Sequence[bytes]) -> list[int]:
    """Where each key range starts in ``keys_sorted``, and its end."""
    return [0, *(search_sorted(keys_sorted, s, "left") for s in splits), len(keys_sorted)]


def _encode_fixed(
    keys: npt.NDArray[np.uint8],
    width: int,
    values: npt.NDArray[np.uint8],
    vwidth: int,
    order: npt.NDArray[np.intp],
    cuts: Sequence[int],
    seq: int,
    opts: DbOptions,
    sopts: SstOptions,
    scratch: Scratch,
) -> Iterator[RangeSst]:
    """:func:`encode_ranges`'s SSTs for sorted unique keys of one ``width`` (``keys``; entry i's
    value is row ``order[i]`` of ``values``, ``vwidth`` bytes each)."""
    rows = np.asarray(order, dtype=np.int64)
    for index, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        if hi <= lo:
            continue
        start = lo
        sizes = np.full(hi - lo, width + vwidth, dtype=np.int64)
        for part, end in enumerate(c + lo for c in sst_cuts(sizes, opts.l0_sst_size_bytes)):
            data, info = encode_fixed_sst_into(
                keys[start * width : end * width],
                width,
                values,
                vwidth,
                rows[start:end],
                seq,
                scratch,
                sopts,
            )
            yield RangeSst(index, part, data, info)
            start = end
