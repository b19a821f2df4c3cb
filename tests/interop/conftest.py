"""Fixtures of the cross-engine tests: one directory per test that SlateDB 0.17's own engine (the
``slatedb`` wheel, driven through :mod:`tests.interop.oracle`) and ours both open, the wheel with
its ``LOCAL`` object store rooted there, ours with ``open_store(root)``; the database is ``db``.

``both_stores`` is the same pair on the local filesystem and on the S3 server (moto on
127.0.0.1, a fresh bucket): ``(oracle, store, url)``, ``url`` the store's URL for our CLI,
Spark and Dagster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from tests.conftest import MotoS3
from tests.interop.oracle import Oracle, s3_config


@pytest.fixture
def root(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    d.mkdir()
    return d


@pytest.fixture
def oracle(root: Path) -> Iterator[Oracle]:
    o = Oracle(root)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture
def store(root: Path) -> ObjectStore:
    return open_store(root)


@pytest.fixture(
    params=[pytest.param("local", id="local"), pytest.param("s3", id="s3", marks=pytest.mark.s3)]
)
def both_stores(
    request: pytest.FixtureRequest, root: Path
) -> Iterator[tuple[Oracle, ObjectStore, str]]:
    """SlateDB's engine and ours on one store: the local directory ``root``, or a new bucket on
    the S3 server."""
    if request.param == "local":
        o, url = Oracle(root), root.as_uri()
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        bucket = moto.new_bucket()
        o, url = Oracle(root, s3_config(moto.endpoint, bucket)), moto.url(bucket)
    try:
        yield o, open_store(url), url
    finally:
        o.close()
