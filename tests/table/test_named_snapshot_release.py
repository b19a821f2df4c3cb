"""Releasing and re-taking a named table snapshot (slatedb_core/table/named_snapshots.py): a
release leaves a concurrent re-take alone, a sealed shard's snapshot is releasable, a taker
stalled past the sweep age records a live snapshot, and names work on two-phase CAS."""

from __future__ import annotations

import threading
import time
import types
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

import slatedb_core.table.named_snapshots as named_mod
import slatedb_core.table.rescale as rescale
from slatedb_core.checkpoints import list_checkpoints
from slatedb_core.layout import snapshot_record_path
from slatedb_core.store.nocas import NoConditionalWrites
from slatedb_core.store.objectstore import ObjectStore
from slatedb_core.store.twophase import open_two_phase
from slatedb_core.store.url import open_store
from slatedb_core.table import Table
from slatedb_core.table.snapshot import TableSnapshot
from slatedb_core.testing import FaultyStore
from tests.table.conftest import OPTS, fill

NAME = "end-of-day"


def live_checkpoints(store: ObjectStore, snap: TableSnapshot) -> set[uuid.UUID]:
    """The checkpoints of ``snap`` that still exist in their shard databases."""
    out = set()
    for s, cid in zip(snap.shards, snap.checkpoints, strict=True):
        if any(c.id == cid for c in list_checkpoints(s.db_path, store)):
            out.add(cid)
    return out


# ---- named snapshots ---------------------------------------------------------------------------
def test_releasing_an_old_named_snapshot_leaves_a_concurrent_retake_alone(
    mem: ObjectStore,
) -> None:
    """Review finding (fixed): release_snapshot(A) checked 'does the name still find A?' and
    then deleted the name unconditionally, so a re-take of the name by another process between
    the check and the delete (B, reported as success) was tombstoned and its checkpoints
    released. The tombstone is now committed only on a version that holds A.

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as b:
        fill(b, {b"a": b"1", b"x": b"2"}, flush=True)
        a_snap = b.snapshot(None, name=NAME)
        record = snapshot_record_path("t", NAME, 1)
        # process 1 reads the record (the name finds A) and stalls right after
        pause = faulty.pause("check", "get", record, when="after")
        with Table.open("t", faulty, OPTS) as p1:
            errors: list[BaseException] = []

            def release() -> None:
                try:
                    p1.release_snapshot(a_snap)
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            th = threading.Thread(target=release)
            th.start()
            assert pause.wait_reached()
            b_snap = b.snapshot(None, name=NAME)  # process 2 re-takes the name: success
            pause.release()
            th.join()
            assert not errors
        # B was taken after A and nobody released B: the name must find it, alive
        assert b.named_snapshot(NAME) == b_snap
        assert live_checkpoints(mem, b_snap) == set(b_snap.checkpoints)


def test_releasing_a_named_snapshot_of_a_sealed_shard_deletes_its_name(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding (fixed): a snapshot taken while a shard is sealed (a split that crashed
    after its seal, waiting for resume()) carries Shard(sealed=True); its record lost the seal
    flag, so ``named_snapshot(name) == snapshot`` was False and Table.release_snapshot released
    the checkpoints but kept the name. Snapshots are now told apart by checkpoint ids (and the
    record keeps the flag).

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    with Table.create("t", mem, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"x": b"2"}, flush=True)

        def crash(*_a: object, **_k: object) -> None:
            raise RuntimeError("split crashed after its seal")

        monkeypatch.setattr(rescale, "_run", crash)
        with pytest.raises(RuntimeError):
            t.split(0, b"c")
        monkeypatch.undo()
        t.refresh()
        assert any(s.sealed for s in t.shards)
        snap = t.snapshot(None, name=NAME)
        assert t.named_snapshot(NAME) == snap  # the seal flag survives the record
        t.release_snapshot(snap)
        assert live_checkpoints(mem, snap) == set()
        # the snapshot was released: its name must be gone with it
        assert t.named_snapshot(NAME) is None
        assert t.snapshot_names() == []


def test_a_taker_stalled_past_the_sweep_age_takes_again_and_records_a_live_snapshot(
    mem: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review finding (fixed): taker A takes its checkpoints, then stalls (GC pause, VM suspend)
    before writing the record. Taker B, running more than SWEEP_MIN_AGE later, records its own
    snapshot and sweeps A's checkpoints as 'leftovers of a dead taker'. A wakes and replaces
    B's record (releasing B's checkpoints); it used to report success with a record whose every
    checkpoint was gone. Now a taker whose version is still the latest checks its checkpoints
    after the commit (and one that took half SWEEP_MIN_AGE or longer takes again anyway).

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    faulty = FaultyStore(mem)
    with Table.create("t", mem, [b"m"], OPTS) as b:
        fill(b, {b"a": b"1", b"x": b"2"}, flush=True)
        b.snapshot(None, name=NAME)
        record = snapshot_record_path("t", NAME, 1)
        # A has taken its checkpoints; it stalls before it reads the record to replace it
        pause = faulty.pause("a-stalls", "get", record, when="before")
        result: list[object] = []
        with Table.open("t", faulty, OPTS) as a:
            th = threading.Thread(target=lambda: result.append(a.snapshot(None, name=NAME)))
            th.start()
            assert pause.wait_reached()
            # B runs two hours later (only the snapshot module's clock moves)
            later = types.SimpleNamespace(time=lambda: time.time() + 7200)
            monkeypatch.setattr(named_mod, "time", later)
            b.snapshot(None, name=NAME)
            monkeypatch.undo()
            pause.release()
            th.join()
        assert len(result) == 1
        final = b.named_snapshot(NAME)
        assert final is not None
        # whatever the name holds must be alive
        assert live_checkpoints(mem, final) == set(final.checkpoints)


def test_a_named_snapshot_is_retaken_and_deleted_on_a_two_phase_store(
    tmp_path: Path,
) -> None:
    """Review finding (fixed): the snapshot record was replaced with put_if_match, which
    two-phase CAS (docs/two-phase-cas.md: the store for object stores without conditional
    writes) refuses on any object but a GC boundary cell, so a name, once taken, could never be
    taken again or deleted. The record's versions are now created if absent, which every store
    supports, and collected behind a boundary cell.

    Found by the adversarial review of the regrouping, issue 20 (was test_review_regroup.py)."""
    tp = open_two_phase(
        NoConditionalWrites(open_store((tmp_path / "store").as_uri())),
        f"sqlite:///{tmp_path / 'txn.db'}",
    )
    with Table.create("t", tp, [b"m"], OPTS) as t:
        fill(t, {b"a": b"1", b"x": b"2"}, flush=True)
        t.split(0, b"c")  # rescaling works on a two-phase store
        first = t.snapshot(None, name=NAME)
        second = t.snapshot(None, name=NAME)  # re-taking the name replaces it
        assert t.named_snapshot(NAME) == second
        assert live_checkpoints(tp, first) == set()
        assert t.delete_snapshot(NAME) == second
        assert t.named_snapshot(NAME) is None and live_checkpoints(tp, second) == set()
        third = t.snapshot(None, name=NAME)
        assert t.collect_garbage(min_age=timedelta(0)).snapshot_records == 3
        assert t.named_snapshot(NAME) == third
