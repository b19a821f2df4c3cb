#!/bin/sh
# Starts a standalone Spark master or worker from the pyspark installation on PATH's python: in
# the image (infra/docker-compose.yml) and on one machine (`make cluster`, which sets the
# variables below to 127.0.0.1 and its own ports).
set -eu
case "${1:-}" in
  master|worker) ;;
  *) echo "usage: $0 master|worker" >&2; exit 2 ;;
esac
SPARK_HOME="$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
# The master's REST submission server takes jobs without authentication: off in both deployments
# (jobs go through spark-submit to the master's RPC port).
SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
export SPARK_MASTER_OPTS
if [ "$1" = master ]; then
  exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "${SPARK_MASTER_HOST:-0.0.0.0}" --port "${SPARK_MASTER_PORT:-7077}" \
    --webui-port "${SPARK_MASTER_WEBUI_PORT:-8080}"
fi
exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
  --cores "${SPARK_WORKER_CORES:-2}" --memory "${SPARK_WORKER_MEMORY:-4g}" \
  --webui-port "${SPARK_WORKER_WEBUI_PORT:-8081}" \
  "${SPARK_MASTER_URL:-spark://spark-master:7077}"
