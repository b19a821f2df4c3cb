"""The deployment's description, read once when the definitions load: which store, what to
manage, and the cron strings of the schedules.

The file is YAML, ``orchestration/slatedb.yaml`` unless ``SLATEDB_ORCHESTRATION_CONFIG`` names
another; ``SLATEDB_STORE_URL`` overrides its store URL. Schedules need their cron strings when the
definitions are built, which is why they are read here and not from a resource. Unknown keys are
an error, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from orchestration.metadata import DEFAULT_OWNERS
from slatedb_core.errors import InvalidArgument

CONFIG_ENV = "SLATEDB_ORCHESTRATION_CONFIG"
STORE_URL_ENV = "SLATEDB_STORE_URL"
DEFAULT_CONFIG = Path(__file__).with_name("slatedb.yaml")


@dataclass(frozen=True)
class ScheduleSettings:
    compaction: str = "*/15 * * * *"
    garbage_collection: str = "0 * * * *"
    checkpoint_refresh: str = "*/30 * * * *"
    delta_export: str = "0 3 * * *"
    rescaling: str = "0 4 * * *"
    changes_to_delta: str = "*/5 * * * *"
    """The cron of the change-feed schedules (orchestration/changes_schedules.py)."""
    changes_to_delta_running: bool = False
    """Whether they start running: off unless the deployment says so (a pass registers a
    change-feed consumer in every database it reads, docs/changes.md "Dagster")."""
    timezone: str = "UTC"
    running: bool = True
    """Whether schedules start running when first deployed (the UI can toggle them). On unless
    the deployment says otherwise: maintenance that silently never runs is the failure an
    operator does not see. Stopped maintenance shows as the work it leaves: the checks on L0,
    WAL backlog, manifest lag and expired checkpoints warn (docs/maintenance-assets.md)."""


@dataclass(frozen=True)
class Settings:
    store: dict[str, Any]
    """Keyword arguments of ObjectStoreResource (url, endpoint, region, ...), resolved."""
    store_env: dict[str, str] = field(default_factory=dict)
    """The environment variable each ``store`` value came from (``SLATEDB_STORE_URL``, or
    ``{env: NAME}`` in the file): the resource's config names the variable (``dg.EnvVar``), so
    its value never reaches Dagster's snapshots (issue 39, item 2)."""
    managed: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of ManagedDatabasesResource."""
    schedules: ScheduleSettings = field(default_factory=ScheduleSettings)
    sensors_running: bool = True
    source: str = "<defaults>"
    owners: tuple[str, ...] = DEFAULT_OWNERS
    """Owners of every asset: e-mail addresses or ``team:<name>`` (Dagster's two forms)."""


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    chosen = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:
        raw = yaml.safe_load(chosen.read_text()) or {}
    except OSError as e:
        raise InvalidArgument(f"cannot read orchestration config {chosen}: {e}") from e
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{chosen}: expected a mapping at the top level")
    known = {"store", "managed", "schedules", "sensors_running", "owners"}
    unknown = set(raw) - known
    if unknown:
        raise InvalidArgument(f"{chosen}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    store, store_env = _store_settings(chosen, raw.get("store") or {})
    if os.environ.get(STORE_URL_ENV):
        store["url"] = os.environ[STORE_URL_ENV]
        store_env["url"] = STORE_URL_ENV
    if not store.get("url"):
        raise InvalidArgument(f"{chosen}: store.url is required (or set {STORE_URL_ENV})")
    sched_raw = dict(raw.get("schedules") or {})
    names = {f.name for f in fields(ScheduleSettings)}
    if set(sched_raw) - names:
        raise InvalidArgument(f"{chosen}: unknown schedules keys {sorted(set(sched_raw) - names)}")
    owners = raw.get("owners", list(DEFAULT_OWNERS))
    if (
        not isinstance(owners, list)
        or not owners
        or not all(
            isinstance(o, str) and ("@" in o or (o.startswith("team:") and len(o) > 5))
            for o in owners
        )
    ):
        raise InvalidArgument(
            f"{chosen}: owners must be a non-empty list of e-mail addresses or team:<name>, "
            f"got {owners!r}"
        )
    return Settings(
        owners=tuple(owners),
        store=store,
        store_env=store_env,
        managed=dict(raw.get("managed") or {}),
        schedules=ScheduleSettings(**sched_raw),
        sensors_running=bool(raw.get("sensors_running", True)),
        source=str(chosen),
    )


def _store_settings(chosen: Path, raw: object) -> tuple[dict[str, Any], dict[str, str]]:
    """``store``'s values, each ``{env: NAME}`` one read from the environment, and the variable
    each came from. An unset variable leaves its field unset (``url`` is then required)."""
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{chosen}: store must be a mapping")
    store: dict[str, Any] = {}
    store_env: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            name = value.get("env")
            if set(value) != {"env"} or not isinstance(name, str) or not name:
                raise InvalidArgument(
                    f"{chosen}: store.{key} must be a value or {{env: VARIABLE_NAME}}"
                )
            if os.environ.get(name):
                store[key] = os.environ[name]
                store_env[key] = name
            elif key == "url":
                raise InvalidArgument(f"{chosen}: store.url names {name}, which is not set")
        else:
            store[key] = value
    return store, store_env
