#!/usr/bin/env bash
# Runs the test suite (sets up .venv first if needed, with the test extra).
# Extra arguments go to pytest, e.g. ./run_tests.sh -k reader -x
set -euo pipefail
cd "$(dirname "$0")"
VENV_EXTRA=test source scripts/ensure_venv.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec python -m pytest tests -q "$@"
