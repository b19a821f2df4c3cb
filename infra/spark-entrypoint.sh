#!/bin/sh
# Starts a standalone Spark master or worker, or runs spark-submit, from the pyspark installation
# on PATH's python: in the image (infra/docker-compose.yml) and on one machine (`make cluster`,
# which sets the variables below to 127.0.0.1 and its own ports, and SPARK_CONF_DIR to a private
# folder it wrote itself).
#
# With SPARK_AUTH_SECRET_FILE (Compose: a Docker secret), it first writes SPARK_CONF_DIR's
# spark-defaults.conf, private to the user (0700 folder, 0600 file): infra/spark-defaults.conf,
# spark.authenticate with the file's secret and, for `submit`, the store's settings for the
# executors (spark.executorEnv.AWS_*, from this process's environment). The secret is never on
# a command line nor in an environment variable (issue 39, item 1).
set -eu
case "${1:-}" in
  master|worker|submit) ;;
  *) echo "usage: $0 master|worker|submit [spark-submit arguments]" >&2; exit 2 ;;
esac
mode="$1"
shift
SPARK_HOME="$(python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
if [ -n "${SPARK_AUTH_SECRET_FILE:-}" ]; then
  conf="${SPARK_CONF_DIR:?SPARK_CONF_DIR must name the folder for the private spark-defaults.conf}"
  base="${SPARK_BASE_CONF:-/opt/slatedb/infra/spark-defaults.conf}"
  if [ ! -s "$SPARK_AUTH_SECRET_FILE" ]; then
    echo "$0: the Spark secret file $SPARK_AUTH_SECRET_FILE is missing or empty" >&2
    exit 2
  fi
  umask 077
  mkdir -p "$conf"
  chmod 700 "$conf"
  {
    echo "# written by spark-entrypoint.sh: private (0600)"
    if [ -f "$base" ]; then cat "$base"; fi
    echo "spark.authenticate true"
    # printf is the shell's own: the secret reaches no command line
    printf 'spark.authenticate.secret %s\n' "$(cat "$SPARK_AUTH_SECRET_FILE")"
    echo "spark.network.crypto.enabled true"
    echo "spark.ui.killEnabled false"
    if [ "$mode" = submit ]; then
      for name in AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION AWS_ENDPOINT_URL AWS_ALLOW_HTTP; do
        eval "value=\${$name:-}"
        if [ -n "$value" ]; then printf 'spark.executorEnv.%s %s\n' "$name" "$value"; fi
      done
    fi
  } > "$conf/spark-defaults.conf.tmp"
  chmod 600 "$conf/spark-defaults.conf.tmp"
  mv -f "$conf/spark-defaults.conf.tmp" "$conf/spark-defaults.conf"
fi
if [ "$mode" = submit ]; then
  exec "$SPARK_HOME/bin/spark-submit" --master "${SPARK_MASTER_URL:-spark://spark-master:7077}" "$@"
fi
# The master's REST submission server takes jobs without authentication: off in both deployments
# (jobs go through spark-submit to the master's RPC port).
SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
export SPARK_MASTER_OPTS
if [ "$mode" = master ]; then
  exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host "${SPARK_MASTER_HOST:-0.0.0.0}" --port "${SPARK_MASTER_PORT:-7077}" \
    --webui-port "${SPARK_MASTER_WEBUI_PORT:-8080}"
fi
exec "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
  --cores "${SPARK_WORKER_CORES:-2}" --memory "${SPARK_WORKER_MEMORY:-4g}" \
  --webui-port "${SPARK_WORKER_WEBUI_PORT:-8081}" \
  "${SPARK_MASTER_URL:-spark://spark-master:7077}"
