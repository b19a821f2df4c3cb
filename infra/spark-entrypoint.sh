#!/bin/sh
# Starts a standalone Spark master or worker from the pyspark installation in the image.
set -eu
case "${1:-}" in
  master|worker) ;;
  *) echo "usage: $0 master|worker" >&2; exit 2 ;;
esac
SPARK_HOME="$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
if [ "$1" = master ]; then
  exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 0.0.0.0 --port 7077 --webui-port 8080
fi
exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
  --cores "${SPARK_WORKER_CORES:-2}" --memory "${SPARK_WORKER_MEMORY:-4g}" \
  "${SPARK_MASTER_URL:-spark://spark-master:7077}"
