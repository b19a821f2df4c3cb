"""Shared fixtures: one object store per test on memory, the local filesystem and S3 (moto).

The S3 store is moto's real HTTP server, started once per session on 127.0.0.1 with a free port;
each test gets its own bucket. Tests using the ``store`` fixture run on all three kinds; S3 cases
carry the ``s3`` marker so ``-m "not s3"`` gives a quick loop.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.interop.oracle import Oracle

# The boundary lease (docs/gc-and-boundaries.md "The boundary lease") that gc/wal.boundary files
# created by the suite's processes record (this one, and the simulation's, Spark's and the CLI's
# subprocesses, which inherit the environment): every GC pass that deletes WAL SSTs waits it
# out, and the default 1 s would add many minutes. The lease lives in the file, so processes
# with another default still agree on it. Set before slatedb_core is imported.
os.environ["SLATEDB_WAL_LEASE_MS"] = "50"
# Local-filesystem stores fsync every write by default (docs/operations.md, "A database on the
# local filesystem"): 74% more time for the crash tests on file:// (117 s) on a 2-core machine.
# The suite and its subprocesses run without (SLATEDB_FILE_SYNC=true in the shell runs them
# with); tests/store/test_local_sync.py checks the syncs.
os.environ.setdefault("SLATEDB_FILE_SYNC", "false")

from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.testing.ports import free_port

# Keep any stray AWS configuration of the developer's shell away from the tests.
for _var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_SESSION_TOKEN"):
    os.environ.pop(_var, None)


def make_moto_conditional_puts_atomic() -> None:
    """moto 5.2.5 checks If-Match / If-None-Match and then stores the object as two separate steps
    (``S3Response.put_object``) with no lock, so two racing requests can both pass the check. Real
    S3 (and MinIO, SeaweedFS) evaluate the condition atomically; serialising moto's handler makes
    the test server honour the contract we rely on, so a double winner can only come from our code.
    CompleteMultipartUpload with ``If-None-Match: *`` (``ObjectStore.copy_if_absent`` on S3, see
    ``S3Response._key_response_post``) has the same check-then-store gap and takes the same lock,
    so a conditional copy and a conditional put of one key serialise too.
    """
    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_slatedb_atomic", False):
        return
    original_put = S3Response.put_object
    original_post = S3Response._key_response_post
    lock = threading.Lock()

    def put_object(self: S3Response) -> Any:
        with lock:
            return original_put(self)

    def key_response_post(self: S3Response, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original_post(self, *args, **kwargs)

    put_object._slatedb_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]
    S3Response._key_response_post = key_response_post  # type: ignore[method-assign]


class MotoS3:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        make_moto_conditional_puts_atomic()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        import boto3

        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def new_bucket(self) -> str:
        name = f"t-{uuid.uuid4().hex[:20]}"
        self.client.create_bucket(Bucket=name)
        return name

    def url(self, bucket: str, prefix: str = "") -> str:
        path = f"/{prefix}" if prefix else ""
        return (
            f"s3://{bucket}{path}?endpoint={self.endpoint}&region=us-east-1"
            "&access_key_id=testing&secret_access_key=testing&allow_http=true"
        )

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture
def mem() -> ObjectStore:
    """A fresh, empty memory store of this test's own (modules may define their own ``mem``)."""
    return open_store(f"memory://test-{uuid.uuid4().hex}")


@pytest.fixture
def oracle(tmp_path: Path) -> Iterator[Oracle]:
    """SlateDB 0.17 itself (the ``slatedb`` wheel, tests/interop/oracle.py) over the local store at
    ``tmp_path``, closed after the test (tests/interop/ has its own, under ``root``). Imported here,
    not at the top, so a run without the wheel's tests never loads it."""
    from tests.interop.oracle import Oracle

    o = Oracle(tmp_path)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    server = MotoS3()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(moto_s3: MotoS3) -> str:
    return moto_s3.url(moto_s3.new_bucket())


STORE_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("local", id="local"),
    pytest.param("s3", id="s3", marks=pytest.mark.s3),
]


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _store_url(request.param, request, tmp_path)


def _store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "memory":
        return f"memory://test-{uuid.uuid4().hex}"
    if kind == "local":
        return (tmp_path / "store").as_uri()
    moto: MotoS3 = request.getfixturevalue("moto_s3")
    return moto.url(moto.new_bucket())


@pytest.fixture
def store(store_url: str) -> ObjectStore:
    return open_store(store_url)


# ---- two-phase CAS (slatedb_core.store.twophase) over stores without conditional writes ------

TWO_PHASE_KINDS = [
    pytest.param("twophase-sqlite", id="twophase-sqlite"),
    pytest.param("twophase-postgres", id="twophase-postgres", marks=pytest.mark.postgres),
    pytest.param("twophase-s3", id="twophase-s3", marks=pytest.mark.s3),
]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (tests/pgcluster.py). Skipped when the server
    binaries are missing, except under CI=true, where that is a failure."""
    from tests.pgcluster import PG_MISSING, PgCluster, find_pg_bin

    if find_pg_bin() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(PG_MISSING)
        pytest.skip(PG_MISSING)
    cluster = PgCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Any) -> str:
    """A fresh database in the session's cluster."""
    url: str = pg_cluster.new_database()
    return url


def open_two_phase_kind(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A TwoPhaseStore over a store that ignores If-None-Match / If-Match."""
    from slatedb_core.store.nocas import NoConditionalWrites
    from slatedb_core.store.twophase import TwoPhaseStore
    from slatedb_core.store.txn import open_txn_store

    if kind == "twophase-s3":
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        inner = open_store(moto.url(moto.new_bucket()))
    else:
        inner = open_store(f"memory://test-{uuid.uuid4().hex}")
    if kind == "twophase-postgres":
        txn_url = request.getfixturevalue("pg_url")
    else:
        txn_url = f"sqlite:///{tmp_path}/txn.sqlite"
    return TwoPhaseStore(NoConditionalWrites(inner), open_txn_store(txn_url))


@pytest.fixture(params=STORE_KINDS + TWO_PHASE_KINDS)
def store_or_two_phase(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """Every ``store`` kind plus two-phase CAS over SQLite, PostgreSQL and moto S3; a test module
    opts in with ``store = store_or_two_phase`` as its own ``store`` fixture."""
    kind = request.param
    if not kind.startswith("twophase"):
        yield open_store(_store_url(kind, request, tmp_path))
        return
    two_phase = open_two_phase_kind(kind, request, tmp_path)
    try:
        yield two_phase
    finally:
        two_phase.close()


# Folders whose tests carry a marker of their kind, so ``-m`` can leave them out of the quick
# loop (``make test-quick``): cross-engine tests against the slatedb wheel, the seeded simulation,
# the crash points, and the applications on the engine (Spark, Dagster, the demo, the cluster).
FOLDER_MARKERS = {
    "interop": "interop",
    "sim": "sim",
    "crash": "crash",
    **dict.fromkeys(
        ("spark", "orchestration", "lakehouse_demo", "cluster", "devtools", "docs"), "apps"
    ),
}

# Tests that share something machine-wide with a test of another worker under pytest-xdist
# (``make test`` runs ``-n 2 --dist loadgroup``): they all go to one worker, one after another
# (``xdist_group``), by node id prefix. Empty while none needs it.
RUN_TOGETHER: tuple[str, ...] = ()


@pytest.hookimpl(tryfirst=True)  # before ``-m "not slow"`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # and before xdist's loadgroup appends "@<group>" to the node ids make_test_budget matches
    from tests.make_test_budget import mark_slow

    mark_slow(items, whole_modules=not any("::" in str(a) for a in config.args))
    for item in items:
        parts = item.nodeid.split("/")
        if len(parts) > 2 and parts[0] == "tests" and parts[1] in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[parts[1]])
        if item.nodeid.startswith(RUN_TOGETHER) and RUN_TOGETHER:
            item.add_marker(pytest.mark.xdist_group("serial"))
    # SLATEDB_HYPOTHESIS=dev (make test-quick): property tests draw a quarter of their examples;
    # unset (make test, CI) every one (tests/hypothesis_profile.py)
    from tests.hypothesis_profile import apply_profile

    apply_profile(items)
