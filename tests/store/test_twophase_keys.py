"""RELIABILITY.md, review finding 12: two-phase CAS rows are keyed by the absolute location of the object, so
stores opened with different URLs over one object store and one transactional store never let
two writers win one object (SlateDB RFC 0001 pattern 5: "destination unique"). Also: equivalent URLs,
rows stored under the old (store URL, relative path) keys, and GC under a prefixed store.

The object stores are real local directories (and memory) behind :class:`NoConditionalWrites`,
so every refusal below comes from the protocol; the transactional store is a real SQLite file
or PostgreSQL database.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from slatedb_core.errors import ObjectAlreadyExists, PreconditionFailed, VersionExists
from slatedb_core.gc import run_gc_once
from slatedb_core.meta.boundary import BoundaryObject
from slatedb_core.meta.sequenced import SequencedStore
from slatedb_core.options import GarbageCollectorOptions
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.twophase import TwoPhaseStore
from slatedb_core.store.twophase_keys import is_temp_name, temp_name
from slatedb_core.store.txn import TxnStore, open_txn_store
from slatedb_core.store.url import open_store
from tests.gc import commit, new_db

OBJ = "orders/manifest/00000000000000000001.manifest"


def two_phase(url: str, txn: TxnStore) -> TwoPhaseStore:
    """The wrapper over the object store at ``url`` without conditional writes."""
    return TwoPhaseStore(NoConditionalWrites(open_store(url)), txn)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    (root / "prod").mkdir(parents=True)
    return root


# ---- the bug: one object, two URLs -------------------------------------------------------------
def test_one_object_through_a_store_and_its_parent_prefix_has_one_winner(
    lake: Path, txn: TxnStore
) -> None:
    prod = two_phase((lake / "prod").as_uri(), txn)
    whole = two_phase(lake.as_uri(), txn)
    prod.put_if_absent(OBJ, b"first")
    with pytest.raises(ObjectAlreadyExists):
        whole.put_if_absent(f"prod/{OBJ}", b"second")
    assert whole.get(f"prod/{OBJ}").data == b"first"
    assert (lake / "prod" / OBJ).read_bytes() == b"first"  # not overwritten


def test_racing_sequenced_creates_through_two_urls_have_exactly_one_winner(
    lake: Path, txn_url: str
) -> None:
    urls = [(lake / "prod").as_uri(), lake.as_uri()]
    paths = ["orders", "prod/orders"]
    winners: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def run(t: int) -> None:
        store = two_phase(urls[t % 2], open_txn_store(txn_url))  # own connection pool each
        try:
            start.wait()
            SequencedStore(store, paths[t % 2], "manifest", "manifest").create(1, b"w%d" % t)
        except (VersionExists, ObjectAlreadyExists):
            return
        finally:
            store.close()
        with lock:
            winners.append(t)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(winners) == 1
    assert (lake / "prod" / OBJ).read_bytes() == b"w%d" % winners[0]


def test_equivalent_urls_share_one_key(tmp_path: Path, txn: TxnStore) -> None:
    """file:// and the plain path, trailing slashes, a relative path, a symlink: one object."""
    root = tmp_path / "d"
    root.mkdir()
    (tmp_path / "link").symlink_to(root)
    spellings = [
        root.as_uri(),
        root.as_uri() + "/",
        str(root),
        str(root) + "//",
        str(tmp_path / "link"),
    ]
    stores = [two_phase(u, txn) for u in spellings]
    stores[0].put_if_absent("x/y", b"one")
    for s in stores[1:]:
        with pytest.raises(ObjectAlreadyExists):
            s.put_if_absent("x/y", b"two")
        assert s.get("x/y").data == b"one"
    assert len({(s.location.root, s.location.base) for s in stores}) == 1


def test_wrappers_do_not_change_the_key(txn: TxnStore) -> None:
    from slatedb_core.testing import FaultyStore

    name = f"memory://keys-{time.monotonic_ns()}"
    plain = TwoPhaseStore(NoConditionalWrites(open_store(name)), txn)
    wrapped = TwoPhaseStore(FaultyStore(NoConditionalWrites(open_store(name))), txn)
    plain.put_if_absent("a/b", b"x")
    with pytest.raises(ObjectAlreadyExists):
        wrapped.put_if_absent("a/b", b"y")


def test_stores_of_different_objects_still_do_not_share_keys(lake: Path, txn: TxnStore) -> None:
    (lake / "other").mkdir()
    a = two_phase((lake / "prod").as_uri(), txn)
    b = two_phase((lake / "other").as_uri(), txn)
    a.put_if_absent("db/wal/00000000000000000001.sst", b"a")
    b.put_if_absent("db/wal/00000000000000000001.sst", b"b")
    assert b.get("db/wal/00000000000000000001.sst").data == b"b"
    prodx = two_phase((lake / "prodx").as_uri(), txn)  # a sibling whose name extends 'prod'
    prodx.put_if_absent("db/wal/00000000000000000001.sst", b"c")
    assert [m.path for m in prodx.list("db")] == ["db/wal/00000000000000000001.sst"]


def test_pending_intents_are_seen_and_rolled_forward_through_the_other_url(
    lake: Path, txn: TxnStore
) -> None:
    """An intent inserted through one URL (its copy not done) is listed and read through the
    other, whose roll-forward finds the temporary object by its location."""
    prod = two_phase((lake / "prod").as_uri(), txn)
    whole = two_phase(lake.as_uri(), txn)
    source = temp_name(OBJ, b"pending")
    prod.inner.put(source, b"pending")
    key = whole.location.key  # absolute names: the row is the same from either store
    assert txn.insert_intent(whole.ns, key(f"prod/{OBJ}"), key(f"prod/{source}"), 7)

    def listed(store: TwoPhaseStore, prefix: str) -> list[str]:
        return [m.path for m in store.list(prefix) if not is_temp_name(m.path)]

    assert listed(whole, "prod/orders/manifest") == [f"prod/{OBJ}"]
    assert listed(prod, "orders/manifest") == [OBJ]
    assert whole.get(f"prod/{OBJ}").data == b"pending"  # rolled forward
    assert (lake / "prod" / OBJ).read_bytes() == b"pending"
    assert not any(is_temp_name(p.name) for p in (lake / "prod" / "orders" / "manifest").iterdir())
    intent = prod.txn.get_intent(prod.ns, key(f"prod/{OBJ}"))
    assert intent is not None and intent.committed


def test_boundary_cells_are_shared_by_both_urls(lake: Path, txn: TxnStore) -> None:
    prod = two_phase((lake / "prod").as_uri(), txn)
    whole = two_phase(lake.as_uri(), txn)
    a = BoundaryObject(prod, "orders/gc/manifest.boundary")
    b = BoundaryObject(whole, "prod/orders/gc/manifest.boundary")
    a.advance(5)
    assert b.read() == 5
    b.advance(9)
    assert a.read() == 9
    v = prod.head("orders/gc/manifest.boundary")
    whole.put("prod/orders/gc/manifest.boundary", b"10")
    with pytest.raises(PreconditionFailed):
        prod.put_if_match("orders/gc/manifest.boundary", b"11", ObjectVersion(v.e_tag, v.version))


# ---- GC under a prefixed store -------------------------------------------------------------------
def test_gc_deletes_the_records_of_a_prefixed_store(lake: Path, txn: TxnStore) -> None:
    """SlateDB RFC 0001, "Transactional Store Deletion" through a store with a prefix: the records of
    dead manifests go (even where the objects were deleted behind the wrapper's back), orphaned
    temporaries too, and the live manifest keeps its record."""
    prod = two_phase((lake / "prod").as_uri(), txn)
    ms = new_db(prod, "orders")
    commit(ms, 4)  # 1..5
    base = str((lake / "prod").resolve())[1:]
    assert txn.get_intent("file://", f"{base}/{ms.seq.path(1)}") is not None
    for i in (1, 2):
        prod.inner.delete(ms.seq.path(i))  # the objects go, their intents stay
    orphan = temp_name("orders/wal/00000000000000000009.sst", b"o")
    prod.inner.put(orphan, b"o")
    prod.temp_min_age_s = 0
    stats = run_gc_once(
        "orders",
        prod,
        GarbageCollectorOptions(min_age=timedelta(0)),
        now=lambda: time.time() + 5,
    )
    assert stats.two_phase is not None and not stats.two_phase.failed
    assert stats.two_phase.intents_deleted >= 2 and stats.two_phase.temps_deleted == 1
    for i in (1, 2, 3, 4):
        assert txn.get_intent("file://", f"{base}/{ms.seq.path(i)}") is None
    assert txn.get_intent("file://", f"{base}/{ms.seq.path(5)}") is not None


# ---- rows stored under the old keys --------------------------------------------------------------
def legacy_object(store: ObjectStore, old_ns: str, txn: TxnStore, path: str, data: bytes) -> None:
    """What the old code left: the object, and its committed intent keyed (URL, relative path)."""
    source = temp_name(path, data)
    store.put(path, data)
    assert txn.insert_intent(old_ns, path, source, len(data))
    assert txn.commit_intent(old_ns, path, source)


def test_rows_under_the_old_keys_move_and_keep_guarding_their_objects(
    lake: Path, txn: TxnStore
) -> None:
    raw = NoConditionalWrites(open_store((lake / "prod").as_uri()))
    old_ns = raw.url  # the old key: the wrapped store's URL
    legacy_object(raw, old_ns, txn, OBJ, b"old-winner")
    pending_path = "orders/wal/00000000000000000003.sst"
    source = temp_name(pending_path, b"pending")
    raw.put(source, b"pending")
    assert txn.insert_intent(old_ns, pending_path, source, 7)  # inserted, never copied
    txn.create_cell(old_ns, "orders/gc/manifest.boundary", b"4")

    whole = two_phase(lake.as_uri(), txn)  # the first open migrates every old row
    with pytest.raises(ObjectAlreadyExists):
        whole.put_if_absent(f"prod/{OBJ}", b"second")
    assert whole.get(f"prod/{OBJ}").data == b"old-winner"
    assert whole.get(f"prod/{pending_path}").data == b"pending"  # rolled forward from its temp
    assert BoundaryObject(whole, "prod/orders/gc/manifest.boundary").read() == 4
    assert txn.get_intent(old_ns, OBJ) is None
    assert txn.get_cell(old_ns, "orders/gc/manifest.boundary") is None
    rows, _ = txn.execute("select", "SELECT COUNT(*) FROM slatedb_intents WHERE ns = ?", (old_ns,))
    assert rows[0][0] == 0


def test_the_migration_runs_once_and_keeps_the_new_row_on_a_conflict(
    lake: Path, txn: TxnStore, caplog: pytest.LogCaptureFixture
) -> None:
    prod_raw = NoConditionalWrites(open_store((lake / "prod").as_uri()))
    old_ns = prod_raw.url
    # Both keys already hold the object's row (created through two URLs: the bug itself), and
    # a boundary cell exists under both keys with different values.
    legacy_object(prod_raw, old_ns, txn, OBJ, b"legacy")
    prefix = str((lake / "prod").resolve())[1:]
    assert txn.insert_intent("file://", f"{prefix}/{OBJ}", f"{prefix}/{OBJ}.new", 6)
    txn.create_cell(old_ns, "orders/gc/manifest.boundary", b"12")
    txn.create_cell("file://", f"{prefix}/orders/gc/manifest.boundary", b"7")
    with caplog.at_level("WARNING"):
        first = two_phase(lake.as_uri(), txn)
    assert "conflicts" in caplog.text
    kept = txn.get_intent("file://", f"{prefix}/{OBJ}")
    assert kept is not None and kept.source == f"{prefix}/{OBJ}.new"
    assert BoundaryObject(first, "prod/orders/gc/manifest.boundary").read() == 12  # the larger
    before = txn.counters.snapshot()["select"]
    two_phase((lake / "prod").as_uri(), txn)
    assert txn.counters.snapshot()["select"] - before == 1  # only the marker is read


# ---- S3: bucket + prefix, and the location of every URL shape -------------------------------------
@pytest.mark.s3
def test_s3_bucket_and_prefix_split_anywhere_is_one_object(
    request: pytest.FixtureRequest, txn: TxnStore
) -> None:
    moto = request.getfixturevalue("moto_s3")
    bucket = moto.new_bucket()
    deep = two_phase(moto.url(bucket, "lake/prod/"), txn)
    shallow = two_phase(moto.url(bucket, "lake"), txn)
    root = two_phase(moto.url(bucket), txn)
    deep.put_if_absent(OBJ, b"first")
    for store, path in ((shallow, f"prod/{OBJ}"), (root, f"lake/prod/{OBJ}")):
        with pytest.raises(ObjectAlreadyExists):
            store.put_if_absent(path, b"second")
        assert store.get(path).data == b"first"


@pytest.mark.parametrize(
    ("url", "root", "base"),
    [
        ("s3://bucket/lake/prod", "s3://bucket", "lake/prod"),
        ("s3://Bucket/lake/prod/", "s3://bucket", "lake/prod"),
        ("s3://bucket", "s3://bucket", ""),
        ("faulty+nocas+s3://bucket/a?b", "s3://bucket", "a?b"),  # a prefix is shown unquoted
        ("file:///data/my%20lake/", "file://", "data/my lake"),
        ("file://", "file://", ""),
        ("memory://name", "memory://name", ""),
        ("nocas+memory://name", "memory://name", ""),
        ("ns", "ns", ""),
    ],
)
def test_store_location_of_each_url_shape(url: str, root: str, base: str) -> None:
    from slatedb_core.store.location import store_location

    loc = store_location(url)
    assert (loc.root, loc.base) == (root, base)
    assert store_location(loc.root) == type(loc)(root)  # a root is a fixed point (the migration)
    assert loc.rel(loc.key("x/y")) == "x/y"
