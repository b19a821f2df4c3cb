"""A database whose latest manifest is a ManifestV1 with ``wal_object_store_uri`` (what SlateDB
before 0.17 left when its writer had a WAL store; issue 38, item 5). It raised
``ManifestV1Unrepresentable`` for every opener, although SlateDB opens it with its WAL store.
Now: with ``wal_url`` every opener reads it and our writer's V2 commit keeps the mark (ManifestV2
has no field for it, so it goes in our table); without ``wal_url`` each is refused with
``WalStoreMissing`` naming ``--wal-url``, as SlateDB's builders refuse it. The V1 object is built
by :mod:`tests.manifest.v1_fixture` (from SlateDB's ``manifest.fbs``). Local and S3."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from slatedb_core.cli.main import cli
from slatedb_core.errors import WalStoreMissing
from slatedb_core.gc.service import run_gc_once
from slatedb_core.manifest.codec import decode_stamped_manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import DbOptions, DbReaderOptions, GarbageCollectorOptions
from slatedb_core.reader.reader import DbReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.writer.db import Db
from tests.conftest import MotoS3
from tests.manifest.v1_fixture import encode_v1, from_model

HOUR = timedelta(hours=1)
ZERO = GarbageCollectorOptions(min_age=timedelta(0))


@pytest.fixture(
    params=[pytest.param("local", id="local"), pytest.param("s3", id="s3", marks=pytest.mark.s3)]
)
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The main store's URL and the WAL store's."""
    if request.param == "local":
        (tmp_path / "main").mkdir()
        (tmp_path / "wal").mkdir()
        yield (tmp_path / "main").as_uri(), (tmp_path / "wal").as_uri()
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        yield moto.url(moto.new_bucket()), moto.url(moto.new_bucket())


def v1_with_wal_store(main: ObjectStore, wal_url: str, uri: str) -> None:
    """Flushed rows and a WAL tail in the WAL store; then the latest manifest rewritten in place
    as the V1 object SlateDB would have left, ``wal_object_store_uri`` = ``uri``."""
    with Db.open("db", main, DbOptions(flush_interval=HOUR, wal_url=wal_url)) as db:
        db.put(b"flushed", b"1")
        db.flush_memtable()
        db.put(b"tail", b"2")  # in the WAL store only
    ms = ManifestStore(main, "db")
    latest = ms.read_latest()
    v1 = dataclasses.replace(from_model(latest.manifest), wal_object_store_uri=uri)
    path = ms.seq.path(latest.id)
    main.put(path, encode_v1(v1))
    m, stamp = decode_stamped_manifest(main.get(path).data, name=path)
    assert stamp.version == 1 and m.wal_object_store_uri == uri


@pytest.mark.parametrize("uri", ["", "s3://wal-bucket/db"])
def test_a_v1_manifest_with_a_wal_store_opens_with_wal_url(urls: tuple[str, str], uri: str) -> None:
    url, wal_url = urls
    main = open_store(url)
    v1_with_wal_store(main, wal_url, uri)
    with DbReader.open("db", main, options=DbReaderOptions(wal_url=wal_url)) as r:
        assert (r.get(b"flushed"), r.get(b"tail")) == (b"1", b"2")
    run_gc_once("db", main, ZERO, wal_url=wal_url)
    r2 = CliRunner().invoke(cli, ["--url", url, "--path", "db", "--wal-url", wal_url, "scan"])
    assert r2.exit_code == 0 and "tail" in r2.stdout, r2.stderr
    with Db.open("db", main, DbOptions(flush_interval=HOUR, wal_url=wal_url)) as db:
        assert db.get(b"tail") == b"2"
        db.put(b"ours", b"3")
    latest = ManifestStore(main, "db").read_latest()
    assert latest.version == 2  # our commits write V2 ...
    assert latest.manifest.wal_object_store_uri == uri  # ... and keep the mark
    with DbReader.open("db", main, options=DbReaderOptions(wal_url=wal_url)) as r:
        assert [r.get(k) for k in (b"flushed", b"tail", b"ours")] == [b"1", b"2", b"3"]


def test_a_v1_manifest_with_a_wal_store_is_refused_without_wal_url(
    urls: tuple[str, str],
) -> None:
    url, wal_url = urls
    main = open_store(url)
    v1_with_wal_store(main, wal_url, "")
    before = sorted(o.path for o in main.list(""))
    with pytest.raises(WalStoreMissing, match=r"ManifestV1.*--wal-url"):
        DbReader.open("db", main)
    with pytest.raises(WalStoreMissing, match="ManifestV1"):
        Db.open("db", main, DbOptions(flush_interval=HOUR))
    with pytest.raises(WalStoreMissing, match="ManifestV1"):
        run_gc_once("db", main, ZERO)
    r = CliRunner().invoke(cli, ["--url", url, "--path", "db", "scan"])
    assert r.exit_code == 1 and "WalStoreMissing" in r.stderr and "--wal-url" in r.stderr
    assert sorted(o.path for o in main.list("")) == before  # nothing written
