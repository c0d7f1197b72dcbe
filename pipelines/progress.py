"""The progress line of a running job: done of total, rate and time left.

While the pipeline runs, a thread of the launching process reads the run's
progress counts every INTERVAL_SECONDS (transforms/core/progress.py says
where they come from, and why not from Beam's metrics alone), turns them
into done of total through the modality's Measure, and logs one line to
the `pipelines.progress` logger:

    progress: 51% (1,530 of 3,000 images), 412 images/s, about 4 s left

or, when stderr is a terminal (`--progress bar`, or `auto`), redraws one
line in place and ends it with a newline when the run is done:

    [#####.....] 51% 1,530/3,000 images, 412 images/s, 0:04 left

Images count inputs processed of inputs listed; text and sensor count the
bytes of the input files read of their total size (known on the launching
machine) times the passes over them, with the documents or rows read so
far, and then the records encoded and written. The rate is that of the
last RATE_WINDOW_SECONDS (of the whole run when nothing moved in that
time, as between two passes); the time left assumes it holds. It runs to
the last image or input byte read, not through the shuffle and writing
that follow (the line says `finishing` then; for text and sensor data its
records encoded and written still move). Nothing is shown when the run
ends before the first interval.
"""

import collections
import logging
import os
import sys
import threading
import time
from typing import Dict, Optional

from transforms.core import flags
from transforms.core import progress

MODES = ('auto', 'bar', 'log', 'off')
# Seconds between two progress lines (tests make it small).
INTERVAL_SECONDS = 5.0
# The rate is measured over this many seconds.
RATE_WINDOW_SECONDS = 30.0
BAR_WIDTH = 10

_LOG = logging.getLogger('pipelines.progress')


def mode(value, stream=None) -> str:
  """The checked --progress: bar, log or off (auto: bar when `stream`,
  default stderr, is a terminal, else log).

  Raises:
    UsageError: Not one of MODES.
  """
  chosen = flags.choice('progress', value if value is not None else 'auto',
                        MODES)
  if chosen != 'auto':
    return chosen
  stream = stream if stream is not None else sys.stderr
  try:
    return 'bar' if stream.isatty() else 'log'
  except (AttributeError, ValueError):
    return 'log'


def report(chosen: str, measure: Optional[progress.Measure]):
  """A context manager reporting a run's progress in mode `chosen` (see
  `mode`) while it is entered: a Reporter, or one that does nothing (off,
  or no measure)."""
  if chosen == 'off' or measure is None:
    return _Silent()
  return Reporter(measure, bar=chosen == 'bar')


class _Silent:
  """No progress line."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False

  def attach(self, result) -> None:
    del result


class Reporter:
  """Reports a run's progress from a thread while entered.

  Enter it before the pipeline is built (the DoFns' progress counters
  report to the channel it opens), `attach` the PipelineResult once
  `run()` returns (for runners that report counters while running), and
  leave it when the run ends: after a successful run that showed a line,
  it shows a last one at 100%.

  Args:
    measure: The modality's Measure.
    bar: Redraw one line in place instead of logging lines.
    interval: Seconds between lines (default INTERVAL_SECONDS).
  """

  def __init__(self, measure: progress.Measure, bar: bool = False,
               interval: Optional[float] = None):
    self._measure, self._bar = measure, bar
    self._interval = INTERVAL_SECONDS if interval is None else interval
    self._stop = threading.Event()
    self._thread = None
    self._channel = None
    self._result = None
    self._shown = False
    self._start = 0.0
    self._samples = collections.deque()
    self._output = None

  def __enter__(self):
    self._channel = progress.start()
    self._start = time.monotonic()
    self._samples.append((self._start, 0))
    if self._bar:
      self._output = _BarOutput()
      self._output.open()
    self._thread = threading.Thread(target=self._loop, daemon=True,
                                    name='progress')
    self._thread.start()
    return self

  def attach(self, result) -> None:
    """The run's PipelineResult, whose counters are read as well when its
    runner reports them while running (Dataflow)."""
    if _reports_while_running(result):
      self._result = result

  def __exit__(self, exc_type, exc, tb):
    self._stop.set()
    self._thread.join(timeout=10)
    try:
      if exc_type is None and self._shown:
        self._show(self._final_line())
    finally:
      if self._output is not None:
        self._output.close()
      progress.stop(self._channel)
    return False

  # -------------------------------------------------------------- counts --

  def values(self) -> Dict[str, int]:
    """The run's counts: the local tallies, or the runner's counters where
    it reports more."""
    values = progress.read(self._channel)
    if self._result is not None:
      for name, value in _metric_values(self._result,
                                        self._measure.counters).items():
        values[name] = max(values.get(name, 0), value)
    return values

  def _loop(self):
    while not self._stop.wait(self._interval):
      try:
        self._show(self._line(self.values(), time.monotonic()))
      except Exception:  # pylint: disable=broad-except
        _LOG.debug('could not report progress', exc_info=True)

  def _rate(self, done: int, now: float) -> float:
    """Per second over the window; over the whole run when nothing moved
    in the window."""
    self._samples.append((now, done))
    while (len(self._samples) > 2 and
           now - self._samples[1][0] >= RATE_WINDOW_SECONDS):
      self._samples.popleft()
    t0, d0 = self._samples[0]
    if done > d0 and now > t0:
      return (done - d0) / (now - t0)
    return done / (now - self._start) if now > self._start else 0.0

  # ---------------------------------------------------------------- lines --

  def _line(self, values: Dict[str, int], now: float) -> str:
    m = self._measure
    done, total = m.done_total(values)
    rate = self._rate(done, now)
    note = m.note(values, short=self._bar)
    if not done:
      waiting = m.waiting(values)
      return (f'{_bar(0)} {waiting}' if self._bar else
              f'progress: {waiting}')
    if total is None:
      if self._bar:
        return _fit(f'{_bar(0)} {_amount(m, done)}', note,
                    _rate_text(m, rate))
      return (f'progress: {_amount(m, done)}{f" ({note})" if note else ""}, '
              f'{_rate_text(m, rate)}')
    share = min(done / total, 0.99) if total else 0.0
    if done >= total:
      left = 'finishing'
    elif rate > 0:
      left = (f'{_clock(_seconds_left(done, total, rate))} left' if self._bar
              else f'about {_about(_seconds_left(done, total, rate))} left')
    else:
      left = 'time left not known yet'
    if self._bar:
      return _fit(f'{_bar(share)} {share:.0%} {_of(m, done, total, "/")}',
                  note, _rate_text(m, rate), left)
    return (f'progress: {share:.0%} ({_of(m, done, total, " of ")}'
            f'{f"; {note}" if note else ""}), {_rate_text(m, rate)}, {left}')

  def _final_line(self) -> str:
    """The line of a finished run: everything was read."""
    m = self._measure
    values = self.values()
    done, total = m.done_total(values)
    done = total if total else done
    seconds = max(time.monotonic() - self._start, 1e-9)
    rate = _rate_text(m, done / seconds)
    note = m.note(values, short=self._bar)
    if self._bar:
      what = (f'{_bar(1.0)} 100% {_of(m, done, total, "/")}' if total else
              f'{_bar(1.0)} {_amount(m, done)}')
      return ', '.join(p for p in (what, note, rate,
                                   f'done in {_clock(seconds)}') if p)
    what = (f'100% ({_of(m, done, total, " of ")}' if total else
            f'done ({_amount(m, done)}')
    return (f'progress: {what}{f"; {note}" if note else ""}), {rate}, done '
            f'in {_about(seconds)}')

  def _show(self, line: str) -> None:
    self._shown = True
    if self._output is not None:
      self._output.draw(line)
    else:
      _LOG.info('%s', line)


def _reports_while_running(result) -> bool:
  """Whether a PipelineResult's counters are worth reading while its job
  runs: not the local runner's (it exists only once the run is over) nor
  the PortableRunner's (empty until the end, and it keeps its first
  answer for good)."""
  module = type(result).__module__
  return not (module.endswith('fn_api_runner.fn_runner') or
              module.endswith('portability.portable_runner'))


def _metric_values(result, keys) -> Dict[str, int]:
  """{tally key: attempted sum} of the progress counters a runner
  reports; {} when it reports none (yet)."""
  from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=import-outside-toplevel
  out: Dict[str, int] = {}
  wanted = set(keys)
  namespaces = {progress.NAMESPACE.format(k.split('.', 1)[0]) for k in keys}
  try:
    for namespace in namespaces:
      found = result.metrics().query(
          MetricsFilter().with_namespace(namespace))['counters']
      modality = namespace.split('.')[1]
      for c in found:
        name = progress.key(modality, c.key.metric.name)
        if name in wanted and c.attempted:
          out[name] = out.get(name, 0) + int(c.attempted)
  except Exception:  # pylint: disable=broad-except
    return {}
  return out


class _BarOutput:
  """Draws the bar line on stderr through a handler of the progress
  logger (which then stops passing its records on), and ends the line
  before any other log line is written to stderr."""

  def __init__(self):
    self.visible = False
    self._width = 0
    self._handler = _BarHandler(self)
    self._breaker = _BreakBarLine(self)
    self._saved = None
    self._guarded = []

  def open(self):
    self._saved = (_LOG.level, _LOG.propagate)
    _LOG.setLevel(logging.INFO)
    _LOG.propagate = False
    _LOG.addHandler(self._handler)
    for handler in logging.getLogger().handlers:
      if _same_file(getattr(handler, 'stream', None), sys.stderr):
        handler.addFilter(self._breaker)
        self._guarded.append(handler)

  def draw(self, line: str) -> None:
    _LOG.info('%s', line)

  def write(self, line: str) -> None:
    """Writes `line` over the previous one (the handler's emit)."""
    pad = max(self._width - len(line), 0)
    sys.stderr.write('\r' + line + ' ' * pad)
    sys.stderr.flush()
    self._width = len(line)
    self.visible = True

  def end_line(self) -> None:
    if self.visible:
      sys.stderr.write('\n')
      sys.stderr.flush()
      self.visible = False
      self._width = 0

  def close(self):
    self.end_line()
    _LOG.removeHandler(self._handler)
    for handler in self._guarded:
      handler.removeFilter(self._breaker)
    _LOG.setLevel(self._saved[0])
    _LOG.propagate = self._saved[1]


def _same_file(stream, other) -> bool:
  """Whether two streams write to one file descriptor (sys.stderr may be
  a wrapper of the stream a log handler holds, see errors.Capture)."""
  if stream is None:
    return False
  if stream is other:
    return True
  try:
    return stream.fileno() == other.fileno()
  except (AttributeError, OSError, ValueError):
    return False


class _BarHandler(logging.Handler):

  def __init__(self, output: _BarOutput):
    super().__init__(logging.INFO)
    self._output = output

  def emit(self, record):
    try:
      self._output.write(record.getMessage())
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)


class _BreakBarLine(logging.Filter):
  """Ends the bar's line before another log line is written below it."""

  def __init__(self, output: _BarOutput):
    super().__init__()
    self._output = output

  def filter(self, record):
    self._output.end_line()
    return True


def _fit(what: str, note: str, *rest: str) -> str:
  """The bar line's parts joined; on a terminal too narrow for it, the
  note is left out, then the end cut."""
  line = ', '.join(p for p in (what, note) + rest if p)
  width = _columns()
  if width is None or len(line) <= width:
    return line
  return ', '.join(p for p in (what,) + rest if p)[:width]


def _columns() -> Optional[int]:
  """The width of the terminal stderr is, less one; None when it is not a
  terminal."""
  try:
    if not sys.stderr.isatty():
      return None
    return max(os.get_terminal_size(sys.stderr.fileno()).columns - 1, 20)
  except (AttributeError, OSError, ValueError):
    return None


def _bar(share: float) -> str:
  filled = int(round(max(0.0, min(share, 1.0)) * BAR_WIDTH))
  return '[' + '#' * filled + '.' * (BAR_WIDTH - filled) + ']'


def _amount(m: progress.Measure, n: float) -> str:
  if m.unit == 'bytes':
    return f'{progress.format_bytes(n)} read'
  return f'{int(n):,} {m.unit}'


def _of(m: progress.Measure, done: float, total: float, sep: str) -> str:
  """'1,530 of 3,000 images', '3.1 MB of 6.0 MB read' (sep ' of '), or
  '1,530/3,000 images', '3.1/6.0 MB' (sep '/')."""
  if m.unit == 'bytes' and sep == '/':
    # '3.1/6.0 MB' when both are in one unit.
    first, second = progress.format_bytes(done), progress.format_bytes(total)
    if first.split(' ')[-1] == second.split(' ')[-1]:
      first = first.split(' ')[0]
    return f'{first}/{second}'
  if m.unit == 'bytes':
    return (f'{progress.format_bytes(done)}{sep}{progress.format_bytes(total)}'
            ' read')
  return f'{int(done):,}{sep}{int(total):,} {m.unit}'


def _rate_text(m: progress.Measure, rate: float) -> str:
  if m.unit == 'bytes':
    return f'{progress.format_bytes(rate)}/s'
  return (f'{rate:,.0f}' if rate >= 10 else f'{rate:.1f}') + f' {m.unit}/s'


def _seconds_left(done: float, total: float, rate: float) -> float:
  return max(total - done, 0) / rate


def _about(seconds: float) -> str:
  """'4 s', '3 min', '1 h 05 min'."""
  seconds = int(round(seconds))
  if seconds < 90:
    return f'{seconds} s'
  minutes = int(round(seconds / 60))
  if minutes < 60:
    return f'{minutes} min'
  return f'{minutes // 60} h {minutes % 60:02d} min'


def _clock(seconds: float) -> str:
  """'0:04', '12:34', '1:02:03'."""
  seconds = int(round(seconds))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return (f'{hours}:{minutes:02d}:{secs:02d}' if hours else
          f'{minutes}:{secs:02d}')
