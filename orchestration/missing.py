"""A database deleted outside ``destroy``: kept as a missing partition with an ERROR check until
an operator acknowledges it (issue 40, item 8).

``destroy`` leaves a tombstone at the path (its ``gc/*.boundary`` files at their tombstone
values, docs/clones-and-destroy.md "What a destroyed path remembers"), which the fleet scan reads
as ``destroyed``: such a database leaves the partitions without an error. A path the fleet sensor
has seen with a manifest that now has neither manifest nor tombstone was deleted by hand (or by a
bucket rule): ``database_discovery_sensor`` keeps its partition, so the database stays in the UI
with its failing check (:func:`missing_description` says what to do), until the operator runs
``acknowledge_missing_database_job`` for it (Launchpad: the database in the op's config), which
removes the partition.
"""

import dagster as dg
from pydantic import Field

from orchestration.fleet_state import Memory, deleted_outside_destroy
from orchestration.partitions import DATABASES
from orchestration.resources import ManagedDatabasesResource, ObjectStoreResource
from slatedb_core import FleetScanner
from slatedb_core.store.redact import redact_url

ACKNOWLEDGE_JOB = "acknowledge_missing_database_job"
ACKNOWLEDGE_OP = "acknowledge_missing_database"


def missing_description(db: str, store_url: str) -> str:
    """The check description of a database deleted outside destroy: what happened, where, and
    the next step. The URL is redacted (it may carry credentials, SECURITY.md)."""
    return (
        f"database {db} is missing from {redact_url(store_url)}: it was deleted outside destroy "
        "(no manifest and no destroy tombstone at its path); restore its objects, or acknowledge "
        f"it by launching {ACKNOWLEDGE_JOB} (Launchpad config: ops: {ACKNOWLEDGE_OP}: config: "
        f"database: {db}), which removes its partition"
    )


class AcknowledgeMissing(dg.Config):
    database: str = Field(description="The database partition to forget: one deleted by hand.")


@dg.op(
    name=ACKNOWLEDGE_OP,
    description=(
        "Removes the partition of a database deleted outside destroy, after an operator has "
        "seen it missing; refuses a database that is still there."
    ),
)
def acknowledge_missing_database(
    context: dg.OpExecutionContext,
    config: AcknowledgeMissing,
    store: ObjectStoreResource,
    managed: ManagedDatabasesResource,
) -> None:
    db = config.database
    if db not in context.instance.get_dynamic_partitions(DATABASES):
        raise dg.Failure(description=f"{db!r} is not a database partition: nothing to acknowledge")
    if db in managed.databases:
        raise dg.Failure(
            description=(
                f"{db!r} is listed in the settings' managed databases: remove it from "
                "managed.databases in the settings file, then acknowledge it"
            )
        )
    state = FleetScanner(store.open(), concurrency=1).scan([db])[db].state
    if state not in ("missing", "destroyed"):
        raise dg.Failure(
            description=(
                f"{db!r} is not missing (its state is {state}): nothing to acknowledge; "
                "use destroy to remove a database"
            )
        )
    context.instance.delete_dynamic_partition(DATABASES, db)
    context.log.info(f"acknowledged: database {db!r} ({state}) removed from the partitions")


@dg.job(
    name=ACKNOWLEDGE_JOB,
    executor_def=dg.in_process_executor,
    description=(
        "Acknowledge a database deleted outside destroy: its partition (kept, with a failing "
        "manifest_and_ssts_intact check) is removed. Name the database in the op's config."
    ),
)
def acknowledge_missing_database_job() -> None:
    acknowledge_missing_database()


def keep_missing(state: str, memory: Memory | None) -> bool:
    """Whether discovery keeps a partition the store no longer lists."""
    return state == "unreachable" or (memory is not None and deleted_outside_destroy(state, memory))
