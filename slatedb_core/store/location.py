"""Where a store's objects live, whatever URL reached them: the namespace two-phase CAS keys its
records by (docs/two-phase-cas.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

_WRAPPERS = re.compile(r"^(?:[a-z][a-z0-9_-]*\+)+(?=[a-z][a-z0-9+.-]*://)")
"""Wrapper stores prefix the URL of what they wrap (``faulty+``, ``nocas+``, ``twophase+``) and
keep its paths: the objects are the wrapped store's."""


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where a store's objects live: ``root`` names a namespace of absolute object names
    (``s3://bucket``, ``file://`` for the local filesystem, ``memory://name``) and ``base`` is the
    store's prefix inside it ("" or ``a/b``), so path ``p`` of the store is object
    ``key(p)`` = ``base/p`` of ``root``. Equivalent URLs give one location for one object:
    ``s3://b/lake/prod`` + ``orders`` and ``s3://b/lake`` + ``prod/orders`` are both
    ``lake/prod/orders`` of ``s3://b``; ``file:///d/lake/`` and the plain path ``/d/lake``
    (symlinks resolved when the store was opened) both ``d/lake/...`` of ``file://``."""

    root: str
    base: str = ""

    def key(self, path: str) -> str:
        return f"{self.base}/{path}" if self.base and path else (self.base or path)

    def rel(self, key: str) -> str:
        """The store path of absolute name ``key`` (which lies under ``base``)."""
        if not self.base:
            return key
        if key == self.base:
            return ""
        if not key.startswith(self.base + "/"):
            raise ValueError(f"{key!r} is not under {self.base!r}")
        return key[len(self.base) + 1 :]


def store_location(url: str) -> StoreLocation:
    """The location of the store whose ``url`` (``ObjectStore.url``) is given: see
    :class:`StoreLocation`. Not an S3 endpoint: one bucket name is one location, whichever
    endpoint reaches it (two servers with a bucket of the same name would share keys, which
    refuses writes but never lets two win); bucket names compare case-insensitively for the same
    reason. Any other scheme (or an explicit namespace) is a root of its own."""
    url = _WRAPPERS.sub("", url.strip())
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        return StoreLocation(url)
    if scheme == "file":
        return StoreLocation("file://", unquote(urlsplit(url).path).strip("/"))
    if scheme == "s3":
        # not urlsplit: a prefix is shown as given (unquoted), and may hold '?' or '#'
        bucket, _, prefix = rest.partition("/")
        return StoreLocation(f"s3://{bucket.lower()}", prefix.strip("/"))
    if scheme == "memory":
        return StoreLocation(f"memory://{rest.rstrip('/')}")
    return StoreLocation(f"{scheme}://{rest}")
