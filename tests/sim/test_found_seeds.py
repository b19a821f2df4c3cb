"""Schedules in which the simulation found, by itself, the holes an outside review found in
RELIABILITY.md (items 1, 2, 3, 5 and 7; 8 on the way), pinned so CI replays them. Each failed on b693a53
with the message quoted (``python -m tests.sim.run --seed N`` replays it with its trace) and
passes with the fixes. Each test also checks that the schedule still does what found the hole, so
that a change of the harness that reshuffles schedules shows here instead of silently pinning
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.sim.harness import Simulation
from tests.sim.state import Profile


@dataclass(frozen=True)
class Found:
    seed: int
    item: int
    profile: Profile
    did: tuple[str, ...]
    """Outcome counters (prefixes) the schedule must still hit: what found the hole."""
    on_b693a53: str


FOUND = [
    Found(
        637,
        1,
        Profile("soft", False),
        ("pause:after put_if_absent db/compacted/*", "stalled_bulk_ingest:", "gc_destroyed:ok"),
        "stalled_bulk_ingest reported success after creating db/manifest/00000000000000000003"
        ".manifest in the destroyed and collected database 'db': the path came back to life",
    ),
    Found(
        564,
        1,
        Profile("soft", False),
        ("pause:after put_if_absent db/manifest/*", "stalled_checkpoint:", "gc_destroyed:ok"),
        "stalled_checkpoint reported success after creating db/manifest/00000000000000000004"
        ".manifest in the destroyed and collected database 'db': the path came back to life",
    ),
    Found(
        423,
        2,
        Profile("none", False),
        ("pause:after put_if_absent db/compacted/*", "stalled_bulk_ingest:", "stalled_gc:ok"),
        "manifest 8 names missing SST db/compacted/<ULID>.sst",
    ),
    Found(
        402,
        2,
        Profile("soft", False),
        ("pause:after put_if_absent db/manifest/*", "stalled_bulk_ingest:", "gc:ok"),
        "manifest 11 names missing SST db/compacted/<ULID>.sst",
    ),
    # seed 415 found it; 406 did the same steps while issue 38's WAL-store check (a LIST at
    # writer open) moved 415's schedule, and 415 did them again after later opens added
    # requests (b7031bc re-reads the manifest the bump lands on; 1197fee LISTs at a create);
    # 406 does them again since an explicit flush commits one manifest update, not two
    # (issue 42, goal 2)
    Found(
        406,
        3,
        Profile("none", False),
        ("pause:after put_if_absent db/manifest/*", "stalled_bulk_ingest:", "gc:ok"),
        "stalled_bulk_ingest raised InvalidArgument on valid input (a committed change applied "
        "again?): manifest lists SST <ULID> twice in ssts",
    ),
    Found(
        103,
        3,
        Profile("none", False),
        ("pause:before get db/gc/manifest.boundary", "stalled_checkpoint_delete:", "gc:ok"),
        "the only delete of checkpoint <UUID> raised CheckpointNotFound: checkpoint not found",
    ),
    Found(
        730,
        3,
        Profile("none", True),
        ("pause:after put_if_absent db/manifest/*", "stalled_reader_open:", "gc:ok"),
        "committed manifest db/manifest/00000000000000000007.manifest lists checkpoint <UUID> "
        "twice (a change applied twice)",
    ),
    # seed 616 found it; 514 does the same steps since opens added requests (b7031bc,
    # 1197fee) and moved 616's schedule
    Found(
        514,
        5,
        Profile("none", True),
        ("damage:delete_sst", "gc:ok"),
        "latest state (after damage at rest): b'acct0' = None, expected one of [b'1:100'] "
        "(acknowledged write lost or stale)",
    ),
    Found(
        767,
        7,
        Profile("none", True),
        ("damage:delete_wal",),
        "writer w2 after damage at rest: b'k3' = None, expected one of [b'1:xxx...'] "
        "(acknowledged write lost or stale)",
    ),
    Found(
        501,
        7,
        Profile("none", True),
        ("damage:delete_wal",),
        "final writer: state is not a prefix of the write history: {...}",
    ),
    # found by the 10,000-schedule campaign on the fixed code (5c6e3b9): a zombie's void
    # manifest in a destroyed, collected path was served by a fresh DbReader (its own writer
    # checkpoint pinned it, so it was not deleted either); passes since try_read_latest ignores
    # a latest at or behind a tombstone
    Found(
        800391,
        1,
        Profile("soft", False),
        (
            "pause:before get db/gc/manifest.boundary",
            "gc_destroyed:ok",
            "DbReader.open_destroyed:ok",
        ),
        "destroyed database 'db' came back: a fresh reader opened it at manifest 9 and reads SST "
        "missing under the reader",
    ),
    Found(
        805188,
        1,
        Profile("soft", False),
        ("gc_destroyed:ok", "DbReader.open_destroyed:ok"),
        "destroyed database 'db' came back: a fresh reader opened it at manifest 3 and reads "
        "{b'acct0': None, ...}",
    ),
    # found by the campaign on 4be7c4a: a projected clone kept its parent's next WAL id past
    # the SSTs it copied, leaving a gap that stopped every reader's replay of the clone
    Found(
        900032,
        7,
        Profile("none", False),
        ("clone:ok", "union_prepare:ok"),
        "clone2: WAL ids above the boundary 0 have holes beyond a window of 1 parallel "
        "writes: [1, 2, 4]",
    ),
    # not asked of the harness, found on the way: a fenced writer's close() returned normally
    # (found by seed 62; 188 since the simulation checks WAL creates without the boundary
    # lease's background read, which moved the seeded faults: issue 41, item 2)
    Found(
        188,
        8,
        Profile("none", False),
        ("close:Fenced",),
        "close of w1 returned normally though the writer had failed (Fenced('writer fenced: our "
        "epoch 1 is older than the current epoch 2')): what it buffered was dropped without a "
        "word",
    ),
]


@pytest.mark.parametrize("found", FOUND, ids=[f"item{f.item}-seed{f.seed}" for f in FOUND])
def test_schedule_that_found_an_issue_19_hole_runs_clean(found: Found) -> None:
    sim = Simulation(found.seed)
    assert sim.profile == found.profile
    figures = sim.run()
    for prefix in found.did:
        assert any(k.startswith(prefix) and n for k, n in figures.outcomes.items()), (
            f"seed {found.seed} no longer does {prefix!r}: it stopped pinning item {found.item}"
        )
