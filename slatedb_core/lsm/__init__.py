"""The LSM pieces in memory: entries as Arrow batches, memtables, merge iterators and the
immutable read state."""
