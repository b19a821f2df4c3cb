"""The options of a sharded table (:class:`TableOptions`), shared by the table and rescaling."""

from __future__ import annotations

from dataclasses import dataclass, field

from slatedb_core.options import DbOptions, DbReaderOptions, check_instance, check_int

__all__ = ["TableOptions"]


@dataclass(frozen=True)
class TableOptions:
    """Options of a sharded :class:`Table`: its shard writers, readers and fencing retries."""

    writer: DbOptions = field(default_factory=DbOptions)
    """Options of the shard writers :meth:`Table.writer` opens (and of the fencing writer that
    split/merge open on a source shard)."""
    reader: DbReaderOptions = field(default_factory=DbReaderOptions)
    """Options of the per-shard readers behind get/scan (the mode is forced to CHECKPOINT for a
    table opened on a snapshot)."""
    fence_attempts: int = 5
    """Split/merge: how often to re-fence a source shard whose fencing writer was itself fenced
    (a writer that opened meanwhile, saw the seal and left)."""
    map_commit_attempts: int = 20
    """Shard-map commits (and named-snapshot records) retried after losing a race to an
    unrelated change."""

    def __post_init__(self) -> None:
        check_instance("TableOptions.writer", self.writer, DbOptions)
        check_instance("TableOptions.reader", self.reader, DbReaderOptions)
        for name in ("fence_attempts", "map_commit_attempts"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), lo=1))
