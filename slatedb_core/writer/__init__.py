"""The writer: ``Db`` (open with fencing and recovery, puts, batches, Arrow and SST ingest, L0 flushes)."""
