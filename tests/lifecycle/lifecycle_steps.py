"""Steps of the clone and union tests (SlateDB RFC 0004): writer options that flush fast, the keys
they write, a fresh memory store, and reads of a database's rows and latest manifest that write
nothing."""

from __future__ import annotations

from datetime import timedelta

from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, ReaderMode
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store

OPTS = DbOptions(flush_interval=timedelta(milliseconds=5))


def key(i: int) -> bytes:
    return b"k%03d" % i


def content(store: ObjectStore, path: str) -> dict[bytes, bytes]:
    """Read without writing (a writer would leave a fencing WAL SST behind)."""
    options = DbReaderOptions(mode=ReaderMode.FOLLOW_LATEST)
    with DbReader.open(path, store, options=options) as reader:
        return dict(reader.scan())


def manifest(store: ObjectStore, path: str) -> Manifest:
    return ManifestStore(store, path).read_latest().manifest


def memory() -> ObjectStore:
    """A new, empty memory store."""
    return open_store("memory://")
