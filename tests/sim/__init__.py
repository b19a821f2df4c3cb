"""Seeded simulation of the storage protocol: see :mod:`tests.sim.harness` and README.md."""
