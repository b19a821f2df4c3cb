"""Adversarial review of commits 2fb932a (overwrite step 1 looks before it opens a writer and
again after being fenced; a rescale run whose fence meets a destroyed source reports the op's
outcome) and aaabfcd (store URLs' credentials kept out of messages), docs/overwrite.md. Each
test states the guarantee it checks; they held unless the docstring names a fix."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from slatedb_core.compactor.compactor import run_compaction_once
from slatedb_core.errors import DatabaseDestroyed, Fenced, InvalidArgument, SlateDBError
from slatedb_core.gc.service import run_gc_once
from slatedb_core.lifecycle.destroy import destroy
from slatedb_core.manifest.model import AppVersion
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.options import CompactorOptions, GarbageCollectorOptions
from slatedb_core.store.faults import FaultyStore
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.redact import redact_url
from slatedb_core.store.txn import open_txn_store
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.ingest import WRITTEN
from slatedb_core.table.overwrite import commit_overwrite, plan_overwrite
from slatedb_core.table.shardmap import ShardMapStore
from tests.test_review_write_side import (
    NEW,
    OPTS,
    assert_map_is_live,
    contents,
    mem,
    old_table,
    stage,
)

__all__ = ["mem"]  # the fixture, re-exported for pytest


@pytest.mark.parametrize("stall", ["01", "02"])
def test_a_stale_commit_attempt_does_not_rebuild_a_target_emptied_after_the_swap(
    mem: ObjectStore,
    stall: str,
) -> None:
    """Attempt B of a commit (a driver's retry) reads the map before any attempt sealed, then
    stalls creating target 0 (manifest 01: before step 1 looks at it) or opening its writer
    (manifest 02: after it looked, found it empty and the map fresh). Attempt A commits the
    whole overwrite. A user deletes every row of the new shard 0 and a compaction drops the
    tombstones: its manifest holds nothing. B then goes on: the target "holds no data", so B
    used to open a writer on the live shard (fencing its writer) and ingest the staged SSTs
    again: the deleted rows came back, and B reported WRITTEN. Fix: step 1 builds a target only
    if the map has the overwrite neither sealed nor committed, read before opening the writer
    and again after it fenced the target (docs/overwrite.md, step 1)."""
    faulty = FaultyStore(mem)
    with old_table(mem):
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        target = plan.shards[0].db_path
        pp = faulty.pause("create", "put_if_absent", f"{target}/manifest/*{stall}.manifest")
        out: list[object] = []

        def run() -> None:
            try:
                out.append([s.status for s in commit_overwrite(faulty, plan, "r", staged)])
            except SlateDBError as e:
                out.append(e)

        th = threading.Thread(target=run)
        th.start()
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        shard0 = {k: v for k, v in NEW.items() if k < b"g"}
        with Table.open("t", mem, OPTS) as t, t.writer(0) as db:
            for k in shard0:
                db.delete(k)
            db.flush_memtable()
        run_compaction_once(target, mem, CompactorOptions(l0_trigger=1))
        m = ManifestStore(mem, target).read_latest().manifest
        assert not (m.l0 or m.compacted or m.transactions)  # the premise: nothing left
        pp.release()
        th.join(60)
        assert not th.is_alive()
        assert out == [[WRITTEN] * 3]
        want = {k: v for k, v in NEW.items() if k not in shard0}
        assert contents(mem) == want
        assert_map_is_live(mem)
        with Table.open("t", mem, OPTS) as t, t.writer(0) as db:
            db.put(b"b0", b"after")  # the shard takes writes


SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"


@pytest.mark.parametrize(
    "url",
    [
        f"s3://AKIAEXAMPLE:{SECRET}@bucket/p",  # credentials as userinfo: the bucket echoed
        f"s3://AKIAEXAMPLE:{SECRET}@/p",
        f"my_s3://AKIAEXAMPLE:{SECRET}@bucket",  # not a valid scheme: urlsplit finds no netloc
        f"s3:/AKIAEXAMPLE:{SECRET}@bucket/p",  # one slash short
        f"s3:AKIAEXAMPLE:{SECRET}@bucket",
    ],
)
def test_credentials_in_a_misspelt_store_url_stay_out_of_the_error(url: str) -> None:
    """aaabfcd masked the password of a URL urlsplit parses; fix: also in the bucket name the
    s3 error echoes, and in URLs whose scheme or slashes are wrong (no netloc parsed)."""
    with pytest.raises(SlateDBError) as info:
        open_store(url)
    assert SECRET not in str(info.value)
    assert SECRET not in redact_url(url)


@pytest.mark.parametrize("url", [f"post_gres://u:{SECRET}@h/db", f"postgresql:/u:{SECRET}@h/db"])
def test_credentials_in_a_misspelt_txn_url_stay_out_of_the_error(url: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        open_txn_store(url)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize("url", [123, None, b"s3://u:pw@bucket", ["s3://x"]])
def test_redact_url_never_raises_and_a_wrong_type_stays_invalid_argument(url: object) -> None:
    """redact_url must not raise: open_txn_store(123) raised AttributeError (from urlsplit
    inside redact_url) instead of InvalidArgument after aaabfcd. Fix: non-str input masked."""
    assert "pw" not in redact_url(url)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        open_txn_store(url)  # type: ignore[arg-type]


GC_NOW = GarbageCollectorOptions(min_age=timedelta(0), db_delete_grace=timedelta(0))


@pytest.mark.parametrize("where", ["fence", "carry"])
def test_a_stalled_run_whose_sources_were_retired_and_collected_reports_the_swap(
    mem: ObjectStore, where: str
) -> None:
    """Attempt A of a commit seals, then stalls before fencing the first source ("fence") or
    after fencing them all, reading their records (step 4, "carry"). Attempt B runs the op to
    the end; the database GC (db_delete_grace 0) then deletes the retired sources, leaving their
    tombstones. A must report WRITTEN, the overwrite committed."""
    faulty = FaultyStore(mem)
    with old_table(mem) as t:
        plan = plan_overwrite("t", mem, txn=AppVersion("job", 4))
        staged = stage(mem, plan, "r", NEW)
        sources = [s.db_path for s in t.shards]
        if where == "fence":
            pp = faulty.pause("p", "put_if_absent", f"{sources[0]}/manifest/*")
        else:  # once sealed, the first read of a target is step 4's, after every fence
            sealed = faulty.pause("seal", "put_if_absent", "t/shardmap/*", when="after")
        out: list[object] = []

        def run() -> None:
            try:
                out.append([s.status for s in commit_overwrite(faulty, plan, "r", staged)])
            except SlateDBError as e:
                out.append(e)

        th = threading.Thread(target=run)
        th.start()
        if where == "carry":
            assert sealed.wait_reached(30)
            pp = faulty.pause("p", "get", f"{plan.shards[0].db_path}/*")
            sealed.release()
        assert pp.wait_reached(30)
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        for path in sources:
            run_gc_once(path, mem, GC_NOW)
            with pytest.raises(DatabaseDestroyed):
                ManifestStore(mem, path).read_latest()
        pp.release()
        th.join(60)
        assert not th.is_alive()
        assert out == [[WRITTEN] * 3]
        assert contents(mem) == NEW
        assert_map_is_live(mem)


def test_a_pending_split_whose_source_someone_else_destroyed_is_not_reported_done(
    mem: ObjectStore,
) -> None:
    """Held: a split sealed, then its run died before cloning; an operator destroys the source
    shard's database (soft). Table.resume() meets the destroyed source,
    re-reads the map, finds the op still pending and raises DatabaseDestroyed: it does not
    report the split done, and the map keeps the op (nothing claims the split happened)."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as t0, t0.writer(0) as db:
        db.put(b"a", b"1")
    t = Table.open("t", faulty, OPTS)
    faulty.fail_next("put_if_absent", "t/shards/0000000003/manifest/*", times=50)
    with pytest.raises(SlateDBError):
        t.split(0, b"f")
    faulty.clear_rules()
    t.close()
    source = ShardMapStore(mem, "t").read_latest().shards[0].db_path
    destroy(source, mem, soft=True)
    with Table.open("t", mem, OPTS) as other:
        with pytest.raises(DatabaseDestroyed):
            other.resume()
        m = ShardMapStore(mem, "t").read_latest()
        assert m.pending and len(m.shards) == 2 and m.shards[0].db_path == source


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://h:99999",  # port out of range: a Rust panic (BaseException) at the first
        "http://h:abc",  # request, past every `except Exception`
        "http://:80",  # no host: the same panic
        "http://h%20x:1",  # a character no host has: the same panic
        "http://[::1",  # urlsplit's ValueError escaped open_store untyped
        f"http://u:{SECRET}@127.0.0.1:1",  # userinfo: every request error showed it (GET http://u:...)
    ],
)
def test_a_bad_s3_endpoint_is_refused_when_the_store_is_opened(endpoint: str) -> None:
    """Fix: open_store checks the endpoint's host and port and refuses credentials in it
    (they go in access_key_id / secret_access_key), InvalidArgument with the URL redacted."""
    url = (
        f"s3://bucket/p?endpoint={endpoint}&allow_http=true&access_key_id=a"
        f"&secret_access_key={SECRET}"
    )
    with pytest.raises(InvalidArgument) as info:
        open_store(url)
    assert SECRET not in str(info.value)


def test_a_good_s3_endpoint_is_accepted() -> None:
    for ep in (
        "http://127.0.0.1:8333",
        "https://s3.eu-west-1.amazonaws.com",
        "http://[::1]:9000",
        "http://seaweed-s3.local:8333/",
    ):
        assert open_store(f"s3://bucket/p?endpoint={ep}&allow_http=true").url == "s3://bucket/p"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}%ZZ@127.0.0.1:1/db",  # libpq quoted the bad %-token: the password
        f"postgresql://u@127.0.0.1:1/db?password={SECRET}%ZZ",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode=bogus",
    ],
)
def test_a_postgres_driver_error_does_not_show_the_password(url: str) -> None:
    """Fix: the driver's message is scrubbed of the URL's password and query values, and not
    chained as the cause (a traceback in a log or Dagster's event log showed it)."""
    with pytest.raises(SlateDBError) as info:
        open_txn_store(url)
    assert SECRET not in str(info.value)
    assert info.value.__cause__ is None or SECRET not in str(info.value.__cause__)


def test_a_postgres_url_with_a_bad_port_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument) as info:  # was urlsplit's ValueError
        open_txn_store(f"postgresql://u:{SECRET}@h:99999/db")
    assert SECRET not in str(info.value)


def test_racing_attempts_of_one_commit_ingest_each_target_once(mem: ObjectStore) -> None:
    """Held: four attempts of one commit at once (step 1 retried after fences, looking before
    and after opening each target's writer). None reports a wrong outcome, and every target's L0
    holds its staged SSTs once (the ingest commits under the writer's fence, and a writer
    opened after another attempt's ingest sees its data)."""
    with old_table(mem):
        plan = plan_overwrite("t", mem)
        staged = stage(mem, plan, "r", NEW)
        outs: list[object] = []

        def run() -> None:
            try:
                outs.append([s.status for s in commit_overwrite(mem, plan, "r", staged)])
            except SlateDBError as e:
                outs.append(e)

        threads = [threading.Thread(target=run) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        # runs of one pending op may fence each other out (docs/overwrite.md, "What is not
        # covered"): a failure, never a wrong outcome
        assert all(o == [WRITTEN] * 3 or isinstance(o, Fenced) for o in outs), outs
        assert [s.status for s in commit_overwrite(mem, plan, "r", staged)] == [WRITTEN] * 3
        assert_map_is_live(mem)
        for target in plan.shards:
            m = ManifestStore(mem, target.db_path).read_latest().manifest
            assert len(m.l0) == len(staged.get(target.index, [])) and not m.compacted
        assert contents(mem) == NEW
