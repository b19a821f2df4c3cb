"""Manifest bytes <-> :class:`~slatedb_core.manifest.model.Manifest`, in SlateDB 0.17's format
(docs/format.md, "Manifest").

Decoding dispatches on the object's u16 format version, as SlateDB 0.17 does: 2 is ManifestV2
(below), 1 is ManifestV1, the layout earlier SlateDB releases wrote (:mod:`.v1`,
docs/format.md "ManifestV1"), any other is corrupt. Encoding always writes 2, so a commit built
on a V1 manifest leaves a V2 one.

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
A store commits through a :class:`~slatedb_core.manifest._encode.ManifestEncoder`, which keeps
the bytes of the SSTs, sorted runs and checkpoints a commit did not change (issue 42; our table's
slot 12 says how many bytes those are, so a manifest just read is reused the same way).
"""

from __future__ import annotations

import struct

from slatedb_core.errors import CorruptionError
from slatedb_core.manifest import _decode
from slatedb_core.manifest._decode import Stamp
from slatedb_core.manifest._encode import (
    DESTROYED_CHECKPOINT_ID,
    DESTROYED_CHECKPOINT_NAME,
    FORMAT_VERSION,
    NONCE_SIZE,
    encode_manifest,
)
from slatedb_core.manifest.flatbuf import Malformed
from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.v1 import V1_FORMAT_VERSION, decode_v1

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


def decode_stamped_manifest(data: bytes, *, name: str) -> tuple[Manifest, Stamp]:
    """The manifest in ``data`` and its :class:`Stamp`; ``name`` (usually the object path) goes
    into every ``CorruptionError``. A segmented manifest raises ``UnsupportedFeature``."""
    if len(data) >= 2 and struct.unpack_from(">H", data, 0)[0] == V1_FORMAT_VERSION:
        try:
            with _decode._gc_paused():
                return decode_v1(bytes(data), name)
        except (Malformed, struct.error, ValueError, TypeError, OverflowError, IndexError) as e:
            raise CorruptionError(name, f"malformed ManifestV1 (format version 1): {e}") from e
    return _decode.decode_stamped_manifest(data, name=name)


def decode_manifest(data: bytes, *, name: str) -> Manifest:
    """:func:`decode_stamped_manifest` without the stamp."""
    return decode_stamped_manifest(data, name=name)[0]
