"""SlateDB 0.17's ``SsTableInfo`` FlatBuffers table <-> :class:`SstInfo` (docs/format.md).

The one codec of the table: an SST's footer holds it as a standalone root (no file identifier,
no checksum: the SST format adds its CRC around it), the manifest holds one per SST inside
``CompactedSsTableV2.info`` and ``.compactions`` one per output SST inside
``CompactedSsTable.info``; all go through :func:`write_sst_info` and :func:`read_sst_info`, which
write and read the table inside any buffer of :mod:`slatedb_core.manifest.flatbuf`.

Slots 0-10 are SlateDB 0.17's (``schemas/sst.fbs``): first_entry, index_offset, index_len,
filter_offset, filter_len, compression_format, sst_type, last_entry, stats_offset, stats_len,
filter_format. Ours, which SlateDB ignores, start at slot 16: entry_count and size_bytes, written
only when known (non-zero).
"""

from __future__ import annotations

import struct

from slatedb_core.errors import CorruptionError, InvalidArgument
from slatedb_core.manifest.flatbuf import FbReader, FbWriter, Malformed
from slatedb_core.manifest.model import SstInfo
from slatedb_core.manifest.tables import INFO, INFO_OURS

_GAP = (None,) * (INFO_OURS - 11)


def write_sst_info(w: FbWriter, info: SstInfo) -> int:
    """Write ``info`` as an SsTableInfo table; its position for the parent's offset field."""
    first = None if info.first_key is None else w.blob(info.first_key)
    last = None if info.last_key is None else w.blob(info.last_key)
    return w.table(
        INFO,
        (
            first,
            info.index_offset,
            info.index_len,
            info.filter_offset,
            info.filter_len,
            info.compression,
            info.sst_type,
            last,
            info.stats_offset,
            info.stats_len,
            info.filter_format,
            *_GAP,
            info.entry_count or None,
            info.size_bytes or None,
        ),
    )


def read_sst_info(r: FbReader, pos: int) -> SstInfo:
    """The SsTableInfo table at ``pos``; absent fields read as SlateDB's defaults (0)."""
    (first, io, il, fo, fl, compression, sst_type, last, so, sl, ff, *rest) = r.table(INFO, pos)
    entries, size = rest[-2:]
    return SstInfo(
        None if first is None else r.blob(first),
        None if last is None else r.blob(last),
        io,
        il,
        fo,
        fl,
        compression,
        entries or 0,
        size or 0,
        sst_type,
        so,
        sl,
        ff,
    )


def encode_sst_info(info: SstInfo) -> bytes:
    """``info`` as a standalone SsTableInfo root, as an SST footer stores it."""
    w = FbWriter()
    try:
        return w.finish(write_sst_info(w, info))
    except (struct.error, OverflowError) as e:
        raise InvalidArgument(f"SST info has a value that does not fit its field: {e}") from e


def decode_sst_info(buf: bytes | memoryview, name: str) -> SstInfo:
    """A standalone SsTableInfo root (an SST footer's); ``CorruptionError`` naming ``name`` if
    the bytes are not one."""
    r = FbReader(buf)
    try:
        return read_sst_info(r, r.root())
    except (Malformed, struct.error, ValueError, TypeError, OverflowError, IndexError) as e:
        raise CorruptionError(name, f"malformed SsTableInfo: {e}") from e
