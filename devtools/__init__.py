"""Developer tooling around the Dagster code location, kept out of it: sample databases for
``make ui`` (:mod:`devtools.sample_data`) with a history of fleet_sensor ticks
(:mod:`devtools.sample_history`), starting and stopping ``dagster dev`` and preparing its
DAGSTER_HOME (:mod:`devtools.devserver`), and the docs' screenshots (:mod:`devtools.screenshot`,
driving headless Chromium through :mod:`devtools.browser`). Nothing in ``orchestration/`` imports
this package."""
