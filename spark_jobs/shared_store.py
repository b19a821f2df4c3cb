"""A store every Spark process can reach: the one refusal of a process-private ``memory://``
URL, shared by the data source and the job commands (issue 40, item 3).

Spark runs our code in Python worker processes (and a cluster's executors on other hosts), each
of which would open an empty ``memory://`` store of its own: a write would land where no read
can see it, and a read would find nothing. docs/spark.md lists the stores that work."""

from __future__ import annotations

from slatedb_core.errors import InvalidArgument

__all__ = ["refuse_process_store"]


def refuse_process_store(url: str | None, what: str) -> None:
    """Raise :class:`InvalidArgument` naming ``what`` (an option or flag) when ``url`` is a
    ``memory://`` store; ``None`` (an option not given) passes."""
    if url is not None and url.strip().lower().startswith("memory:"):
        raise InvalidArgument(
            f"{what}: a memory:// store is private to one process, and Spark runs this job in "
            "worker processes; use a shared store, e.g. file:///path/to/lake or s3://bucket/prefix"
        )
