"""Operator functions: what the CLI and the Dagster assets call. No protocol logic lives here;
each function composes the layers below."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore, StoredManifest
from slatedb_core.meta.boundary import U64_MAX
from slatedb_core.options import check_int, check_optional
from slatedb_core.store.objectstore import ObjectStore, check_store, validate_relative_path


@dataclass(frozen=True, slots=True)
class ManifestListing:
    id: int
    path: str
    size: int
    last_modified: datetime


def manifest_store(store: ObjectStore, path: str) -> ManifestStore:
    validate_relative_path(path, what="database path")
    return ManifestStore(check_store(store), path)


def read_manifest(store: ObjectStore, path: str, manifest_id: int | None = None) -> StoredManifest:
    """The latest manifest, or the one with ``manifest_id`` (an int >= 1). Raises
    DatabaseNotFound / ObjectNotFound / CorruptionError."""
    if manifest_id is not None:
        manifest_id = check_int("manifest_id", manifest_id, lo=1, hi=U64_MAX)
    ms = manifest_store(store, path)
    return ms.read_latest() if manifest_id is None else ms.read(manifest_id)


def list_manifests(
    store: ObjectStore, path: str, start: int | None = None, end: int | None = None
) -> list[ManifestListing]:
    """Manifests with ``start <= id < end``, oldest first."""
    if start is not None:
        start = check_int("start", start, lo=0)
    if end is not None:
        end = check_int("end", end, lo=0)
    ms = manifest_store(store, path)
    return [ManifestListing(e.id, e.path, e.size, e.last_modified) for e in ms.list(start, end)]


def create_database_metadata(
    store: ObjectStore, path: str, manifest: Manifest | None = None
) -> StoredManifest:
    """Write the first manifest of a new, empty database (ManifestVersionExists if it exists)."""
    check_optional("manifest", manifest, Manifest)
    return manifest_store(store, path).create_initial(manifest or Manifest())


# Operator entry points implemented in their own modules, gathered here as SlateDB RFC 0004's `admin`.
from slatedb_core.checkpoints import (  # noqa: E402
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
)
from slatedb_core.compactor import run_compaction_once  # noqa: E402
from slatedb_core.gc import run_gc_once  # noqa: E402
from slatedb_core.lifecycle.clone import create_clone  # noqa: E402
from slatedb_core.lifecycle.union import UnionSource, create_union  # noqa: E402

__all__ = [
    "ManifestListing",
    "UnionSource",
    "create_checkpoint",
    "create_clone",
    "create_database_metadata",
    "create_union",
    "delete_checkpoint",
    "list_checkpoints",
    "list_manifests",
    "manifest_store",
    "read_manifest",
    "refresh_checkpoint",
    "run_compaction_once",
    "run_gc_once",
]
