"""Tests of the WAL: its SSTs, buffers and writers."""
