#!/usr/bin/env bash
# Submit the preprocessing job to a Spark cluster through Beam's SparkRunner.
#
#   ./run_spark.sh --modality image --input /shared/raw --output /shared/ds \
#       --job_endpoint spark-job-server:8099 \
#       --environment EXTERNAL --environment_config localhost:8096 \
#       [any option of pipelines.preprocess] [any Beam option]
#
#   ./run_spark.sh ... --spark_job_server_jar JOB_SERVER.jar \
#       --spark_master_url spark://spark-master:7077 --environment DOCKER
#
#   --job_endpoint     a Beam Spark job server that is already running; it
#                      submits to the master it was started with
#                      (SPARK_JOB_ENDPOINT)
#   --spark_job_server_jar  Beam's shaded Spark job server jar; Beam runs it
#                      here (Java needed) (SPARK_JOB_SERVER_JAR)
#   --spark_master_url with --spark_job_server_jar only: spark://HOST:PORT,
#                      local[N], yarn or k8s://... (SPARK_MASTER_URL)
#   --environment      where the Python SDK workers run: LOOPBACK (in this
#                      process; local clusters only), EXTERNAL (a worker
#                      pool on each Spark worker host) or DOCKER
#                      (SPARK_SDK_ENVIRONMENT)
#   --environment_config  EXTERNAL: the worker pool's HOST:PORT; DOCKER: the
#                      SDK image (default Beam's apache/beam_python3.X_sdk)
#                      (SPARK_ENVIRONMENT_CONFIG)
#
# One of --job_endpoint and --spark_job_server_jar is required: without them
# Beam would download a job server jar from Maven Central mid-run. The
# script sets --environment_cache_millis=86400000 unless given (one SDK
# worker per executor instead of one per task; see pipelines/spark.py). It
# waits for the job, checks the published manifest and exits like a local
# run: 0 published, 2 bad invocation, 3 data quality, 1 pipeline failed;
# the last line on stdout is the run's JSON summary. See docs/spark.md.
set -euo pipefail
# Relative paths are taken from the caller's folder; the project itself is
# installed (editable) in .venv, so it imports from anywhere.
source "$(dirname "$0")/scripts/ensure_venv.sh"
exec python -m pipelines.spark "$@"
