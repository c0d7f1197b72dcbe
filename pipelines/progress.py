"""The progress of a running job: done of total, rate and time left.

While the pipeline runs, a thread of the launching process reads the run's
progress counts every INTERVAL_SECONDS (transforms/runtime/progress.py says
where they come from, and why not from Beam's metrics alone) and turns
them into done of total through the modality's Measure. With `--progress
log` (and `auto` when stderr is not a terminal) it logs one line to the
`pipelines.progress` logger each time:

    progress: 51% (1,530 of 3,000 images), 412 images/s, about 4 s left

With `--progress bar` (and `auto` on a terminal) a tqdm bar on stderr
shows the counts, the rate and the time left, and after them what the run
does (what it waits for, the records written, `finishing`):

     51%|█████     | 1530/3000 [00:04<00:04, 412.00images/s]

A log line written to stderr meanwhile clears the bar first (it is drawn
again below at the next interval); the bar's line is ended however the
run ends.

Images count inputs processed of inputs listed; text and sensor count the
bytes of the input files read of their total size (known on the launching
machine) times the passes over them, with the documents or rows read so
far, and then the records encoded and written. The log line's rate is that
of the last RATE_WINDOW_SECONDS (of the whole run when nothing moved in
that time, as between two passes); the time left assumes it holds. It runs
to the last image or input byte read, not through the shuffle and writing
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

import tqdm

from transforms.core import flags
from transforms.runtime import progress

MODES = ('auto', 'bar', 'log', 'off')
# Seconds between two progress lines (tests make it small).
INTERVAL_SECONDS = 5.0
# The rate is measured over this many seconds.
RATE_WINDOW_SECONDS = 30.0

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
  leave it when the run ends: after a successful run that showed its
  progress, it shows it once more at 100%.

  Args:
    measure: The modality's Measure.
    bar: Draw a bar on stderr instead of logging lines.
    interval: Seconds between lines (default INTERVAL_SECONDS).
  """

  def __init__(self, measure: progress.Measure, bar: bool = False,
               interval: Optional[float] = None):
    self._measure, self._wants_bar = measure, bar
    self._interval = INTERVAL_SECONDS if interval is None else interval
    self._stop = threading.Event()
    self._thread = None
    self._channel = None
    self._result = None
    self._shown = False
    self._start = 0.0
    self._samples = collections.deque()
    self._bar = None
    self._guarded = []

  def __enter__(self):
    self._channel = progress.start()
    self._start = time.monotonic()
    self._samples.append((self._start, 0))
    if self._wants_bar:
      self._open_bar()
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
        if self._bar is not None:
          self._draw(self.values(), final=True)
        else:
          _LOG.info('%s', self._final_line())
    finally:
      if self._bar is not None:
        self._close_bar()
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
        if self._bar is not None:
          self._draw(self.values())
        else:
          self._shown = True
          _LOG.info('%s', self._line(self.values(), time.monotonic()))
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

  # ----------------------------------------------------------- log lines --

  def _line(self, values: Dict[str, int], now: float) -> str:
    m = self._measure
    done, total = m.done_total(values)
    rate = self._rate(done, now)
    note = m.note(values)
    if not done:
      return f'progress: {m.waiting(values)}'
    if total is None:
      return (f'progress: {_amount(m, done)}{f" ({note})" if note else ""}, '
              f'{_rate_text(m, rate)}')
    share = min(done / total, 0.99) if total else 0.0
    if done >= total:
      left = 'finishing'
    elif rate > 0:
      left = f'about {_about(max(total - done, 0) / rate)} left'
    else:
      left = 'time left not known yet'
    return (f'progress: {share:.0%} ({_of(m, done, total)}'
            f'{f"; {note}" if note else ""}), {_rate_text(m, rate)}, {left}')

  def _final_line(self) -> str:
    """The line of a finished run: everything was read."""
    m = self._measure
    values = self.values()
    done, total = m.done_total(values)
    done = total if total else done
    seconds = max(time.monotonic() - self._start, 1e-9)
    note = m.note(values)
    what = (f'100% ({_of(m, done, total)}' if total else
            f'done ({_amount(m, done)}')
    return (f'progress: {what}{f"; {note}" if note else ""}), '
            f'{_rate_text(m, done / seconds)}, done in {_about(seconds)}')

  # ----------------------------------------------------------------- bar --

  def _open_bar(self) -> None:
    """A tqdm bar on stderr, first drawn after one interval, which the log
    handlers writing to stderr clear before their lines."""
    in_bytes = self._measure.unit == 'bytes'
    # tqdm draws nothing on a terminal that reports no size (a
    # pseudo-terminal may); it is given one.
    size = {'ncols': 80, 'nrows': 24} if _unsized(sys.stderr) else {}
    self._bar = tqdm.tqdm(
        file=sys.stderr, unit='B' if in_bytes else self._measure.unit,
        unit_scale=in_bytes, unit_divisor=1000, dynamic_ncols=not size,
        delay=self._interval, mininterval=0, miniters=0, **size)
    for handler in logging.getLogger().handlers:
      if _same_file(getattr(handler, 'stream', None), sys.stderr):
        handler.addFilter(self._clear_bar)
        self._guarded.append(handler)

  def _draw(self, values: Dict[str, int], final: bool = False) -> None:
    """Moves the bar to the counts, followed by what the run does: what
    it waits for while nothing is done, `finishing` once everything is
    read, else the measure's short note. `final`: the end of a run that
    succeeded, everything read, drawn when the bar is closed."""
    m, bar = self._measure, self._bar
    done, total = m.done_total(values)
    if not done:
      doing = m.waiting(values)
    elif total and done >= total and not final:
      doing = 'finishing'
    else:
      doing = m.note(values, short=True)
    if total and (final or done > total):
      done = total  # a retried bundle counts twice
    bar.total = total
    bar.set_postfix_str(doing, refresh=False)
    if final:
      bar.n = done
    elif bar.update(done - bar.n):
      self._shown = True

  def _clear_bar(self, record) -> bool:
    """The filter of a log handler writing to stderr: clears the bar
    before the handler writes its line."""
    del record
    if self._shown:
      self._bar.clear()
    return True

  def _close_bar(self) -> None:
    """Ends the bar's line (when it was drawn) and removes the filters."""
    self._bar.close()
    for handler in self._guarded:
      handler.removeFilter(self._clear_bar)


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


def _unsized(stream) -> bool:
  """Whether `stream` is a terminal whose size reads as 0 columns or
  rows."""
  try:
    return 0 in os.get_terminal_size(stream.fileno())
  except (AttributeError, OSError, ValueError):
    return False


def _amount(m: progress.Measure, n: float) -> str:
  if m.unit == 'bytes':
    return f'{progress.format_bytes(n)} read'
  return f'{int(n):,} {m.unit}'


def _of(m: progress.Measure, done: float, total: float) -> str:
  """'1,530 of 3,000 images', '3.1 MB of 6.0 MB read'."""
  if m.unit == 'bytes':
    return (f'{progress.format_bytes(done)} of '
            f'{progress.format_bytes(total)} read')
  return f'{int(done):,} of {int(total):,} {m.unit}'


def _rate_text(m: progress.Measure, rate: float) -> str:
  if m.unit == 'bytes':
    return f'{progress.format_bytes(rate)}/s'
  return (f'{rate:,.0f}' if rate >= 10 else f'{rate:.1f}') + f' {m.unit}/s'


def _about(seconds: float) -> str:
  """'4 s', '3 min', '1 h 05 min'."""
  seconds = int(round(seconds))
  if seconds < 90:
    return f'{seconds} s'
  minutes = int(round(seconds / 60))
  if minutes < 60:
    return f'{minutes} min'
  return f'{minutes // 60} h {minutes % 60:02d} min'
