"""The registry of rewrite paths (issue 38, item 6: "a test enumerates them and runs each over SSTs
holding TTL rows, merge operands and snapshot-visible versions"): EVERY path of
:data:`slatedb_core.lsm.rewrites.REWRITE_PATHS` is run, through its public entry point, over a
database SlateDB 0.17 wrote (:mod:`tests.lsm.slatedb_rows`, on the local filesystem and on the S3
server) while a SlateDB snapshot is live, and its output SSTs must keep what the path owes: each
key's value as SlateDB's merge operator resolves it, every live row's ``expire_ts`` and
``create_ts``, the expired row expired (or, in a WAL copy, its ``expire_ts`` kept), the versions
the snapshot reads where the path rewrites the database in place. A path that drops versions
must decide it through ``retain``; and a module that writes SSTs without being registered fails
the last tests, so the next path cannot forget the row model.

Before the change: the ingest paths refused the operands (UnsupportedFeature), and the registry
did not exist (nothing noticed a new path)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from slatedb_core.keys import KeyRange
from slatedb_core.lsm.merge_operator import resolve, string_append
from slatedb_core.lsm.rewrites import (
    ENCODERS,
    NOW,
    REWRITE_PATHS,
    RewriteInput,
    RewritePath,
    driver_of,
    registered_modules,
)
from slatedb_core.lsm.row_model import KIND_VALUE, Version
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.url import open_store
from slatedb_core.table.rewrite_drivers import l0_paths
from tests.conftest import MotoS3
from tests.interop.oracle import Oracle, s3_config
from tests.lsm.slatedb_rows import AT_SNAPSHOT, LATEST, OUTSIDE, RichDb, rich_db, wait_dead

REPO = Path(__file__).resolve().parents[2]
CLONE_RANGE = KeyRange(b"a", OUTSIDE)
"""What a projected clone keeps: every key but :data:`OUTSIDE`."""


def _db(path: RewritePath) -> str:
    return "db-" + path.name.replace(" ", "-")


@pytest.fixture(scope="module", params=["local", "s3"])
def rich(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ObjectStore, dict[str, RichDb]]]:
    """One SlateDB database per registered path, written at once (SlateDB's writers stay open,
    holding their snapshots), after t-dead has expired."""
    root = tmp_path_factory.mktemp("rewrites")
    if request.param == "local":
        oracle, url = Oracle(root), root.as_uri()
    else:
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        bucket = moto.new_bucket()
        oracle, url = Oracle(root, s3_config(moto.endpoint, bucket)), moto.url(bucket)
    try:
        with ExitStack() as stack:
            dbs = {p.name: stack.enter_context(rich_db(oracle, _db(p))) for p in REWRITE_PATHS}
            wait_dead(max(dbs.values(), key=lambda d: d.t_dead_expire_ts))
            yield open_store(url), dbs
    finally:
        oracle.close()


def _versions(store: ObjectStore, paths: tuple[str, ...]) -> dict[bytes, list[Version]]:
    """Every row of the SSTs, per key, newest first (by seq)."""
    out: dict[bytes, list[Version]] = {}
    for path in paths:
        for r in SstReader.open(store, path).read_all(timestamps=True).to_pylist():
            value = None if r["kind"] == 1 else r["value"]
            v = Version(r["seq"], r["kind"], value, r["expire_ts"], r["create_ts"])
            out.setdefault(r["key"], []).append(v)
    for vs in out.values():
        vs.sort(key=lambda v: -v.seq)
    return out


@pytest.mark.slatedb
@pytest.mark.parametrize("path", REWRITE_PATHS, ids=[p.name for p in REWRITE_PATHS])
def test_each_rewrite_path_keeps_the_whole_row(
    rich: tuple[ObjectStore, dict[str, RichDb]], path: RewritePath
) -> None:
    store, dbs = rich
    db = dbs[path.name]
    source = _versions(store, l0_paths(store, _db(path)))
    out = driver_of(path)(
        RewriteInput(store, _db(path), f"scratch-{_db(path)}", "string_append", CLONE_RANGE)
    )
    assert out.ssts, f"{path.name} wrote nothing"
    got = _versions(store, out.ssts)
    covered = out.key_range or KeyRange()
    for key, want in LATEST.items():
        if not covered.contains(key):
            assert key not in got
            continue
        vs = got.get(key, [])
        if key == b"t-dead":
            if path.clock == NOW:  # a tombstone now, or gone (the last run drops it)
                assert all(v.kind != KIND_VALUE for v in vs), vs
            else:  # not expired by the path's clock: carried with its expiry
                # (SlateDB's compaction clock is the last L0 flush's tick, before it expired)
                assert [(v.value, v.expire_ts) for v in vs] == [(b"D", db.t_dead_expire_ts)]
            continue
        assert resolve(key, vs, string_append) == want, (path.name, key, vs)
    # the live TTL row keeps its expiry and its creation time
    live = got[b"t-live"][0]
    assert (live.kind, live.expire_ts) == (KIND_VALUE, db.t_live_expire_ts)
    assert live.create_ts == source[b"t-live"][0].create_ts is not None
    # the operand with an expiry of its own is not folded onto the base
    assert any(v.expire_ts == got[b"mt"][0].expire_ts is not None for v in got[b"mt"])
    if path.keeps_snapshot_versions:
        for key, want in AT_SNAPSHOT.items():
            seen = [v for v in got[key] if v.seq <= db.snapshot_seq]
            assert resolve(key, seen, string_append) == want, (path.name, key, got[key])


# ---- the registry is complete -----------------------------------------------------------------


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


@functools.cache
def _files() -> dict[str, Path]:
    """Every module of slatedb_core and spark_jobs, by name."""
    return {
        _module_name(file): file
        for package in ("slatedb_core", "spark_jobs")
        for file in sorted((REPO / package).rglob("*.py"))
    }


@functools.cache
def _tree(name: str) -> ast.Module:
    file = _files()[name]
    return ast.parse(file.read_text(), str(file))


def _sources(words: frozenset[str] = frozenset()) -> Iterator[tuple[str, ast.Module]]:
    """The modules, parsed; with ``words``, only those whose text holds one of them (a module
    that does not spell a name cannot use it)."""
    for name, file in _files().items():
        if not words or any(w in file.read_text() for w in words):
            yield name, _tree(name)


def _uses(tree: ast.Module, names: frozenset[str]) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found |= {a.name for a in node.names if a.name in names}
    return found


def _unregistered(sources: Iterable[tuple[str, ast.Module]]) -> dict[str, list[str]]:
    """Modules of ``sources`` using an SST encoder that the registry does not list."""
    registered = registered_modules()
    return {
        name: sorted(used)
        for name, tree in sources
        if not name.startswith("slatedb_core.sst.")
        and name != "slatedb_core.lsm.rewrites"
        and name not in registered
        and (used := _uses(tree, ENCODERS))
    }


def test_a_new_path_writing_ssts_is_caught() -> None:
    """The check itself: a module that encodes SSTs, by a name imported or an attribute, and is
    not registered is reported; one that only reads SSTs is not."""
    new_path = (
        "from slatedb_core.sst import encode_sst\ndef f(rows):\n    return encode_sst(rows)\n"
    )
    by_attr = "import slatedb_core.sst.builder as b\nx = b.SstStreamEncoder()\n"
    reader = "from slatedb_core.sst import SstReader\n"
    found = _unregistered(
        [
            ("slatedb_core.writer.new_path", ast.parse(new_path)),
            ("spark_jobs.new_job", ast.parse(by_attr)),
            ("slatedb_core.reader.new_reader", ast.parse(reader)),
        ]
    )
    assert found == {
        "slatedb_core.writer.new_path": ["encode_sst"],
        "spark_jobs.new_job": ["SstStreamEncoder"],
    }


def test_every_module_writing_ssts_is_registered() -> None:
    """A module that calls an SST encoder (or writes SST objects) is a rewrite path or a writer
    of new rows, listed in slatedb_core/lsm/rewrites.py; ``slatedb_core.sst`` defines them."""
    registered = registered_modules()
    unregistered = _unregistered(_sources(ENCODERS))
    assert not unregistered, (
        f"modules writing SSTs that slatedb_core/lsm/rewrites.py does not list: {unregistered}; "
        "register each (a RewritePath with a driver, or an SstWriter) so that its rows are "
        "checked against the row model"
    )
    known = set(_files())
    assert registered <= known, f"registered modules that do not exist: {registered - known}"


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _reachable(start: Iterable[str]) -> set[str]:
    """The repository's modules ``start`` imports, transitively (itself included)."""
    files = _files()
    seen: set[str] = set()
    todo = [m for m in start if m in files]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in _imports(_tree(name)):
            for candidate in (imported, f"{imported}.__init__"):
                if candidate in files and candidate not in seen:
                    todo.append(candidate)
    return seen


def test_each_path_decides_its_drops_through_retain() -> None:
    """The one place deciding what a rewrite may drop is lsm/retention.py: the module a path
    names calls it, and the path's modules import it (directly or not)."""
    retains = frozenset({"retain", "retain_stream", "retain_ordered"})
    for path in REWRITE_PATHS:
        if path.decides_in is None:
            continue
        used = _uses(_tree(path.decides_in), retains)
        assert used, f"{path.name}: {path.decides_in} does not call retain"
        assert path.decides_in in _reachable(path.modules), path.name
