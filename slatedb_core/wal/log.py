"""Naming, listing and reading WAL SSTs.

Each WAL SST carries the epoch of the writer that created it in its footer metadata
(``writer_epoch``), which is how a writer that loses a create-if-absent race learns whether it
lost to an older writer (try the next id) or was fenced by a newer one (SlateDB RFC 0001, "Writer
Protocol"). An SST with no entries is a fencing SST.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from slatedb_core.errors import CorruptionError
from slatedb_core.layout import SST_SUFFIX, wal_dir, wal_sst_name
from slatedb_core.sst import SstReader
from slatedb_core.store.objectstore import ObjectStore

EPOCH_KEY = "writer_epoch"
_NAME = re.compile(r"^(\d{20})" + re.escape(SST_SUFFIX) + "$")


@dataclass(frozen=True, slots=True)
class WalSst:
    id: int
    writer_epoch: int
    entries: pa.Table

    @property
    def is_fence(self) -> bool:
        return bool(self.entries.num_rows == 0)


class WalLog:
    def __init__(self, store: ObjectStore, db_path: str) -> None:
        self.store = store
        self.db_path = db_path
        self.dir = wal_dir(db_path)

    def path(self, wal_id: int) -> str:
        return f"{self.dir}/{wal_sst_name(wal_id)}"

    def parse(self, path: str) -> int | None:
        if not path.startswith(self.dir + "/"):
            return None
        m = _NAME.match(path[len(self.dir) + 1 :])
        if m is None:
            return None
        wal_id = int(m.group(1))
        return wal_id if wal_id < 2**64 else None  # 20 digits reach past u64: not a WAL SST

    def list_ids(self, after: int = 0) -> list[int]:
        """WAL ids greater than ``after``, ascending."""
        start = self.path(after) if after > 0 else None
        ids = []
        for meta in self.store.list(self.dir, start_after=start):
            wal_id = self.parse(meta.path)
            if wal_id is not None and wal_id > after:
                ids.append(wal_id)
        return ids

    def decode(self, wal_id: int, data: bytes) -> WalSst:
        name = self.path(wal_id)
        reader = SstReader.from_bytes(data, name)
        epoch = reader.metadata.get(EPOCH_KEY)
        if epoch is None:
            raise CorruptionError(name, f"WAL SST has no {EPOCH_KEY} in its metadata")
        return WalSst(wal_id, epoch, reader.read_all())

    def read(self, wal_id: int) -> WalSst:
        return self.decode(wal_id, self.store.get(self.path(wal_id)).data)

    def read_epoch(self, wal_id: int) -> int:
        return self.read(wal_id).writer_epoch
