"""Manifest bytes <-> :class:`~slatedb_core.manifest.model.Manifest`, in SlateDB 0.17's format
(docs/format.md, "Manifest").

An object ``manifest/{id:020}.manifest`` is a big-endian u16 format version (2) followed by a
FlatBuffers ``ManifestV2`` root with SlateDB 0.17's field ids and types (its
``schemas/manifest.fbs``, ``schemas/sst.fbs``, ``schemas/common.fbs``). Both engines read and
write it. What this engine keeps and SlateDB lacks lies where SlateDB ignores it:

* one table of ours at ManifestV2 slot 32: ``max_parallel_writes``, ``key_range``, the nonce of
  this write and of the manifest it was built on (settling ambiguous creates,
  :mod:`slatedb_core.manifest.store`), ``next_wal_sst_id`` and a CRC-32 of the whole object
  (computed with the CRC field zeroed);
* ``CompactedSst.original_id`` at CompactedSsTableV2 slot 8, and ``SstInfo``'s
  ``entry_count``/``size_bytes`` at SsTableInfo slots 16-17 (:mod:`.sst_info`);
* ``destroyed_at_s`` as a checkpoint (:data:`DESTROYED_CHECKPOINT_NAME`), which SlateDB keeps
  when it rewrites a manifest, so a destroyed database stays destroyed.

SlateDB drops the rest when it rewrites a manifest; decoding such a manifest yields what SlateDB
means (one write in flight, no key range, ``next_wal_sst_id = wal_id_last_seen + 1``) and a
:class:`Stamp` without nonces.

Why this package writes and reads FlatBuffers itself (:mod:`.flatbuf`, tables described once
in :mod:`.tables`) instead of generated code: the flatc Python output costs ~25 us
per SST per direction, and a manifest is rewritten on every flush and compaction. The reader
bounds-checks every offset, so a malformed object surfaces as ``CorruptionError`` naming it.
"""

from __future__ import annotations

from slatedb_core.manifest._decode import Stamp, decode_manifest, decode_stamped_manifest
from slatedb_core.manifest._encode import (
    DESTROYED_CHECKPOINT_ID,
    DESTROYED_CHECKPOINT_NAME,
    FORMAT_VERSION,
    NONCE_SIZE,
    encode_manifest,
)

__all__ = [
    "DESTROYED_CHECKPOINT_ID",
    "DESTROYED_CHECKPOINT_NAME",
    "FORMAT_VERSION",
    "NONCE_SIZE",
    "Stamp",
    "decode_manifest",
    "decode_stamped_manifest",
    "encode_manifest",
]
