"""Fetching an SST's bytes: ranged reads that tell a short object (corruption) from a transient
failure, where the metadata region starts, and whether the manifest's ``SstInfo`` is the
footer's (see :mod:`slatedb_core.sst.reader`)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa  # type: ignore[import-untyped, unused-ignore]

from slatedb_core.errors import CorruptionError, StoreError
from slatedb_core.manifest.model import SstInfo
from slatedb_core.store.objectstore import ObjectStore


def metadata_start(info: SstInfo) -> int:
    """Where the data blocks end: the filter, or without one the index, starts there."""
    return info.filter_offset if info.filter_len else info.index_offset


def get_range(
    store: ObjectStore,
    path: str,
    start: int,
    end: int,
    *,
    known_size: bool = True,
    opening: bool = False,
) -> pa.Buffer:
    """Bytes [start, end) of an object; a short object is corruption, not a transient failure.
    ``opening``: a ranged ``get`` (a local store checks every component of the path) instead
    of ``read_range``, whose held read checks only the file's name (an SST's open: the blocks
    read later come from the file it found, slatedb_core/store/local_root.py)."""
    return pa.py_buffer(
        get_range_bytes(store, path, start, end, known_size=known_size, opening=opening)
    )


def get_range_bytes(
    store: ObjectStore,
    path: str,
    start: int,
    end: int,
    *,
    known_size: bool = True,
    opening: bool = False,
) -> bytes:
    """:func:`get_range` as the store's ``bytes`` (a point lookup keeps and searches them)."""
    try:
        if opening:
            data: bytes = store.get(path, byte_range=(start, end)).data
        else:
            data = store.read_range(path, start, end)
    except StoreError:
        if known_size:
            raise
        size = store.head(
            path
        ).size  # the manifest's size may be past the end of a truncated object
        if size < end:
            raise CorruptionError(path, f"object is {size} bytes, expected {end}") from None
        raise
    if len(data) != end - start:
        raise CorruptionError(path, f"read of [{start}, {end}) returned {len(data)} bytes")
    return data


def info_agrees(listed: SstInfo, footer: SstInfo) -> bool:
    """Whether the manifest's ``listed`` info is the footer's. Our ``entry_count`` and
    ``size_bytes`` count only where the manifest has them: SlateDB drops them when it rewrites a
    manifest (docs/format.md, "Manifest"), leaving 0, unknown."""
    return listed == dataclasses.replace(
        footer,
        entry_count=footer.entry_count if listed.entry_count else 0,
        size_bytes=footer.size_bytes if listed.size_bytes else 0,
    )
