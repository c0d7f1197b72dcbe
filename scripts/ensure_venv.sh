# Sourced by run_local.sh, run_flink.sh and run_dataflow.sh (running needs
# only the project's runtime dependencies) and by run_tests.sh, which sets
# VENV_EXTRA=test first (the test tools too: pytest, tfrecord, torch). Makes
# sure ./.venv exists and has this project installed with what the caller
# needs; both share the one venv, the tests adding their extra to it.
# Reinstalls when setup.py changes. Needs only Python 3.10-3.12 with pip and
# venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
EXTRA="${VENV_EXTRA:-}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment $VENV" >&2
  "$PYTHON" -m venv "$VENV"
fi
# One stamp per setup.py and extra: .installed-<hash> (runtime) and
# .installed-<hash>-test (runtime and tests).
STAMP="$VENV/.installed-$(sha256sum "$ROOT/setup.py" | cut -c1-16)"
if [ -n "$EXTRA" ]; then
  WANT="$STAMP-$EXTRA"
  SPEC="$ROOT[$EXTRA]"
else
  WANT="$STAMP"
  SPEC="$ROOT"
fi
if [ ! -f "$WANT" ]; then
  if [ -n "$EXTRA" ]; then
    what="the project, its dependencies and its $EXTRA extra"
  else
    what="the project and its runtime dependencies"
  fi
  echo "installing $what into $VENV (a few minutes the first time)" >&2
  "$VENV/bin/python" -m pip install -qq --upgrade pip
  "$VENV/bin/python" -m pip install -qq -e "$SPEC"
  if [ ! -f "$STAMP" ]; then rm -f "$VENV"/.installed-*; fi
  touch "$STAMP" "$WANT"
fi
# Beam's Python worker pool starts workers with the `python` on PATH.
export PATH="$VENV/bin:$PATH"
