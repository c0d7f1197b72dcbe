#!/usr/bin/env bash
# Runs the test suite (sets up .venv first if needed, with the test extra)
# in TEST_WORKERS pytest-xdist processes (default 2; the engine and
# object-store tests run one after another in one of them, see
# tests/conftest.py) and lists the 20 slowest tests at the end.
# Extra arguments go to pytest, e.g. ./run_tests.sh tests/docs -k guide -x
set -euo pipefail
cd "$(dirname "$0")"
VENV_EXTRA=test source scripts/ensure_venv.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
exec python -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadgroup \
  --durations=20 "$@"
