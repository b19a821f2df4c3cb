"""Developer tooling around the Dagster code location, kept out of it: sample databases for
``make ui`` (:mod:`devtools.sample_data`), starting and stopping ``dagster dev``
(:mod:`devtools.devserver`) and the docs' screenshot of the asset graph
(:mod:`devtools.screenshot`). Nothing in ``orchestration/`` imports this package."""
