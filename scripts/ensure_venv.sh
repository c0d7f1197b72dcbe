# Sourced by run_local.sh and run_tests.sh: makes sure ./.venv exists and has
# this project installed (with the test extra). Reinstalls when setup.py
# changes. Needs only Python 3.10-3.12 with pip and venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
STAMP="$VENV/.installed-$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  echo "installing the project and its dependencies into $VENV (a few minutes the first time)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[test]"
  rm -f "$VENV"/.installed-*
  touch "$STAMP"
fi
# Beam's Python worker pool starts workers with the `python` on PATH.
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
