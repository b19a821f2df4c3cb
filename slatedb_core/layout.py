"""Every object name of a database and of a sharded table, in one place (what SlateDB's
``paths.rs`` is to SlateDB). Nothing else in the package spells a directory, suffix or file name.

A database at ``<db>`` (SlateDB RFC 0001, "File Layout"; docs/manifest-and-fencing.md)::

    <db>/manifest/{id:020}.manifest       sequenced manifests (create-if-absent by id)
    <db>/manifest/_latest_version         advisory pointer to a recent id (Lance issue #1362)
    <db>/compactions/{id:020}.compactions sequenced compaction records, same rules
    <db>/wal/{id:020}.sst                 WAL SSTs (create-if-absent: "exists" means fenced)
    <db>/compacted/{ULID}.sst             L0 SSTs and sorted-run SSTs
    <db>/gc/{name}.boundary               GC boundary files (SlateDB RFC 0026; docs/gc-and-boundaries.md)
    <db>/clone.origin                     a clone's or union's origin record (docs/clones-and-destroy.md)
    <db>/_wal_store_id                    in a separate WAL store: its id (slatedb_core.wal.location)
    <db>/changes/{sha256 of name}.consumer   a change-feed consumer's registration record
                                          (slatedb_core.feed.registrations; docs/changes.md)
    <db>/changes/identity                 the database's change-feed identity, in its cursors
                                          (slatedb_core.feed.identity)

A sharded table at ``<table>`` (docs/projection-and-union.md)::

    <table>/shardmap/{id:020}.shardmap    the shard map, sequenced like the manifest
    <table>/shards/{shard_id:010}/        one database per shard
    <table>/_ingest/<job>/staged/<run>/<partition>-<attempt>-<nonce>/<run>-<shard_id>-<part>.sst
                                          SSTs a batch ingest run staged (slatedb_core.table.ingest)
    <table>/_ingest/<job>/{shard_id:010}.done  done markers: the job committed that shard
    <table>/_ingest/<job>/plan.json       the job's plan record: a job without a txn commits
                                          only while it exists (ingest_plan_record)
    ingest:<job>:<run>:{shard_id:010}    not an object: the checkpoint an ingest commits into the
                                          shard's manifest with its SSTs (ingest_checkpoint_name)
    <table>/snapshots/<name>/record/{id:020}.snapshot
                                          the record of a named table snapshot, sequenced like
                                          the manifest (slatedb_core.table.named_snapshots)
    <table>/snapshots/<name>/gc/record.boundary  its GC boundary

Names are ``/``-separated and relative to the store's root; :func:`join` builds them.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

from ulid import ULID

# ---- a database ---------------------------------------------------------------------------
MANIFEST_DIR = "manifest"
MANIFEST_SUFFIX = "manifest"
COMPACTIONS_DIR = "compactions"
COMPACTIONS_SUFFIX = "compactions"
WAL_DIR = "wal"
COMPACTED_DIR = "compacted"
GC_DIR = "gc"
SST_SUFFIX = ".sst"
BOUNDARY_SUFFIX = ".boundary"
LATEST_POINTER = "_latest_version"
CLONE_ORIGIN = "clone.origin"
WAL_STORE_ID = "_wal_store_id"
"""Ours, in a separate WAL store only: ``<db>/_wal_store_id`` holds the id our manifest records
for that store (``Manifest.wal_store_id``; :mod:`slatedb_core.wal.location`). Outside ``wal/``,
where SlateDB lists WAL objects and parses every name as a WAL id."""

CHANGES_DIR = "changes"
"""Ours: the change feed's objects of a database (docs/changes.md), outside every directory
SlateDB lists."""
CONSUMER_SUFFIX = ".consumer"
CHANGES_IDENTITY = "identity"

# Boundary names, one per kind of object GC deletes (docs/gc-and-boundaries.md).
MANIFEST_BOUNDARY = "manifest"
COMPACTIONS_BOUNDARY = "compactions"
WAL_BOUNDARY = "wal"
COMPACTED_BOUNDARY = "compacted"

# Everything a database owns under its path: a hard destroy deletes these and nothing else, so a
# database or table nested under another's path survives it (docs/clones-and-destroy.md).
OWN_DIRS = frozenset({MANIFEST_DIR, WAL_DIR, COMPACTED_DIR, COMPACTIONS_DIR, GC_DIR, CHANGES_DIR})
OWN_FILES = frozenset({CLONE_ORIGIN})

# ---- a sharded table ----------------------------------------------------------------------
SHARDMAP_DIR = "shardmap"
SHARDMAP_SUFFIX = "shardmap"
SHARDS_DIR = "shards"
INGEST_DIR = "_ingest"
INGEST_STAGED_DIR = "staged"
INGEST_DONE_SUFFIX = ".done"
INGEST_PLAN_RECORD = "plan.json"
INGEST_CHECKPOINT_PREFIX = "ingest"
SNAPSHOTS_DIR = "snapshots"
SNAPSHOT_RECORD_DIR = "record"
SNAPSHOT_SUFFIX = "snapshot"


def join(*parts: str) -> str:
    """``parts`` joined with ``/``, empty parts skipped and each part's outer slashes dropped."""
    return "/".join(p.strip("/") for p in parts if p)


def sequenced_name(object_id: int, suffix: str) -> str:
    """The file name of sequenced object ``object_id`` (zero-padded so names sort as ids)."""
    return f"{object_id:020d}.{suffix}"


def boundary_path(db_path: str, name: str) -> str:
    """The GC boundary file ``name`` (one of the ``*_BOUNDARY`` names) of the database."""
    return join(db_path, GC_DIR, name + BOUNDARY_SUFFIX)


def is_boundary(relative: str) -> bool:
    """Whether ``relative`` (a name inside a database's path) is one of its boundary files."""
    parts = relative.strip("/").split("/")
    return len(parts) == 2 and parts[0] == GC_DIR and parts[1].endswith(BOUNDARY_SUFFIX)


def ends_in_boundary(path: str) -> bool:
    """Whether ``path`` (a full name) ends in ``gc/<name>.boundary`` of some database."""
    parts = path.split("/")
    return len(parts) >= 2 and parts[-2] == GC_DIR and parts[-1].endswith(BOUNDARY_SUFFIX)


def wal_dir(db_path: str) -> str:
    return join(db_path, WAL_DIR)


def wal_store_id_path(db_path: str) -> str:
    """The object naming the WAL store of the database at ``db_path`` (:data:`WAL_STORE_ID`)."""
    return join(db_path, WAL_STORE_ID)


def wal_sst_name(wal_id: int) -> str:
    return f"{wal_id:020d}{SST_SUFFIX}"


def changes_dir(db_path: str) -> str:
    """Where the change feed keeps its objects of the database (:data:`CHANGES_DIR`)."""
    return join(db_path, CHANGES_DIR)


def consumer_record_path(db_path: str, consumer: str) -> str:
    """The registration record of change-feed consumer ``consumer`` of the database: named by
    the SHA-256 of the name (any printable name, a fixed length, safe in every store)."""
    digest = hashlib.sha256(consumer.encode("utf-8", "surrogatepass")).hexdigest()
    return join(db_path, CHANGES_DIR, digest + CONSUMER_SUFFIX)


def changes_identity_path(db_path: str) -> str:
    """The object holding the database's change-feed identity (:data:`CHANGES_IDENTITY`)."""
    return join(db_path, CHANGES_DIR, CHANGES_IDENTITY)


def compacted_dir(db_path: str) -> str:
    return join(db_path, COMPACTED_DIR)


def sst_path(db_path: str, sst_id: ULID) -> str:
    """The compacted (L0 or sorted-run) SST ``sst_id`` of the database at ``db_path``."""
    return join(db_path, COMPACTED_DIR, f"{sst_id}{SST_SUFFIX}")


def clone_origin_path(db_path: str) -> str:
    return join(db_path, CLONE_ORIGIN)


def shard_db_name(shard_id: int) -> str:
    """The database of shard ``shard_id``, relative to the table root."""
    return f"{SHARDS_DIR}/{shard_id:010d}"


def ingest_job_dir(table_path: str, job_id: str) -> str:
    """Where a Spark ingest job stages its SSTs and done markers."""
    return join(table_path, INGEST_DIR, job_id)


def ingest_dir(table_path: str) -> str:
    return join(table_path, INGEST_DIR)


def ingest_staging_dir(table_path: str, job_id: str, run_id: str) -> str:
    """Where one run of an ingest job stages its SSTs (deleted when the run ends)."""
    return join(ingest_job_dir(table_path, job_id), INGEST_STAGED_DIR, run_id)


def ingest_attempt_dir(staging_dir: str, partition: int, attempt: int, nonce: str) -> str:
    """One task attempt's own directory under a run's staging directory."""
    return join(staging_dir, f"{partition:05d}-{attempt}-{nonce}")


def staged_sst_name(run: int, shard_id: int, part: int) -> str:
    """A staged SST of shard ``shard_id``: part ``part`` of a task's run ``run``."""
    return f"{run:05d}-{shard_id:010d}-{part:05d}{SST_SUFFIX}"


def ingest_done_marker(table_path: str, job_id: str, shard_id: int) -> str:
    """The marker an ingest job writes once shard ``shard_id`` is committed."""
    return join(ingest_job_dir(table_path, job_id), f"{shard_id:010d}{INGEST_DONE_SUFFIX}")


def ingest_plan_record(table_path: str, job_id: str) -> str:
    """The record ``plan_ingest`` writes for job ``job_id``; the table GC deletes it before any
    other object of the job (slatedb_core.table.ingest_cleanup)."""
    return join(ingest_job_dir(table_path, job_id), INGEST_PLAN_RECORD)


def ingest_overwrite_record(table_path: str, job_id: str) -> str:
    """The record a commit of overwrite job ``job_id`` wrote once it found the overwrite
    committed, before the shard map recorded overwrite outcomes; now only read, for maps written
    before (slatedb_core.table.overwrite)."""
    return join(ingest_job_dir(table_path, job_id), "overwrite.done")


def ingest_checkpoint_name(job_id: str, run_id: str, shard_id: int) -> str:
    """The name of the checkpoint that run ``run_id`` of ingest job ``job_id`` commits into shard
    ``shard_id``'s manifest together with its SSTs (slatedb_core.table.ingest). Job and run ids
    are percent-encoded, so the name splits back into its parts at ``:``."""
    return ":".join(
        (
            INGEST_CHECKPOINT_PREFIX,
            quote(job_id, safe=""),
            quote(run_id, safe=""),
            f"{shard_id:010d}",
        )
    )


def parse_ingest_checkpoint_name(name: str | None) -> tuple[str, str, int] | None:
    """The job id, run id and shard id of an :func:`ingest_checkpoint_name`; None for any other
    checkpoint name."""
    parts = (name or "").split(":")
    if len(parts) != 4 or parts[0] != INGEST_CHECKPOINT_PREFIX or not parts[3].isdigit():
        return None
    return unquote(parts[1]), unquote(parts[2]), int(parts[3])


def snapshot_dir(table_path: str) -> str:
    """Where a table keeps the records of its named snapshots."""
    return join(table_path, SNAPSHOTS_DIR)


def snapshot_name_dir(table_path: str, name: str) -> str:
    """Everything of the table's snapshot named ``name``: its record's versions (namespace
    :data:`SNAPSHOT_RECORD_DIR`, suffix :data:`SNAPSHOT_SUFFIX`) and their GC boundary."""
    return join(table_path, SNAPSHOTS_DIR, name)


def snapshot_record_path(table_path: str, name: str, record_id: int) -> str:
    """Version ``record_id`` of the record of the table's snapshot named ``name``."""
    return join(
        snapshot_name_dir(table_path, name),
        SNAPSHOT_RECORD_DIR,
        sequenced_name(record_id, SNAPSHOT_SUFFIX),
    )
