#!/usr/bin/env bash
# Runs the test suite (sets up .venv first if needed). Extra arguments go to
# pytest, e.g. ./run_tests.sh -k reader -x
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_venv.sh
exec python -m pytest tests -q "$@"
