"""Bad input to the public API: a clear typed error, and not one byte written or changed.

Every case runs against a store holding a real database (``good``, with a checkpoint), and the
store's full listing and contents are compared before and after the bad call: a rejected call must
not leave a half-created database, a stray manifest or an empty directory behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from slatedb_core import (
    CheckpointOptions,
    CheckpointScope,
    Db,
    DbOptions,
    DbReader,
    ObjectStore,
    UnionSource,
    WriteBatch,
    admin,
    open_store,
    run_compaction_once,
    run_gc_once,
)
from slatedb_core.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    refresh_checkpoint,
)
from slatedb_core.errors import CheckpointNotFound, InvalidArgument
from slatedb_core.options import MAX_KEY_BYTES, MAX_VALUE_BYTES
from tests.core.bad_input_steps import GOOD, path_cases, run_cases

BAD_PATHS: list[Any] = [
    "",
    "..",
    "../x",
    "a/../b",
    "good/..",
    "/abs",
    "/",
    "good/",
    "/good",
    "a//b",
    "./a",
    ".",
    "a\\b",
    "a\x00b",
    "C:/x",
    5,
    None,
    b"good",
]


@pytest.fixture
def seeded(store: ObjectStore) -> tuple[ObjectStore, uuid.UUID]:
    """A database with data in L0 and the WAL, and a checkpoint."""
    db = Db.open(GOOD, store)
    db.put(b"k1", b"v1")
    db.flush_memtable()
    db.put(b"k2", b"v2")
    cp = db.create_checkpoint(CheckpointScope.DURABLE)
    db.close()
    return store, cp.id


def test_bad_paths_are_invalid_argument_and_write_nothing(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    store, cp = seeded
    run_cases(store, [c for p in BAD_PATHS for c in path_cases(store, p, cp)])


def test_overlapping_clone_and_union_paths_are_refused(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    """A destination inside its source (or the reverse) would mix two databases' objects."""
    store, _ = seeded
    ia = InvalidArgument
    run_cases(
        store,
        [
            ("clone onto its parent", lambda: admin.create_clone(GOOD, GOOD, store), ia),
            ("clone inside its parent", lambda: admin.create_clone("good/sub", GOOD, store), ia),
            ("clone around its parent", lambda: admin.create_clone("go", "go/od", store), ia),
            (
                "union inside a source",
                lambda: admin.create_union("good/u", [UnionSource(GOOD)], store),
                ia,
            ),
            ("union of nothing", lambda: admin.create_union("u", [], store), ia),
            ("union of a str", lambda: admin.create_union("u", [GOOD], store), ia),  # type: ignore[list-item]
            (
                "projection not a KeyRange",
                lambda: admin.create_clone("c", GOOD, store, None, "a..b"),
                ia,
            ),  # type: ignore[arg-type]
        ],
    )


def test_unknown_checkpoints_are_checkpoint_not_found(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    store, _ = seeded
    unknown = uuid.uuid4()
    nf = CheckpointNotFound
    run_cases(
        store,
        [
            ("reader at unknown checkpoint", lambda: DbReader.open(GOOD, store, unknown), nf),
            ("delete unknown checkpoint", lambda: delete_checkpoint(GOOD, store, unknown), nf),
            ("refresh unknown checkpoint", lambda: refresh_checkpoint(GOOD, store, unknown), nf),
            (
                "checkpoint of unknown source",
                lambda: create_checkpoint(GOOD, store, CheckpointOptions(source=unknown)),
                nf,
            ),
            (
                "clone at unknown checkpoint",
                lambda: admin.create_clone("clone", GOOD, store, unknown),
                nf,
            ),
            (
                "union at unknown checkpoint",
                lambda: admin.create_union("u", [UnionSource(GOOD, unknown)], store),
                nf,
            ),
        ],
    )


def test_expired_checkpoint_cannot_be_read_or_refreshed(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    store, _ = seeded
    short = create_checkpoint(
        GOOD, store, CheckpointOptions(lifetime=timedelta(seconds=1)), now=lambda: 1_000.0
    )
    run_cases(
        store,
        [
            (
                "reader at expired checkpoint",
                lambda: DbReader.open(GOOD, store, short.id),
                CheckpointNotFound,
            ),
            (
                "refresh expired checkpoint",
                lambda: refresh_checkpoint(GOOD, store, short.id),
                CheckpointNotFound,
            ),
        ],
    )


def test_checkpoint_ids_that_are_not_uuids_are_invalid_argument(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    store, cp = seeded
    text = str(cp)  # a real checkpoint's id, but as a str
    ia = InvalidArgument
    run_cases(
        store,
        [
            ("reader", lambda: DbReader.open(GOOD, store, text), ia),  # type: ignore[arg-type]
            ("delete", lambda: delete_checkpoint(GOOD, store, text), ia),  # type: ignore[arg-type]
            ("refresh", lambda: refresh_checkpoint(GOOD, store, text), ia),  # type: ignore[arg-type]
            ("source", lambda: CheckpointOptions(source=text), ia),  # type: ignore[arg-type]
            ("clone", lambda: admin.create_clone("c", GOOD, store, text), ia),  # type: ignore[arg-type]
            ("union", lambda: admin.create_union("u", [UnionSource(GOOD, text)], store), ia),  # type: ignore[arg-type]
            ("list_manifests start", lambda: admin.list_manifests(store, GOOD, "1"), ia),  # type: ignore[arg-type]
            ("list_manifests end", lambda: admin.list_manifests(store, GOOD, 0, -1), ia),
            ("read_manifest id", lambda: admin.read_manifest(store, GOOD, -1), ia),
        ],
    )


@pytest.fixture
def open_db(seeded: tuple[ObjectStore, uuid.UUID]) -> Iterator[tuple[ObjectStore, Db]]:
    store, _ = seeded
    db = Db.open(GOOD, store)
    db.put(b"k3", b"v3")
    db.flush()
    try:
        yield store, db
    finally:
        db.close()


def test_the_key_limit_is_slatedbs_u16() -> None:
    assert MAX_KEY_BYTES == 65535
    with pytest.raises(InvalidArgument):
        DbOptions(max_key_bytes=MAX_KEY_BYTES + 1)
    with pytest.raises(InvalidArgument):
        DbOptions(max_value_bytes=MAX_VALUE_BYTES + 1)


def test_oversize_and_malformed_keys_and_values_are_refused_whole(
    open_db: tuple[ObjectStore, Db],
) -> None:
    """Nothing of a rejected call is applied: not to the store, and not to what reads return."""
    store, db = open_db
    long_key = b"k" * (MAX_KEY_BYTES + 1)
    big_value = b"v" * (MAX_VALUE_BYTES + 1)
    ia = InvalidArgument

    def table(keys: list[Any], values: list[Any] | None = None) -> pa.Table:
        return pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values or [b"v"] * len(keys), pa.binary()),
            }
        )

    run_cases(
        store,
        [
            ("empty key", lambda: db.put(b"", b"v"), ia),
            ("key over the limit", lambda: db.put(long_key, b"v"), ia),
            ("value over the limit", lambda: db.put(b"new", big_value), ia),
            ("str key", lambda: db.put("k", b"v"), ia),  # type: ignore[arg-type]
            ("None value", lambda: db.put(b"new", None), ia),  # type: ignore[arg-type]
            ("delete empty key", lambda: db.delete(b""), ia),
            ("delete key over the limit", lambda: db.delete(long_key), ia),
            ("get empty key", lambda: db.get(b""), ia),
            ("get key over the limit", lambda: db.get(long_key), ia),
            ("get_many with an int", lambda: db.get_many([b"k1", 5]), ia),  # type: ignore[list-item]
            ("scan with str bounds", lambda: list(db.scan("a", "b")), ia),  # type: ignore[arg-type]
            (
                "batch with one bad key",
                lambda: db.write(WriteBatch().put(b"new", b"v").put(long_key, b"v")),
                ia,
            ),
            (
                "batch with one big value",
                lambda: db.write(WriteBatch().put(b"new", b"v").put(b"n2", big_value)),
                ia,
            ),
            ("put_arrow with one empty key", lambda: db.put_arrow(table([b"new", b""])), ia),
            ("put_arrow with one long key", lambda: db.put_arrow(table([b"new", long_key])), ia),
            ("put_arrow with a null key", lambda: db.put_arrow(table([b"new", None])), ia),
            (
                "put_arrow without a key column",
                lambda: db.put_arrow(pa.table({"x": [b"k"], "value": [b"v"]})),
                ia,
            ),
            (
                "bulk_ingest with one long key",
                lambda: db.bulk_ingest(table([b"new", long_key])),
                ia,
            ),
            ("bulk_ingest with one empty key", lambda: db.bulk_ingest(table([b"new", b""])), ia),
        ],
    )
    assert db.get(b"new") is None and db.get(b"n2") is None
    assert db.get(b"k1") == b"v1" and db.get(b"k3") == b"v3"


def test_a_key_at_the_limit_is_accepted(open_db: tuple[ObjectStore, Db]) -> None:
    _, db = open_db
    key = b"x" * MAX_KEY_BYTES
    db.put(key, b"v")
    assert db.get(key) == b"v"


# ------------------------------------------------------------------------------------- URLs

BAD_URLS: list[Any] = [
    "",
    "   ",
    5,
    None,
    b"memory://",
    "ftp://host/x",
    "gs://bucket",
    "http://example.com/x",
    "file:relative",
    "s3:bucket",
    "s3://",
    "s3:///prefix",
    "s3://bucket?bogus=1",
    "s3://bucket/../x",
    "s3://bucket/a//b",
    "s3://bad bucket",
    "s3://user@bucket",
    "s3://bucket:9000",
    "s3://bucket#frag",
    "s3://bucket?endpoint=ftp://x",
    "s3://bucket?endpoint=http://127.0.0.1:9",
    "s3://bucket?allow_http=maybe",
    "file://remotehost/x",
    "file:///tmp/x?q=1",
    "file:///tmp/x#f",
    "file://",
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_bad_store_urls_are_invalid_argument_and_create_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_bytes(b"not a directory")
    local_bad = [
        "../escape",
        "a/../b",
        "file:///tmp/../etc/slatedb-x",
        str(tmp_path / "a-file"),
        (tmp_path / "a-file").as_uri(),
        str(tmp_path / "a-file" / "sub"),
        str(tmp_path / "nul\x00byte"),
        (tmp_path / "nul%00byte").as_uri().replace("%2500", "%00"),
        str(tmp_path / ("x" * 300)),
        "~no-such-user-slatedb/x",
    ]
    failures = []
    for url in BAD_URLS + local_bad:
        before = _tree(tmp_path)
        try:
            open_store(url)
        except InvalidArgument as e:
            assert str(e), url
        except Exception as e:
            failures.append(f"{url!r}: {type(e).__name__}: {e}")
        else:
            failures.append(f"{url!r}: accepted")
        if _tree(tmp_path) != before:
            failures.append(f"{url!r}: created {sorted(_tree(tmp_path) - before)}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------- foreign objects in the store

FOREIGN = [
    "manifest/junk",
    "manifest/00000000000000000099.manifest.tmp",
    "manifest/0000000000000000009x.manifest",
    "manifest/99999999999999999999.manifest",
    "manifest/_latest_version.bak",
    "wal/abc.sst",
    "wal/99999999999999999999.sst",
    "compacted/notaulid.sst",
    "compacted/7ZZZZZZZZZZZZZZZZZZZZZZZZZ.sst",
    "compactions/junk",
    "gc/other.boundary",
    "stray",
]


def test_foreign_objects_under_a_database_are_ignored_and_kept(
    seeded: tuple[ObjectStore, uuid.UUID],
) -> None:
    """Names no writer makes (an id past u64, a ULID from the future, temp files) must neither
    stop the database nor be taken for its own objects: before the fix, the first made every
    operation fail and the second let GC push compacted.boundary past every possible SST id."""
    from slatedb_core import GarbageCollectorOptions

    store, _ = seeded
    for name in FOREIGN:
        store.put(f"{GOOD}/{name}", b"not ours")
    assert admin.read_manifest(store, GOOD).manifest.initialized
    with DbReader.open(GOOD, store) as reader:
        assert reader.get(b"k1") == b"v1"
    run_gc_once(GOOD, store, GarbageCollectorOptions(min_age=timedelta(0)))
    run_compaction_once(GOOD, store)
    db = Db.open(GOOD, store)
    try:
        db.put(b"k9", b"v9")
        db.flush_memtable()  # a new compacted SST: its id must be above compacted.boundary
        assert db.get(b"k9") == b"v9" and db.get(b"k2") == b"v2"
    finally:
        db.close()
    admin.create_clone("clone", GOOD, store)
    for name in FOREIGN:
        assert store.get(f"{GOOD}/{name}").data == b"not ours", name


@pytest.mark.parametrize(
    "text",
    [
        '{"table_path": "t", "shard_map_id": Infinity, "shards": []}',  # was OverflowError
        "[" * 50_000 + "]" * 50_000,  # was RecursionError
        "null",
        "",
        "not json",
        '{"shards": [1]}',
    ],
)
def test_bad_table_snapshot_text_is_invalid_argument(text: str) -> None:
    from slatedb_core import TableSnapshot

    with pytest.raises(InvalidArgument):
        TableSnapshot.from_json(text)
