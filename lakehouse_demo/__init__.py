"""The lakehouse main job end to end: a generated orders dataset ingested with Spark into a
sharded table, compacted, checkpointed, read under writes, rescaled, cloned and garbage
collected, and exported to Delta, all as one Dagster run (``python -m lakehouse_demo``)."""
