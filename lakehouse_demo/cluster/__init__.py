"""``make cluster``: the deployment's real services on this machine, bound to 127.0.0.1 (SeaweedFS,
PostgreSQL, a Spark standalone master and workers, dagster-webserver and dagster-daemon), from
the same config files as infra/docker-compose.yml. See infra/README.md."""
