"""Keeps TensorFlow's native start-up lines off the console.

Importing TensorFlow prints, from its C++ side, lines that look alarming
and say nothing about the run: the absl banner ("All log messages before
absl::InitializeLog() is called are written to STDERR"), "Could not find
cuda drivers", "failed call to cuInit: ... ERROR" on a machine without a
GPU, the oneDNN notice, TensorRT and cuDNN/cuFFT/cuBLAS registration
warnings, "computation placer already registered". TF_CPP_MIN_LOG_LEVEL
hides only some of them: the lines written before absl's logging is
initialized ignore every threshold, and no environment variable turns
them off.

`start(argv)`, called by a command-line entry point before TensorFlow is
first imported (and only when `--verbose` is not given):

- sets TF_CPP_MIN_LOG_LEVEL=2 (TensorFlow's C++ info and warning lines)
  and GRPC_VERBOSITY=ERROR, each only if the user has not set it; Beam's
  worker processes inherit both;
- sends file descriptor 2 (what C++ code and child processes, Beam's
  workers among them, write to) through a small filter process that drops
  the lines above and passes every other line to the real stderr;
- points `sys.stderr` at the real stderr directly, so the command's own
  lines (its log, its summary, its error sentence) keep their order with
  stdout.

Nothing else is dropped: a C++ warning or error that is not start-up noise,
a crash report, a worker's Python log lines all reach stderr. GPUs are not
hidden (CUDA_VISIBLE_DEVICES is left alone). `--verbose` starts nothing, so
TensorFlow's own lines show as TensorFlow prints them.
"""

import os
import subprocess
import sys
from typing import List, Optional

from transforms.runtime import processes

# Lines the filter drops. Native log lines look like (absl)
#   I0000 00:00:1795408479.843572   32655 cudart_stub.cc:31] Could not ...
# or (older TensorFlow)
#   2024-01-01 12:00:00.123456: I tensorflow/.../port.cc:113] oneDNN ...
# Every native info line is dropped (TF_CPP_MIN_LOG_LEVEL=2 hides those
# TensorFlow prints after start-up anyway); warnings and errors only when
# they are one of the known start-up notices.


def _native(severities: str) -> str:
  return (rf'(?:[{severities}]\d{{4}} \d\d:\d\d:\d+\.\d+ +\d+ '
          rf'|\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [{severities}] )'
          r'\S+:\d+\] ')


NOISE_PATTERN = (
    r'^(?:'
    r'WARNING: All log messages before absl::InitializeLog\(\) is called '
    r'are written to STDERR'
    r'|To enable the following instructions: .* rebuild TensorFlow with '
    r'the appropriate compiler flags\.'
    r'|' + _native('I') +
    r'|' + _native('WE') + r'.*(?:cuInit|oneDNN|TensorRT|TF-TRT'
    r'|computation placer|Unable to register cu[A-Z]+ factory'
    r'|cuda drivers|kernel driver does not appear to be running'
    r'|CUDA_ERROR_NO_DEVICE)'
    # `python -m build`, run by Beam to package this project for remote
    # workers (Dataflow, portable runners), says each step it takes.
    r'|\* (?:Getting build dependencies for sdist|Building sdist)\.\.\.$'
    r')')

# The filter process: reads what is written to file descriptor 2, writes
# every line that is not noise to the real stderr. It runs in its own
# session (Ctrl-C and a scheduler's signals to the process group do not
# reach it) and ends when the last writer (the command, its workers)
# closes the pipe.
_FILTER = r'''
import os, re, select
noise = re.compile(NOISE.encode())
def put(data):
    while data:
        try:
            data = data[os.write(1, data):]
        except InterruptedError:
            continue
        except OSError:
            return
pending = b''
while True:
    try:
        chunk = os.read(0, 65536)
    except InterruptedError:
        continue
    except OSError:
        break
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b'\n')
    out = b''.join(line + b'\n' for line in lines if not noise.match(line))
    # A line written in pieces: wait briefly for its end, else pass it on.
    if pending and not select.select([0], [], [], 0.05)[0]:
        out, pending = out + pending, b''
    put(out)
if pending and not noise.match(pending):
    put(pending)
'''

_STATE = {'started': False, 'process': None, 'saved_fd': None}


def _verbose(argv: List[str]) -> bool:
  return any(a == '--verbose' or a.startswith('--verbose=') for a in argv)


def start(argv: Optional[List[str]] = None) -> None:
  """Quiets TensorFlow's native start-up lines for this process and the
  processes it starts, unless `argv` holds --verbose. For command-line
  entry points only, before TensorFlow is imported; does nothing the second
  time, or when stderr cannot be filtered."""
  argv = list(sys.argv[1:] if argv is None else argv)
  if _STATE['started']:
    return
  _STATE['started'] = True
  if _verbose(argv):
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  os.environ.setdefault('GRPC_VERBOSITY', 'ERROR')
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    return
  try:
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, '-I', '-S', '-c',
         f'NOISE = {NOISE_PATTERN!r}\n{_FILTER}'],
        stdin=subprocess.PIPE, stdout=saved, stderr=subprocess.DEVNULL,
        start_new_session=True)
  except OSError:
    os.close(saved)
    return
  os.dup2(process.stdin.fileno(), 2)
  process.stdin.close()
  os.set_inheritable(saved, False)
  sys.stderr = os.fdopen(saved, 'w', buffering=1,
                         encoding=getattr(sys.stderr, 'encoding', None),
                         errors='backslashreplace')
  _STATE.update(process=process, saved_fd=saved)
  # Local worker processes write to the real stderr (what they print is
  # not TensorFlow's start-up noise), and do not hold the filter's pipe.
  processes.WORKER_STDERR = saved


def imported() -> None:
  """For an entry-point module imported as a library (tests, launchers,
  a training job): TF_CPP_MIN_LOG_LEVEL=2 if the user has not set it,
  unless a command already called start()."""
  if not _STATE['started']:
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def finish(timeout: float = 2.0) -> None:
  """Gives file descriptor 2 back to the real stderr and waits (up to
  `timeout` seconds) for the filter to pass on what it still holds. For
  the end of a command, just before it exits."""
  process, saved = _STATE['process'], _STATE['saved_fd']
  if process is None:
    return
  _STATE.update(process=None, saved_fd=None)
  processes.WORKER_STDERR = None
  try:
    sys.stderr.flush()
    os.dup2(saved, 2)
  except (OSError, ValueError):
    return
  try:
    process.wait(timeout)
  except subprocess.TimeoutExpired:
    pass  # a worker still holds the pipe; the filter ends with it
