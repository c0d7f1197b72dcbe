#!/usr/bin/env bash
# Submitting to Google Cloud Dataflow is not implemented yet: it is planned
# (project, region, bucket, --setup_file packaging, dry run). Until then this
# script refuses instead of pretending to work. The pipeline itself takes
# Beam's Dataflow options unchanged, e.g.
#   python -m pipelines.preprocess --input gs://... --output gs://... \
#     --runner DataflowRunner --project P --region R \
#     --temp_location gs://B/tmp --setup_file ./setup.py
echo "run_dataflow.sh: Dataflow submission is not implemented yet; see the comment at the top of this script for running the pipeline with Beam's Dataflow options directly." >&2
exit 2
