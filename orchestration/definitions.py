"""Dagster definitions for operating slatedb_core databases.

Assets, schedules and sensors arrive with the orchestration issue; this module already is what
``workspace.yaml`` loads, so the layout is fixed from the start.
"""

from __future__ import annotations

import dagster as dg

defs = dg.Definitions(assets=[])
