#!/usr/bin/env bash
# Preprocess images into a validated TFRecord dataset on this machine.
#
#   ./run_local.sh
#       Sets up .venv if needed, makes a small sample image set in
#       sample_data/images, preprocesses it into sample_output/dataset with
#       the DirectRunner (every core) and validates the result.
#
#   ./run_local.sh --input PATH --output OUT [options] [Beam options]
#       Preprocesses your own data (see README.md for every option), then
#       validates OUT.
set -euo pipefail
# Relative paths are taken from the caller's folder; the project itself is
# installed (editable) in .venv, so it imports from anywhere.
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/scripts/ensure_venv.sh"

if [ "$#" -eq 0 ]; then
  if [ ! -d "$HERE/sample_data/images" ]; then
    python -m pipelines.sample_data --output "$HERE/sample_data/images" \
      --count 300
  fi
  set -- --input "$HERE/sample_data/images" \
    --output "$HERE/sample_output/dataset" --overwrite
fi

output=""
prev=""
for arg in "$@"; do
  case "$arg" in
    --output=*) output="${arg#--output=}" ;;
  esac
  if [ "$prev" = "--output" ]; then output="$arg"; fi
  prev="$arg"
done

python -m pipelines.preprocess --modality image "$@"
if [ -n "$output" ]; then
  python -m pipelines.validate --output "$output"
fi
