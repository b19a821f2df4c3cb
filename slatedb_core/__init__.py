"""slatedb_core: a key-value store on object storage following SlateDB's manifest protocol."""

from __future__ import annotations

from slatedb_core import errors
from slatedb_core.errors import (
    CheckpointNotFound,
    CommitRetriesExhausted,
    CorruptionError,
    DatabaseDestroyed,
    Fenced,
    InvalidArgument,
    InvalidDeletion,
    ManifestVersionExists,
    ObjectNotFound,
    ObjectVersionBehindBoundary,
    SlateDBError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointNotFound",
    "CommitRetriesExhausted",
    "CorruptionError",
    "DatabaseDestroyed",
    "Fenced",
    "InvalidArgument",
    "InvalidDeletion",
    "ManifestVersionExists",
    "ObjectNotFound",
    "ObjectVersionBehindBoundary",
    "SlateDBError",
    "__version__",
    "errors",
]
