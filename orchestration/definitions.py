"""The Dagster definitions ``workspace.yaml`` loads: maintenance of every managed slatedb database.

Built from the settings file (see :mod:`orchestration.settings`), so one code location deploys
unchanged to ``dagster dev`` and to an instance with a daemon; only the YAML (or
``SLATEDB_ORCHESTRATION_CONFIG`` / ``SLATEDB_STORE_URL``) differs.
"""

from __future__ import annotations

import dagster as dg

from orchestration.assets import ASSETS
from orchestration.changes_assets import (
    CHANGES_ASSETS,
    CHANGES_CHECKS,
    CHANGES_JOBS,
    CHANGES_RESOURCE,
    ChangesToDeltaResource,
)
from orchestration.changes_schedules import build_changes_schedules
from orchestration.checks import CHECKS, health_check_job
from orchestration.fleet_report import fleet_report_job
from orchestration.fleet_view import fleet_asset
from orchestration.jobs import JOBS
from orchestration.metadata import with_owners
from orchestration.missing import acknowledge_missing_database_job
from orchestration.resources import (
    ManagedDatabasesResource,
    ObjectStoreResource,
    refuse_plain_secrets,
    store_config,
)
from orchestration.schedules import build_schedules
from orchestration.sensors import build_sensors
from orchestration.settings import Settings, load_settings


def build_definitions(settings: Settings) -> dg.Definitions:
    managed = ManagedDatabasesResource(**settings.managed)
    managed.check_settings()
    return dg.Definitions(
        assets=with_owners([*ASSETS, *CHANGES_ASSETS, fleet_asset], settings.owners),
        asset_checks=[*CHECKS, *CHANGES_CHECKS],
        jobs=[
            *JOBS,
            *CHANGES_JOBS,
            health_check_job,
            fleet_report_job,
            acknowledge_missing_database_job,
        ],
        schedules=[
            *build_schedules(settings.schedules),
            *build_changes_schedules(settings.schedules),
        ],
        sensors=build_sensors(settings.sensors_running),
        resources=refuse_plain_secrets(
            {
                "store": ObjectStoreResource(**store_config(settings.store, settings.store_env)),
                "managed": managed,
                CHANGES_RESOURCE: ChangesToDeltaResource(),
            }
        ),
    )


defs = build_definitions(load_settings())
