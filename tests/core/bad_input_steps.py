"""Steps of the bad-input tests (tests/core/test_bad_input.py and its siblings in tests/store/,
tests/writer/ and tests/meta/): a store holding a real database ``good``, calls that must each
raise their typed error and leave the store byte-for-byte as it was, and the calls every path
argument reaches."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from slatedb_core import (
    Db,
    DbReader,
    ObjectStore,
    SlateDBError,
    UnionSource,
    admin,
    run_compaction_once,
    run_gc_once,
)
from slatedb_core.checkpoints import (
    create_checkpoint,
    delete_checkpoint,
    list_checkpoints,
    refresh_checkpoint,
)
from slatedb_core.errors import InvalidArgument
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.options import CheckpointScope
from slatedb_core.table import Table

GOOD = "good"
TABLE = "tbl"


Snapshot = dict[str, bytes]


Case = tuple[str, Callable[[], object], type[SlateDBError]]


def snapshot(store: ObjectStore) -> Snapshot:
    """Every object's bytes; on S3, where an e-tag is the MD5 of the bytes of a single-part PUT,
    its size and e-tag from the listing (one request instead of one per object)."""
    listing = list(store.list(""))
    if store.url.startswith("s3") and all(m.e_tag for m in listing):
        return {m.path: f"{m.size}:{m.e_tag}".encode() for m in listing}
    return {m.path: store.get(m.path).data for m in listing}


def run_cases(store: ObjectStore, cases: list[Case]) -> None:
    """Each call must raise its expected error type and leave the store byte-for-byte as it was."""
    failures = []
    before = snapshot(store)
    for label, call, expected in cases:
        try:
            call()
        except expected:
            pass
        except Exception as e:
            failures.append(f"{label}: {type(e).__name__}: {e}, expected {expected.__name__}")
        else:
            failures.append(f"{label}: no error, expected {expected.__name__}")
        after = snapshot(store)
        if after != before:
            changed = sorted(set(after) ^ set(before)) or sorted(
                p for p in after if after[p] != before.get(p)
            )
            failures.append(f"{label}: the store changed: {changed[:5]}")
        before = after  # the next case starts from what this one left
    assert not failures, "\n".join(failures)


def path_cases(store: ObjectStore, p: Any, cp: uuid.UUID) -> list[Case]:
    ia = InvalidArgument
    return [
        (f"Db.open({p!r})", lambda: Db.open(p, store).close(), ia),
        (f"DbReader.open({p!r})", lambda: DbReader.open(p, store).close(), ia),
        (f"DbReader.open({p!r}, checkpoint)", lambda: DbReader.open(p, store, cp).close(), ia),
        (f"create_checkpoint({p!r})", lambda: create_checkpoint(p, store), ia),
        (f"list_checkpoints({p!r})", lambda: list_checkpoints(p, store), ia),
        (f"delete_checkpoint({p!r})", lambda: delete_checkpoint(p, store, cp), ia),
        (f"refresh_checkpoint({p!r})", lambda: refresh_checkpoint(p, store, cp), ia),
        (f"destroy soft({p!r})", lambda: destroy(p, store, soft=True), ia),
        (f"destroy hard({p!r})", lambda: destroy(p, store, soft=False), ia),
        (f"read_manifest({p!r})", lambda: admin.read_manifest(store, p), ia),
        (f"list_manifests({p!r})", lambda: admin.list_manifests(store, p), ia),
        (f"run_gc_once({p!r})", lambda: run_gc_once(p, store), ia),
        (f"run_compaction_once({p!r})", lambda: run_compaction_once(p, store), ia),
        (f"clone to {p!r}", lambda: admin.create_clone(p, GOOD, store), ia),
        (f"clone from {p!r}", lambda: admin.create_clone("clone", p, store), ia),
        (f"union to {p!r}", lambda: admin.create_union(p, [UnionSource(GOOD)], store), ia),
        (f"union from {p!r}", lambda: admin.create_union("u", [UnionSource(p)], store), ia),
    ]


Lake = tuple[ObjectStore, uuid.UUID, Db, Table]


@contextmanager
def good_lake(store: ObjectStore) -> Iterator[Lake]:
    """``good`` with data in L0 and the WAL, a checkpoint, an open writer, and a 2-shard table
    ``TABLE``; the writer and the table are closed on exit."""
    db = Db.open(GOOD, store)
    db.put(b"k1", b"v1")
    db.flush_memtable()
    db.put(b"k2", b"v2")
    cp = db.create_checkpoint(CheckpointScope.DURABLE)
    db.flush()
    table = Table.create(TABLE, store, [b"m"])
    try:
        yield store, cp.id, db, table
    finally:
        table.close()
        db.close()
