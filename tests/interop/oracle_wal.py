"""SlateDB 0.17's engine with a separate WAL object store (``with_wal_object_store``, SlateDB
RFC 0009), for the tests of issue 38 item 4.

:class:`WalOracle` is an :class:`~tests.interop.oracle.Oracle` whose writer, reader and admin
handles keep WAL SSTs and fences in a second store: a second local directory, or a second bucket
on the S3 server. Both stores use the same database path, so SlateDB's WAL objects live at
``<db>/wal/{id:020}.sst`` *of the WAL store* (RFC 0009: "the object path structure will remain
unchanged for both stores"). The fixture :func:`wal_stores` in this module gives
``(oracle, main store, main url, wal store, wal url)`` on the local filesystem and on S3.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import slatedb.uniffi as sdb  # type: ignore[import-untyped]  # the wheel ships no py.typed

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3
from tests.interop.oracle import (
    DB,
    Oracle,
    S3Config,
    SlateAdmin,
    SlateReader,
    SlateWriter,
    s3_config,
    settings,
)


class WalOracle(Oracle):
    """The wheel on a main store (``root`` or ``s3``) and a WAL store (``wal_root`` or
    ``wal_s3``): every handle it opens is built ``with_wal_object_store``."""

    def __init__(
        self,
        root: Path,
        wal_root: Path,
        s3: S3Config | None = None,
        wal_s3: S3Config | None = None,
    ) -> None:
        super().__init__(root, s3)
        self.wal_root = wal_root
        self.wal_s3 = wal_s3

    def wal_store(self) -> sdb.ObjectStore:
        if self.wal_s3 is not None:
            builder = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.S3)
            for key, value in self.wal_s3.items():
                builder.with_config(key, value)
            return builder.build()
        builder = sdb.ObjectStoreBuilder.from_env(sdb.ObjectStoreType.LOCAL)
        builder.with_config("local_path", str(self.wal_root))
        return builder.build()

    def open_db(self, path: str = DB, s: sdb.Settings | None = None) -> SlateWriter:
        builder = sdb.DbBuilder(path, self.store())
        builder.with_wal_object_store(self.wal_store())
        builder.with_settings(s if s is not None else settings())
        writer = SlateWriter(self, self.run(builder.build()))
        self._open.append(writer.db.shutdown)
        return writer

    def open_reader(
        self, path: str = DB, checkpoint: Any = None, *, follow: bool = False
    ) -> SlateReader:
        builder = sdb.DbReaderBuilder(path, self.store())
        builder.with_wal_object_store(self.wal_store())
        if checkpoint is not None:
            builder.with_reader_mode(sdb.ReaderMode.CHECKPOINT(str(checkpoint)))
        elif follow:
            builder.with_reader_mode(sdb.ReaderMode.FOLLOW_LATEST())
        reader = SlateReader(self, self.run(builder.build()))
        self._open.append(reader.reader.shutdown)
        return reader

    def admin(self, path: str = DB) -> SlateAdmin:
        builder = sdb.AdminBuilder(path, self.store())
        builder.with_wal_object_store(self.wal_store())
        return SlateAdmin(self, builder.build())


@dataclass
class WalStores:
    """One test's pair of stores and SlateDB on them."""

    oracle: WalOracle
    store: ObjectStore
    url: str
    wal_store: ObjectStore
    wal_url: str


@pytest.fixture(
    params=[pytest.param("local", id="local"), pytest.param("s3", id="s3", marks=pytest.mark.s3)]
)
def wal_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WalStores]:
    """A main store and a separate WAL store (two directories, or two buckets on the S3 server)
    and SlateDB's engine over both."""
    root, wal_root = tmp_path / "store", tmp_path / "walstore"
    root.mkdir()
    wal_root.mkdir()
    if request.param == "local":
        o = WalOracle(root, wal_root)
        url, wal_url = root.as_uri(), wal_root.as_uri()
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        bucket, wal_bucket = moto.new_bucket(), moto.new_bucket()
        o = WalOracle(
            root,
            wal_root,
            s3_config(moto.endpoint, bucket),
            s3_config(moto.endpoint, wal_bucket),
        )
        url, wal_url = moto.url(bucket), moto.url(wal_bucket)
    try:
        yield WalStores(o, open_store(url), url, open_store(wal_url), wal_url)
    finally:
        o.close()
