"""Typed Dagster resources: the object store, and what to manage in it.

Both are ``ConfigurableResource`` classes, so every field shows (and can be overridden per run)
in the Dagster UI's launchpad. Durations are human strings ("1h", "7days") parsed by
``slatedb_core.durations``; a bad value fails when the resource is built, not mid-run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator

from orchestration.settings import STORE_URL_ENV
from slatedb_core import CompactorOptions, GarbageCollectorOptions, ObjectStore, open_store
from slatedb_core.durations import parse_duration
from slatedb_core.errors import InvalidArgument
from slatedb_core.health import list_databases
from slatedb_core.lsm.merge_operator import BUILTIN_MERGE_OPERATORS
from slatedb_core.options import DbOptions, DbReaderOptions
from slatedb_core.store.redact import redact_url
from slatedb_core.table import TableOptions

MiB = 1024 * 1024


class ObjectStoreResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The object store every managed database lives in.

    ``url`` is anything ``slatedb_core.open_store`` accepts (``s3://bucket/prefix``,
    ``file:///dir``, a directory path, ``memory://name``). Credentials left unset are read by
    ``open_store`` from the standard AWS environment variables, so none are ever written in the
    definitions; a deployment may also set them with ``dg.EnvVar``. A credential given as a
    literal (a key field, a URL with a secret) is refused by :func:`refuse_plain_secrets` when
    the definitions are built: Dagster would serve it in the UI.
    """

    # repr=False: a run's resolved resource holds the values, and a repr must not print them
    url: str = Field(
        repr=False,
        description="The store URL; give one that carries a credential with dg.EnvVar "
        "(SLATEDB_STORE_URL).",
    )
    endpoint: str | None = None
    region: str | None = None
    allow_http: bool | None = None
    access_key_id: str | None = Field(default=None, repr=False)
    secret_access_key: str | None = Field(default=None, repr=False)
    session_token: str | None = Field(default=None, repr=False)
    wal_url: str | None = Field(
        default=None,
        repr=False,
        description="The separate WAL object store of the managed databases, if SlateDB wrote "
        "them with one (with_wal_object_store, SlateDB RFC 0009): a store URL like url, each "
        "database's WAL at <db>/wal/ in it. Set it with dg.EnvVar when it carries credentials; "
        "it is never logged.",
    )

    merge_operator: str | None = Field(
        default=None,
        description="The merge operator the managed databases' writers use (SlateDB RFC 0006), "
        f"by built-in name ({', '.join(sorted(BUILTIN_MERGE_OPERATORS))}): compaction folds "
        "their merge operands with it and exports read them folded. Unset: a pass that meets an "
        "operand fails with MergeOperatorMissing and changes nothing.",
    )

    _store: ObjectStore | None = PrivateAttr(default=None)

    @field_validator("merge_operator")
    @classmethod
    def _known_merge_operator(cls, value: str | None) -> str | None:
        if value is not None and value not in BUILTIN_MERGE_OPERATORS:
            raise ValueError(
                f"merge_operator {value!r} is not a built-in merge operator: one of "
                f"{sorted(BUILTIN_MERGE_OPERATORS)}"
            )
        return value

    def compactor_options(self, base: CompactorOptions) -> CompactorOptions:
        """``base`` with this store's merge operator (compaction folds operands with it)."""
        return dataclasses.replace(base, merge_operator=self.merge_operator)

    def reader_options(self) -> DbReaderOptions:
        """Options of a reader of a managed database: its WAL store and merge operator."""
        return DbReaderOptions(wal_url=self.wal_url, merge_operator=self.merge_operator)

    def table_options(self) -> TableOptions:
        """Options of a managed table: its shards' WAL store and merge operator, for its readers
        and the fencing writers rescaling opens."""
        return TableOptions(
            writer=DbOptions(wal_url=self.wal_url, merge_operator=self.merge_operator),
            reader=self.reader_options(),
        )

    def open(self) -> ObjectStore:
        """The store (opened once per resource instance, then shared by the run's steps)."""
        if self._store is None:
            overrides = {
                key: value
                for key, value in (
                    ("endpoint", self.endpoint),
                    ("region", self.region),
                    ("access_key_id", self.access_key_id),
                    ("secret_access_key", self.secret_access_key),
                    ("session_token", self.session_token),
                    ("allow_http", None if self.allow_http is None else str(self.allow_http)),
                )
                if value is not None
            }
            self._store = open_store(self.url, **overrides)
        return self._store


SECRET_FIELDS = frozenset({"access_key_id", "secret_access_key", "session_token"})
"""Resource fields that hold a key: never a literal in a resource's config."""


def store_config(store: Mapping[str, Any], env_names: Mapping[str, str]) -> dict[str, Any]:
    """ObjectStoreResource's keyword arguments: each value that came from an environment
    variable (and still is its value) as ``dg.EnvVar`` of it, so Dagster's snapshots hold the
    variable's name, never its value (issue 39, item 2)."""
    out: dict[str, Any] = {}
    for key, value in store.items():
        env = env_names.get(key)
        out[key] = dg.EnvVar(env) if env and value == os.environ.get(env) else value
    return out


def holds_secret(field: str, value: object) -> bool:
    """True when ``value``, a literal of resource field ``field``, is or carries a credential:
    a key field, or a URL whose redaction hides something (userinfo, a secret query value, a
    ``txn`` URL: :func:`slatedb_core.store.redact.redact_url`)."""
    if not isinstance(value, str) or isinstance(value, dg.EnvVar) or not value:
        return False
    return field in SECRET_FIELDS or redact_url(value) != value


def refuse_plain_secrets(resources: Mapping[str, Any]) -> dict[str, Any]:
    """``resources``, once none holds a credential as a literal in its config. Dagster keeps
    every config value of a resource in the repository snapshot and each run's job snapshot, and
    serves them on the Resources page, the launchpad and GraphQL: a credential must come from
    ``dg.EnvVar`` (whose name is all they hold). Every Definitions this project builds passes
    its resources through here (orchestration/definitions.py, lakehouse_demo/definitions.py)."""
    for key, resource in resources.items():
        if not isinstance(resource, dg.ConfigurableResource):
            continue
        for field in type(resource).model_fields:
            value = getattr(resource, field, None)
            if holds_secret(field, value):
                shown = "" if field in SECRET_FIELDS else f" ({redact_url(str(value))!r})"
                raise InvalidArgument(
                    f"resource {key!r}: {field} holds a credential{shown}; give it from the "
                    "environment (dg.EnvVar; in slatedb.yaml {env: VARIABLE_NAME}, or "
                    f"{STORE_URL_ENV} for the store URL) so it never enters Dagster's config"
                )
    return dict(resources)


class CheckpointPolicy(dg.Config):
    """A named checkpoint the ``checkpoint_refresh`` asset maintains.

    Without ``every`` it is a *retention* checkpoint: exactly one is kept alive, created if
    missing and refreshed to ``lifetime`` once less than ``refresh_before`` remains. With
    ``every`` it is *scheduled*: a new one is taken when the newest is older than ``every``, and
    those older than ``retain`` are deleted. Checkpoints with other names (readers', clones') are
    never touched.
    """

    name: str
    lifetime: str
    every: str | None = None
    retain: str | None = None
    refresh_before: str | None = None

    @property
    def lifetime_td(self) -> timedelta:
        return parse_duration(self.lifetime)

    @property
    def every_td(self) -> timedelta | None:
        return None if self.every is None else parse_duration(self.every)

    @property
    def retain_td(self) -> timedelta:
        """Scheduled ones: age after which they are deleted (default: their lifetime)."""
        return self.lifetime_td if self.retain is None else parse_duration(self.retain)

    @property
    def refresh_before_td(self) -> timedelta:
        """Retention ones: refresh once less than this remains (default: half the lifetime)."""
        if self.refresh_before is None:
            return self.lifetime_td / 2
        return parse_duration(self.refresh_before)


class ManagedDatabasesResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Which databases and sharded tables to maintain, and the thresholds the jobs act on.

    Databases are those listed in ``databases``, those found under ``discover_prefix`` (when
    set; "" is the store's root) and every shard of the listed ``tables``.
    """

    databases: list[str] = Field(default_factory=list)
    discover_prefix: str | None = None
    tables: list[str] = Field(default_factory=list)

    # compaction and the fleet sensor
    l0_max_ssts: int = Field(
        default=8,
        description="fleet_sensor requests compaction, and the L0 check warns, above this many L0 SSTs",
    )
    wal_backlog_max: int = Field(
        default=64,
        description="fleet_sensor requests compaction, and the WAL check warns, above this many "
        "WAL SSTs a recovering writer would replay",
    )
    manifest_lag_max: int = Field(
        default=1000,
        description="The lag check warns when the oldest pinned manifest is this many versions "
        "behind; a managed retention checkpoint pinning it is re-taken (not a compaction)",
    )
    compactor_l0_trigger: int = 4
    compactor_max_sst_size_bytes: int = 256 * MiB

    # garbage collection
    gc_min_age: str = "1h"
    gc_db_delete_grace: str = "1d"
    ingest_retention: str = "7d"
    """``rescaling`` deletes a table's ingest leftovers (staged SSTs of zombie or crashed
    attempts, done markers, plan records) this old. Any age is safe, "0s" included (a job whose
    plan record is gone never commits again: ``collect_leftovers``); one shorter than a running
    ingest job makes that job fail, so keep it above the longest job."""

    # checkpoints
    checkpoints: list[CheckpointPolicy] = Field(default_factory=list)

    # rescaling
    split_bytes: int = 1024 * MiB
    """A shard whose SSTs hold more than this is split in two."""
    merge_bytes: int = 64 * MiB
    """Two adjacent shards both under this (and together under ``split_bytes``) are merged."""
    max_rescale_operations: int = 4

    # export
    export_root: str = "delta-exports"
    """Where ``delta_export`` writes: a directory, or an URI deltalake accepts (s3://...)."""
    export_checkpoint_lifetime: str = "1h"
    """Lifetime of the temporary checkpoint an export takes (deleted when the export ends)."""
    export_checkpoint_name: str | None = None
    """Export the newest live checkpoint of this name (e.g. a daily scheduled one) instead of
    taking a temporary checkpoint, so the Delta table matches a snapshot operators know."""
    expired_checkpoint_grace: str = "2h"
    """The asset check fails for a checkpoint still listed this long after it expired (the GC
    should have removed it)."""

    # the fleet sensor and the fleet view (slatedb_fleet)
    fleet_scan_concurrency: int = Field(
        default=64, description="Concurrent store requests of one fleet scan"
    )
    verify_ssts_per_tick: int = Field(
        default=50,
        description="Databases per tick whose SSTs are checked for existence (one HEAD per SST), "
        "in rotation over the fleet",
    )
    fleet_refresh_s: int = Field(
        default=300,
        description="The fleet view is materialized at least this often (its plots and freshness)",
    )
    fleet_min_interval_s: int = Field(
        default=30, description="... and at most this often when what it shows changed"
    )
    fleet_table_rows: int = Field(
        default=500,
        description="Rows of the fleet table; databases needing attention come first, the "
        "healthy rest are counted",
    )
    trend_databases: list[str] = Field(
        default_factory=list,
        description="Databases with per-database trend plots on the fleet view (default: the "
        "first trend_max_databases live ones)",
    )
    max_events_per_tick: int = Field(
        default=2000,
        description="Check results and observations one fleet_sensor tick reports at most "
        "(failing checks first); the rest follow in the next ticks",
    )
    trend_max_databases: int = Field(
        default=20, description="How many databases get trend plots when none are listed"
    )

    def gc_options(self) -> GarbageCollectorOptions:
        return GarbageCollectorOptions(
            min_age=parse_duration(self.gc_min_age, allow_zero=True),
            db_delete_grace=parse_duration(self.gc_db_delete_grace, allow_zero=True),
        )

    def compactor_options(self) -> CompactorOptions:
        return CompactorOptions(
            l0_trigger=self.compactor_l0_trigger,
            max_sst_size_bytes=self.compactor_max_sst_size_bytes,
        )

    def check_settings(self) -> None:
        """Parse every duration and threshold once; raises InvalidArgument on the first bad one."""
        self.gc_options()
        parse_duration(self.ingest_retention, allow_zero=True)
        self.compactor_options()
        parse_duration(self.export_checkpoint_lifetime)
        parse_duration(self.expired_checkpoint_grace, allow_zero=True)
        for p in self.checkpoints:
            p.lifetime_td, p.every_td, p.retain_td, p.refresh_before_td  # noqa: B018
        names = [p.name for p in self.checkpoints]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"checkpoint policy names must be unique, got {names}")
        for name in (
            "fleet_scan_concurrency",
            "fleet_table_rows",
            "fleet_refresh_s",
            "max_events_per_tick",
        ):
            if getattr(self, name) < 1:
                raise InvalidArgument(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("verify_ssts_per_tick", "fleet_min_interval_s", "trend_max_databases"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"{name} must not be negative, got {getattr(self, name)}")
        if self.merge_bytes * 2 > self.split_bytes:
            raise InvalidArgument("merge_bytes must be at most half of split_bytes")

    def database_paths(
        self, store: ObjectStore, table_shards: list[str] | None = None
    ) -> list[str]:
        """Every managed database path, sorted: listed, discovered and table shards."""
        found = set(self.databases)
        if self.discover_prefix is not None:
            found.update(list_databases(store, self.discover_prefix))
        found.update(table_shards or [])
        return sorted(found)
