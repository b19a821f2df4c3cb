"""The one create-SST-if-absent (:mod:`slatedb_core.sst.create`): a create or copy whose answer
was lost and that was retried meets "already exists" at its own fresh name, which is success when
the bytes there are ours and an error otherwise."""

from __future__ import annotations

import pyarrow as pa
import pytest
from ulid import ULID

from slatedb_core.errors import InjectedFault, ObjectAlreadyExists
from slatedb_core.layout import sst_path
from slatedb_core.manifest.model import SstInfo
from slatedb_core.sst import ENTRY_SCHEMA, KIND_VALUE, SstOptions, encode_sst
from slatedb_core.sst.create import copy_sst, create_sst, write_new_sst
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.testing import FaultyStore


def _sst(key: bytes = b"k") -> tuple[bytes, SstInfo]:
    table = pa.table(
        {"key": [key], "seq": [1], "kind": [KIND_VALUE], "value": [b"v"]}, schema=ENTRY_SCHEMA
    )
    return encode_sst(table, SstOptions())


def test_create_sst_creates_and_accepts_its_own_landed_attempt(store: ObjectStore) -> None:
    faulty = FaultyStore(store)
    data = b"sst bytes"
    faulty.fail_next("put_if_absent", "a/*", after_effect=True)  # landed, answer lost
    with pytest.raises(InjectedFault):
        create_sst(faulty, "a/x.sst", data)
    create_sst(faulty, "a/x.sst", data)  # the retry meets our own bytes: success
    assert store.get("a/x.sst").data == data
    create_sst(faulty, "a/y.sst", memoryview(b"from a buffer"))
    assert store.get("a/y.sst").data == b"from a buffer"


def test_create_sst_refuses_someone_else_s_bytes(store: ObjectStore) -> None:
    store.put("a/x.sst", b"other bytes")
    with pytest.raises(ObjectAlreadyExists):
        create_sst(store, "a/x.sst", b"ours")
    assert store.get("a/x.sst").data == b"other bytes"


def test_write_new_sst_names_a_fresh_or_given_ulid(store: ObjectStore) -> None:
    data, info = _sst()
    fresh = write_new_sst(store, "db", data, info)
    assert fresh.info == info and store.get(sst_path("db", fresh.id)).data == data
    given = ULID()
    named = write_new_sst(store, "db", data, info, given)
    assert named.id == given and store.get(sst_path("db", given)).data == data
    assert fresh.id != given


def test_copy_sst_accepts_its_own_copy_and_refuses_another(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, info = _sst()
    store.put("staging/s.sst", data)
    copy = store.copy_if_absent

    def landed_then_conflict(s: str, d: str) -> None:
        copy(s, d)
        raise ObjectAlreadyExists(d)

    def someone_else_s(s: str, d: str) -> None:
        store.put(d, b"other bytes")
        raise ObjectAlreadyExists(d)

    monkeypatch.setattr(store, "copy_if_absent", someone_else_s)
    with pytest.raises(ObjectAlreadyExists):
        copy_sst(store, "staging/s.sst", "db", info)
    monkeypatch.setattr(store, "copy_if_absent", landed_then_conflict)
    sst = copy_sst(store, "staging/s.sst", "db", info)
    assert sst.info == info and store.get(sst_path("db", sst.id)).data == data
    monkeypatch.undo()
    again = copy_sst(store, "staging/s.sst", "db", info)  # a copy that simply succeeds
    assert again.id != sst.id and store.get(sst_path("db", again.id)).data == data
