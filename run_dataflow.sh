#!/usr/bin/env bash
# Submit the preprocessing job to Google Cloud Dataflow, or translate it
# offline with --dry-run.
#
#   ./run_dataflow.sh --modality image \
#       --input gs://BUCKET/raw/cats --output gs://BUCKET/datasets/cats \
#       --project PROJECT --region europe-west1 --bucket BUCKET \
#       [--machine_type n1-standard-4] [--max_workers 10] [--num_workers N] \
#       [--job_name tfrecord-image] [--labels team=vision,env=prod] \
#       [--service_account EMAIL] [--job_file F] \
#       [any option of pipelines.preprocess] [any Beam Dataflow option]
#
#   ./run_dataflow.sh --dry-run ...   builds and translates the whole job for
#       Dataflow without submitting it (no network needed; local --input and
#       --output are accepted) and writes the job description to --job_file
#       (default ./dataflow_job.json), the staged files beside it.
#
# Project, region, bucket, machine type, worker limit, labels and service
# account may come from DATAFLOW_PROJECT (or GOOGLE_CLOUD_PROJECT),
# DATAFLOW_REGION, DATAFLOW_BUCKET, DATAFLOW_MACHINE_TYPE,
# DATAFLOW_MAX_WORKERS, DATAFLOW_LABELS, DATAFLOW_SERVICE_ACCOUNT.
# The job is packaged from this folder's setup.py (--setup_file), so the
# workers install this project and its dependencies. The script waits for
# the job to finish, checks the published manifest and exits like a local
# run: 0 published, 2 bad invocation, 3 data quality, 1 pipeline failed;
# the last line on stdout is the run's JSON summary. See README.md.
set -euo pipefail
# Relative paths are taken from the caller's folder; the project itself is
# installed (editable) in .venv, so it imports from anywhere.
source "$(dirname "$0")/scripts/ensure_venv.sh"
exec python -m pipelines.dataflow "$@"
