"""What names and identifies an object of a store: its metadata (:class:`ObjectMeta`), the
version a conditional update compares against (:class:`ObjectVersion`), and what a valid object
key is (:func:`validate_relative_path`). Below every store implementation (the obstore adapter in
:mod:`slatedb_core.store.objectstore`, the local filesystem's writes in
:mod:`slatedb_core.store.local_fs`), which all import it; :mod:`~slatedb_core.store.objectstore`
re-exports the three names."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime

from slatedb_core.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    path: str
    size: int
    last_modified: datetime
    e_tag: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectVersion:
    """What a conditional update compares against: the e-tag and/or version of a prior read."""

    e_tag: str | None = None
    version: str | None = None

    @staticmethod
    def of(meta: ObjectMeta) -> ObjectVersion:
        return ObjectVersion(meta.e_tag, meta.version)


def validate_relative_path(path: str, *, what: str = "path", allow_empty: bool = False) -> str:
    """Reject paths that could escape a prefix or alias another object.

    Object keys here are always relative, '/'-separated, without empty, '.' or '..' segments.
    """
    if not isinstance(path, str):
        raise InvalidArgument(f"{what} must be a str, got {type(path).__name__}")
    if path == "":
        if allow_empty:
            return path
        raise InvalidArgument(f"{what} must not be empty")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise InvalidArgument(f"{what} must be relative, got absolute {path!r}")
    if "\\" in path or "\x00" in path:
        raise InvalidArgument(f"{what} contains a backslash or NUL: {path!r}")
    if not path.isprintable():
        _check_characters(path, what)
    for seg in path.split("/"):
        if seg in ("", ".", ".."):
            raise InvalidArgument(
                f"{what} {path!r} has an empty, '.' or '..' segment; use a plain relative path"
            )
    return path


def _check_characters(path: str, what: str) -> None:
    """Control characters (``\\t``, ``\\x01``, ``\\x7f``, C1) and lone surrogates (argv bytes
    that are not UTF-8 arrive as ``\\udcXX``) make no valid object key: obstore rejects the first
    and cannot encode the second, which used to surface as a retryable StoreError (RELIABILITY.md
    item 17). Other non-printable characters (format marks, separators) are valid keys."""
    for ch in path:
        category = unicodedata.category(ch)
        if category == "Cc":
            raise InvalidArgument(f"{what} contains the control character {ch!r}: {path!r}")
        if category == "Cs":
            raise InvalidArgument(
                f"{what} contains the lone surrogate {ch!r} (not valid UTF-8 text): {path!r}"
            )
