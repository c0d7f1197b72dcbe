"""SIGTERM and SIGINT stop a run cleanly.

A scheduler (cron's timeout, Airflow, Kubernetes) sends SIGTERM first and
SIGKILL some seconds later; a person presses Ctrl-C (SIGINT). The first
signal raises `Cancelled` in the main thread, which stops the pipeline
there (the local runner runs or waits for its bundles in that thread);
`pipelines.preprocess` then stops publishing, removes the run's folder,
gives the output's lease back and ends with the JSON summary line,
status "cancelled" and exit code 128 + the signal's number (143 for
SIGTERM, 130 for SIGINT, as a shell reports them). A second signal ends
the process at once with the same code.
"""

import os
import signal
import sys
import threading
from typing import Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received = {'signum': None}


class Cancelled(BaseException):
  """The run was told to stop by a signal.

  A BaseException, as KeyboardInterrupt is, so that no `except Exception`
  on the way swallows it. Beam re-raises exceptions from its steps as
  type(e)(message + where), which this signature accepts.
  """

  def __init__(self, message: str = '', signum: Optional[int] = None):
    super().__init__(message)
    self.signum = signum if signum is not None else received()


def received() -> Optional[int]:
  """The number of the stopping signal received, or None."""
  return _received['signum']


def exit_code(signum: int) -> int:
  return 128 + int(signum)


def name(signum: int) -> str:
  return signal.Signals(signum).name


def _handle(signum, frame):
  del frame
  if _received['signum'] is not None:
    sys.stderr.write(f'error: {name(signum)} again; stopping at once.\n')
    sys.stderr.flush()
    os._exit(exit_code(signum))  # pylint: disable=protected-access
  _received['signum'] = signum
  raise Cancelled(f'received {name(signum)}', signum)


def install() -> dict:
  """Handles SIGTERM and SIGINT (only possible in the main thread);
  returns the handlers replaced, for restore()."""
  _received['signum'] = None
  if threading.current_thread() is not threading.main_thread():
    return {}
  return {signum: signal.signal(signum, _handle) for signum in SIGNALS}


def restore(previous: dict) -> None:
  """Puts back the handlers install() replaced (main() may be called more
  than once in one process, as the tests do)."""
  for signum, handler in previous.items():
    signal.signal(signum, handler)
