#!/usr/bin/env bash
# Submit the preprocessing job to a Flink cluster through Beam's FlinkRunner.
#
#   ./run_flink.sh --modality image --input /shared/raw --output /shared/ds \
#       --flink_master flink-jobmanager:8081 --parallelism 8 \
#       --environment DOCKER [--environment_config IMAGE] \
#       [--job_server_jar beam-runners-flink-1.19-job-server-2.77.0.jar | \
#        --job_endpoint HOST:8099] \
#       [any option of pipelines.preprocess] [any Beam option]
#
#   --flink_master     the JobManager's REST address, or [local] for a Flink
#                      mini-cluster inside the job server (FLINK_MASTER)
#   --parallelism      Flink's default parallelism (FLINK_PARALLELISM)
#   --environment      where the Python SDK workers run: LOOPBACK (in this
#                      process; local clusters only, their default), EXTERNAL
#                      (a worker pool beside each task manager) or DOCKER
#                      (FLINK_SDK_ENVIRONMENT)
#   --environment_config  EXTERNAL: the worker pool's HOST:PORT; DOCKER: the
#                      SDK image (default Beam's apache/beam_python3.X_sdk)
#                      (FLINK_ENVIRONMENT_CONFIG)
#   --job_server_jar   Beam's Flink job server jar for your Flink version;
#                      Beam runs it here (Java needed). Without it and without
#                      --job_endpoint, Beam downloads it from Maven Central
#                      (FLINK_JOB_SERVER_JAR)
#   --job_endpoint     a Beam Flink job server that is already running
#
# The script waits for the job, checks the published manifest and exits like
# a local run: 0 published, 2 bad invocation, 3 data quality, 1 pipeline
# failed; the last line on stdout is the run's JSON summary. See README.md.
set -euo pipefail
# Relative paths are taken from the caller's folder; the project itself is
# installed (editable) in .venv, so it imports from anywhere.
source "$(dirname "$0")/scripts/ensure_venv.sh"
exec python -m pipelines.flink "$@"
