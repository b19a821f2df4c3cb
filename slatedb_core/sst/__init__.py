"""Sorted string tables in SlateDB 0.17's SST format: the immutable, sorted files the LSM tree
is made of, and the WAL's SSTs.

The byte layout is documented in :mod:`slatedb_core.sst.format` (and docs/format.md). Rows travel
in and out as Arrow record batches with :data:`ENTRY_SCHEMA`, so the engine never touches rows
one at a time.
"""

from __future__ import annotations

from slatedb_core.sst.builder import SstOptions, encode_sst
from slatedb_core.sst.cache import BlockCache, CacheStats
from slatedb_core.sst.format import (
    CODECS,
    ENTRY_SCHEMA,
    FORMAT_VERSION,
    KIND_MERGE,
    KIND_TOMBSTONE,
    KIND_VALUE,
)
from slatedb_core.sst.reader import SstReader, probe_blooms_first

__all__ = [
    "CODECS",
    "ENTRY_SCHEMA",
    "FORMAT_VERSION",
    "KIND_MERGE",
    "KIND_TOMBSTONE",
    "KIND_VALUE",
    "BlockCache",
    "CacheStats",
    "SstOptions",
    "SstReader",
    "encode_sst",
    "probe_blooms_first",
]
