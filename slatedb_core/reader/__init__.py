"""The reader: ``DbReader`` over a checkpoint, a managed checkpoint or the latest manifest, with
WAL replay."""
