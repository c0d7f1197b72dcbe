"""How a run that fails is told to people.

A failure ends with one sentence on stderr (`error: ...`) and the JSON
summary's `error` field names the exception: `<ExceptionType>: <first line
of its message>`. The full traceback (and the warnings and errors logged
during the run, with theirs) goes to a log file in the system's temporary
folder, which the sentence names; `--verbose` also prints it on stderr.

Beam re-raises a failure inside a worker as a RuntimeError whose message is
the worker's whole traceback; `describe` finds the real exception in it.
While a run goes, `Capture` keeps tracebacks off stderr (Beam logs every
failed bundle with its traceback, and its SDK worker prints it once more)
and keeps them for the log file.
"""

import collections
import logging
import os
import re
import shlex
import sys
import tempfile
import time
import traceback
from typing import List, Optional

TRACEBACK = 'Traceback (most recent call last):'
_EXCEPTION_LINE = re.compile(r'^([A-Za-z_][\w.]*): ?(.*)$')
_EXCEPTION_NAME = re.compile(
    r'(Error|Exception|Exit|Interrupt|Warning|Failure|Fault)$')
_STEP = re.compile(r" \[while running '[^']*'\]")
_CHAIN_MARKS = (TRACEBACK, 'During handling of the above exception',
                'The above exception was the direct cause')

# When set, the only thread whose log records reach stderr (the others'
# still reach the log file): while remote paths are probed, and after a
# probe was given up on, the probing threads (and the threads their client
# libraries start) retry in the background, and their complaints are
# already in the error sentence.
_ONLY_THREAD: List[Optional[int]] = [None]


def only_thread(ident: Optional[int]) -> None:
  """Lets only thread `ident`'s log records reach stderr (None: all)."""
  _ONLY_THREAD[0] = ident


def _innermost(text: str):
  """(type name, message) of the last exception in a printed traceback,
  or None."""
  lines = text.splitlines()
  strict, loose = None, None
  for i, line in enumerate(lines):
    match = _EXCEPTION_LINE.match(line)
    if not match or line.startswith(TRACEBACK):
      continue
    rest = [match.group(2)]
    for following in lines[i + 1:]:
      if not following.strip() or following.startswith(_CHAIN_MARKS):
        break
      rest.append(following)
    found = (match.group(1).rsplit('.', 1)[-1], '\n'.join(rest))
    if _EXCEPTION_NAME.search(found[0]):
      strict = found
    else:
      loose = found
  return strict or loose


def describe(exc: BaseException) -> str:
  """`<ExceptionType>: <first line of its message>` for an exception; for
  one whose message is a traceback (Beam's re-raised worker errors), the
  last exception in that traceback, with the step it failed in."""
  name, message = type(exc).__name__, str(exc)
  if TRACEBACK in message:
    inner = _innermost(message)
    if inner:
      name, message = inner
  lines = message.strip().splitlines()
  first = lines[0].strip() if lines else ''
  step = _STEP.search(message)
  if step and step.group(0).strip() not in first:
    first += step.group(0)
  return f'{name}: {first}' if first else name


def log_path(program: str, run_id: Optional[str] = None) -> str:
  """`<temp dir>/tfrecord-<program>-<run id>.log` (a UTC time and the
  process id when the run had no id yet)."""
  tag = run_id or (time.strftime('%Y%m%dT%H%M%S', time.gmtime()) +
                   f'-{os.getpid()}')
  return os.path.join(tempfile.gettempdir(), f'tfrecord-{program}-{tag}.log')


class _FirstLine(logging.Formatter):
  """Formats a record that carries a traceback (attached, or in its
  message) as its first line only."""

  def __init__(self, inner: Optional[logging.Formatter]):
    super().__init__()
    self._inner = inner or logging.Formatter()

  def format(self, record):
    saved = record.exc_info, record.exc_text, record.stack_info
    record.exc_info, record.exc_text, record.stack_info = None, None, None
    try:
      text = self._inner.format(record)
    finally:
      record.exc_info, record.exc_text, record.stack_info = saved
    if not (saved[0] or saved[2] or 'Traceback' in text):
      return text
    return text.partition('\n')[0] + ' [...]'


def _loud(record) -> bool:
  return _ONLY_THREAD[0] is None or record.thread == _ONLY_THREAD[0]


class _Keep(logging.Handler):
  """Keeps the last warnings and errors, in full, for the log file."""

  def __init__(self, kept):
    super().__init__(logging.WARNING)
    self._kept = kept
    self.setFormatter(logging.Formatter(
        '%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s'))

  def emit(self, record):
    try:
      self._kept.append(self.format(record))
    except Exception:  # pylint: disable=broad-except
      pass


class _QuietStream:
  """sys.stderr, less the tracebacks written to it directly (Beam's SDK
  worker prints a failed bundle's traceback there), which are kept."""

  def __init__(self, stream, kept):
    self._stream, self._kept = stream, kept
    self._swallow_newline = False

  def write(self, text):
    if TRACEBACK in text:
      self._kept.append(text)
      self._swallow_newline = True
      return len(text)
    if self._swallow_newline and not text.strip():
      self._swallow_newline = False
      return len(text)
    self._swallow_newline = False
    return self._stream.write(text)

  def __getattr__(self, name):
    return getattr(self._stream, name)


class Capture:
  """While a run goes: keeps the warnings and errors logged (with their
  tracebacks) for the log file and, unless `verbose`, shows only their
  first line on stderr.

  Usage:
    with Capture(verbose) as capture:
      ...
      capture.write_log(path, argv, exception)
  """

  def __init__(self, verbose: bool, keep: int = 300):
    self.verbose = verbose
    self._kept = collections.deque(maxlen=keep)
    self._handler = _Keep(self._kept)
    self._swapped = []
    self._stderr = None

  def __enter__(self):
    root = logging.getLogger()
    root.addHandler(self._handler)
    if not self.verbose:
      for handler in root.handlers:
        if type(handler) is logging.StreamHandler:  # pylint: disable=unidiomatic-typecheck
          self._swapped.append((handler, handler.formatter))
          handler.setFormatter(_FirstLine(handler.formatter))
          handler.addFilter(_loud)
      self._stderr = sys.stderr
      sys.stderr = _QuietStream(sys.stderr, self._kept)
    return self

  def __exit__(self, *unused):
    logging.getLogger().removeHandler(self._handler)
    for handler, formatter in self._swapped:
      handler.setFormatter(formatter)
      handler.removeFilter(_loud)
    self._swapped = []
    only_thread(None)
    if self._stderr is not None:
      sys.stderr = self._stderr
      self._stderr = None
    return False

  def write_log(self, path: str, program: str, argv: List[str],
                exc: BaseException) -> Optional[str]:
    """Writes the command, the kept warnings and errors and `exc`'s
    traceback to `path`; returns the path, or None if it could not be
    written."""
    parts = [f'{program} {shlex.join(argv)}',
             f'failed at {time.strftime("%Y-%m-%d %H:%M:%S %Z")}: '
             f'{describe(exc)}', '']
    kept = list(self._kept)
    if kept:
      parts += ['Warnings and errors logged during the run, oldest first:',
                ''] + kept + ['']
    parts += ['The traceback:', '',
              ''.join(traceback.format_exception(exc))]
    try:
      with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(parts))
    except OSError:
      return None
    return path
