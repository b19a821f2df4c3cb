"""Manifest bytes <-> :class:`~slatedb_core.manifest.model.Manifest`, for ManifestV1 and ManifestV2.

Stored manifests are a FlatBuffers payload (``schema/manifest.fbs``) inside the checksummed envelope
of :mod:`slatedb_core.meta.envelope`, whose version field says which root table the payload holds.

Why this module writes and reads FlatBuffers itself instead of calling the flatc output (kept
in ``tests/manifest/generated/``): that code is correct with the pinned runtime but costs ~25 us
per SST per direction (measured: 2.5 s to encode and 3.6 s to decode only the SST table of a
100k-SST manifest), and a manifest is rewritten on every flush and compaction. The small writer
and reader it uses implement
just the parts of the format the schema uses (tables with shared vtables, vectors of offsets,
structs and bytes, strings), driven by a per-table list of field kinds that mirrors the schema's
field order. ``tests/manifest/test_codec.py`` checks both directions against the generated bindings,
which stay the reference for the layout.

The reader bounds-checks every offset itself: the Python runtime has no verifier, and Python's
negative indexing would silently wrap a bad offset. Any malformed payload therefore surfaces as
``CorruptionError`` naming the object, never as a raw ``IndexError`` or ``struct.error``.

The code lives in three modules private to this package: ``_fb_layout`` (the tables' field
kinds), ``_fb_writer`` and ``_fb_reader``; this module is their public face.
"""

from __future__ import annotations

from slatedb_core.manifest._fb_layout import (
    DEFAULT_FORMAT_VERSION,
    MANIFEST_MAGIC,
    SUPPORTED_VERSIONS,
)
from slatedb_core.manifest._fb_reader import decode_manifest, decode_sealed_manifest
from slatedb_core.manifest._fb_writer import encode_manifest

__all__ = [
    "DEFAULT_FORMAT_VERSION",
    "MANIFEST_MAGIC",
    "SUPPORTED_VERSIONS",
    "decode_manifest",
    "decode_sealed_manifest",
    "encode_manifest",
]
