"""One Dagster partition per managed database, and one per sharded table.

Dynamic partitions, because databases come and go at runtime (clones, table splits, destroyed
databases the GC finally deletes): ``database_discovery_sensor`` keeps both sets in step with the
store, so every run, materialization and failure in the UI is filed under the database it was for.
"""

from __future__ import annotations

import dagster as dg

DATABASES = "slatedb_databases"
TABLES = "slatedb_tables"

databases_partitions = dg.DynamicPartitionsDefinition(name=DATABASES)
tables_partitions = dg.DynamicPartitionsDefinition(name=TABLES)
