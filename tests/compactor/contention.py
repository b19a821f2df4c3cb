"""A tool outside the compactor protocol that changes a compaction's sources before each commit.

Issue 38 (follow-up): a compaction pass that loses every race must not report "nothing to compact".
The racer is real: a store wrapper (:class:`~slatedb_core.testing.FaultyStore`, no rules)
that, just before each manifest write of the process using it (after the first: the compactor's
epoch bump), lets "another tool" rewrite the oldest L0 view under a new view id through
:class:`ManifestStore` on the same store: the data is unchanged, but the compaction's planned
sources are no longer in the manifest, so its commit raises ``CompactionSourceChanged``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import threading

from ulid import ULID

from slatedb_core.manifest.model import Manifest
from slatedb_core.manifest.store import ManifestStore
from slatedb_core.store.objectstore import ObjectStore, ObjectVersion
from slatedb_core.store.url import open_store
from slatedb_core.testing import FaultyStore


def review_oldest_l0(m: Manifest) -> Manifest:
    """``m`` with its oldest L0 view replaced by a view of the same SST under a new view id."""
    if not m.l0:
        return m
    oldest = dataclasses.replace(m.l0[-1], view_id=ULID())
    return dataclasses.replace(m, l0=(*m.l0[:-1], oldest))


class SourceEditingStore(FaultyStore):
    """The store of a compactor whose every commit (after ``skip_writes`` manifest writes) is
    preceded by another tool's edit of the oldest L0 view, while ``edits_left`` lasts."""

    def __init__(
        self, inner: ObjectStore, db_path: str, *, skip_writes: int = 1, edits: int = 1000
    ) -> None:
        super().__init__(inner)
        self.db_path = db_path
        self.skip_writes = skip_writes
        self.edits_left = edits
        self.edits = 0
        self._guard = threading.Lock()

    def put_if_absent(self, path: str, data: bytes) -> ObjectVersion:
        if fnmatch.fnmatchcase(path, f"{self.db_path}/manifest/*.manifest"):
            with self._guard:
                if self.skip_writes > 0:
                    self.skip_writes -= 1
                elif self.edits_left > 0:
                    self.edits_left -= 1
                    self.edits += 1
                    ManifestStore(self.inner, self.db_path).update(review_oldest_l0)
        return super().put_if_absent(path, data)


@dataclasses.dataclass
class RacedDriverStores:
    """Store factory for ``spark_jobs.compact``: the driver (outside any Spark task) gets a
    :class:`SourceEditingStore`, the executors' tasks the plain store of ``url``."""

    url: str
    db_path: str
    skip_writes: int = 1
    edits: int = 1000

    def __post_init__(self) -> None:
        self.driver: SourceEditingStore | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["driver"] = None  # executors never see the driver's racer
        return state

    def __call__(self) -> ObjectStore:
        from pyspark import TaskContext

        if TaskContext.get() is not None:
            return open_store(self.url)
        if self.driver is None:
            self.driver = SourceEditingStore(
                open_store(self.url), self.db_path, skip_writes=self.skip_writes, edits=self.edits
            )
        return self.driver
