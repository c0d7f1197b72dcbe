"""Progress counts of a running job, for the launcher's progress line.

The DoFns count what they have done (images processed, bytes of the input
files read) with `counter(modality, name)`; the launcher
(pipelines/progress.py) reads the sums every few seconds and turns them,
through the modality's `Measure`, into done of total, rate and time left.

Why not Beam's metrics alone. A `Counter` increments a Beam counter (in
the namespace `tfrecord.<modality>.progress`, apart from the counters the
manifest is checked against), but that is not what the launcher reads
while the job runs, because no local runner reports it then (Beam 2.77,
checked with a DoFn counting 300 elements while a thread polled):

- the DirectRunner (FnApiRunner, in_memory, multi_threading and
  multi_processing alike) runs the whole pipeline inside `pipeline.run()`
  and only then returns the PipelineResult: there is nothing to query
  before the end (its ProgressRequester thread is off by default and, when
  on, hands its answers to no one);
- the PortableRunner with a local job service (`--job_endpoint embed`)
  returns at once, but `result.metrics()` is empty while the job runs: the
  job service asks the embedded FnApiRunner's result, which exists only at
  the end (and the PortableRunner's result caches its first answer);
- Dataflow does report attempted ("tentative") values while running, and
  re-queries the service on every `query()`.

So every increment is also added to a tally the launcher reads directly:

- in the launching process (DirectRunner in_memory and multi_threading,
  a portable runner's LOOPBACK workers), to an in-memory tally under the
  run's token;
- in another process on the same machine (multi_processing, an EXTERNAL
  worker pool started beside the launcher), to that process's own tally, written a
  second after a count (so at most once a second) as a small JSON file
  into the run's progress folder (a local temporary folder the launcher
  made, passed to the DoFns with their counters);
- elsewhere (Dataflow, DOCKER workers) the folder does not exist and
  nothing is written: the launcher reads the runner's Beam counters
  instead, where it reports them while running (Dataflow).

Workers logging their own progress (as the image decoder once did) is no
substitute: each knows only its share, and the log lines of a worker in
another process (multi_processing) reach the launcher's stderr only from
WARNING up, each as a dump of Beam's log entry ("Worker: severity: WARN
timestamp {...} message: ...").

A Counter made while no run is being reported (tests building pipelines
by hand, pipelines/validate.py) only increments its Beam counter. Counts
are attempts: a retried bundle counts twice (the launcher caps at 100%).
"""

import json
import os
import secrets
import shutil
import tempfile
import threading
from typing import Dict, NamedTuple, Optional, Tuple

from apache_beam.metrics import Metrics

NAMESPACE = 'tfrecord.{}.progress'
# How long after a count another process writes its tally file (seconds).
WRITE_SECONDS = 1.0


class Channel(NamedTuple):
  """Where a run's counts go: its token and its local progress folder."""
  token: str
  folder: str


# The launching process's tallies, by run token: {counter key: value}.
_RUNS: Dict[str, Dict[str, int]] = {}
# The tallies of this process when it is not the launching one, by token,
# and the tokens whose tally is due to be written.
_OWN: Dict[str, Dict[str, int]] = {}
_DUE = set()
_UNREACHABLE = set()
_LOCK = threading.Lock()
_PROCESS = secrets.token_hex(6)
_CURRENT: Optional[Channel] = None


def key(modality: str, name: str) -> str:
  """The tally key of a counter: '<modality>.<name>'."""
  return f'{modality}.{name}'


class Counter:
  """A Beam counter that also reports to the run's progress tally.

  Made in a DoFn's constructor (like Metrics.counter), while the launcher
  reports a run (see start); incremented on the DoFn's own thread.
  """

  def __init__(self, modality: str, name: str):
    self._metric = Metrics.counter(NAMESPACE.format(modality), name)
    self._key = key(modality, name)
    self._channel = _CURRENT

  def inc(self, n: int = 1) -> None:
    if not n:
      return
    self._metric.inc(n)
    if self._channel is not None:
      _add(self._channel, self._key, n)


def counter(modality: str, name: str) -> Counter:
  """The progress counter `name` of a modality."""
  return Counter(modality, name)


def _add(channel: Channel, name: str, n: int) -> None:
  with _LOCK:
    tally = _RUNS.get(channel.token)
    if tally is not None:
      tally[name] = tally.get(name, 0) + n
      return
    if channel.token in _UNREACHABLE:
      return
    own = _OWN.setdefault(channel.token, {})
    own[name] = own.get(name, 0) + n
    if channel.token in _DUE:
      return
    _DUE.add(channel.token)
  # Written a second from now, with whatever is counted by then.
  timer = threading.Timer(WRITE_SECONDS, _write, (channel,))
  timer.daemon = True
  timer.start()


def _write(channel: Channel) -> None:
  """Replaces this process's tally file in the run's folder; a folder that
  is not on this machine (a remote worker) is not tried again."""
  with _LOCK:
    _DUE.discard(channel.token)
    tally = dict(_OWN.get(channel.token, {}))
  if not os.path.isdir(channel.folder):
    with _LOCK:
      _UNREACHABLE.add(channel.token)
    return
  path = os.path.join(channel.folder, f'{_PROCESS}-{os.getpid()}.json')
  try:
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
      json.dump(tally, f)
    os.replace(path + '.tmp', path)
  except OSError:
    pass  # the run ended and removed its folder meanwhile


def start() -> Channel:
  """Opens the progress channel of a run in the launching process: the
  Counters made from now on (until stop) report to it."""
  global _CURRENT  # pylint: disable=global-statement
  channel = Channel(secrets.token_hex(8),
                    tempfile.mkdtemp(prefix='tfrecord-progress-'))
  with _LOCK:
    _RUNS[channel.token] = {}
  _CURRENT = channel
  return channel


def stop(channel: Channel) -> None:
  """Closes a run's channel and removes its folder."""
  global _CURRENT  # pylint: disable=global-statement
  with _LOCK:
    _RUNS.pop(channel.token, None)
  if _CURRENT == channel:
    _CURRENT = None
  shutil.rmtree(channel.folder, ignore_errors=True)


def read(channel: Channel) -> Dict[str, int]:
  """The run's counts so far: this process's tally plus the tally files
  of the other processes."""
  with _LOCK:
    out = dict(_RUNS.get(channel.token, {}))
  try:
    names = os.listdir(channel.folder)
  except OSError:
    names = []
  for name in names:
    if not name.endswith('.json'):
      continue
    try:
      with open(os.path.join(channel.folder, name), encoding='utf-8') as f:
        tally = json.load(f)
    except (OSError, ValueError):
      continue  # being replaced
    for k, v in tally.items():
      out[k] = out.get(k, 0) + int(v)
  return out


class Measure:
  """How a modality's progress counts become done of total (the base of
  the kinds below; a modality's `progress` method returns one).

  Attributes:
    unit: 'images' (counted items) or 'bytes'.
    counters: The counters it reads, as tally keys.
  """

  unit = ''
  counters: Tuple[str, ...] = ()

  def done_total(self, values: Dict[str, int]
                 ) -> Tuple[int, Optional[int]]:
    """(done, total) from the counts; total is None while not known."""
    raise NotImplementedError

  def note(self, values: Dict[str, int], short: bool = False) -> str:
    """What else to show ('1,200 documents'), or ''; `short` for the
    one-line bar."""
    del values, short
    return ''

  def waiting(self, values: Dict[str, int]) -> str:
    """What the run does while nothing is done yet."""
    del values
    return 'starting'


class ItemMeasure(Measure):
  """Items done of items listed, over `passes` passes: the items listed
  (counted as the listing goes; complete once the items are shuffled,
  which is before any is processed) times the passes.

  Args:
    modality: Its name (the counters' namespace).
    unit: What an item is ('images').
    listed: The counter of items listed.
    done: The counters whose sum is the items done (every pass).
    passes: How often each item is processed.
  """

  def __init__(self, modality: str, unit: str, listed: str,
               done: Tuple[str, ...], passes: int = 1):
    self.unit = unit
    self._listed = key(modality, listed)
    self._done = tuple(key(modality, d) for d in done)
    self.passes = passes
    self.counters = (self._listed,) + self._done

  def done_total(self, values):
    done = sum(values.get(d, 0) for d in self._done)
    listed = values.get(self._listed, 0)
    # Before the first item is done the listing may still be going.
    return done, (listed * self.passes if done and listed else None)

  def waiting(self, values):
    listed = values.get(self._listed, 0)
    if not listed:
      return 'starting'
    return f'listing {self.unit}: {listed:,} found so far'

  def note(self, values, short=False):
    if self.passes == 1 or short:
      return ''
    return (f'{self.passes} passes over {values.get(self._listed, 0):,} '
            f'{self.unit}')


class BytesMeasure(Measure):
  """Bytes of the input files read of their total size times the passes
  over them (the size is known on the launching machine), and the items
  (documents, rows) read, records encoded (core/batches.ToRecords) and
  records handed to the writer (output/shards.py) so far.

  Args:
    modality: Its name (the counters' namespace).
    total_bytes: The input files' total size, or None when unknown.
    passes: How often the pipeline reads the input.
    items: The counter of items read, and what an item is.
  """

  unit = 'bytes'

  def __init__(self, modality: str, total_bytes: Optional[int], passes: int,
               items: Tuple[str, str]):
    self._read = key(modality, 'bytes_read')
    self._items, self.item_name = key(modality, items[0]), items[1]
    self._encoded = key(modality, 'encoded')
    self._written = key(modality, 'written')
    self.total_bytes, self.passes = total_bytes, passes
    self.counters = (self._read, self._items, self._encoded, self._written)

  def done_total(self, values):
    total = (self.total_bytes * self.passes if self.total_bytes else None)
    return values.get(self._read, 0), total

  def waiting(self, values):
    if not self.total_bytes:
      return 'starting'
    passes = (f' ({self.passes} passes over '
              f'{format_bytes(self.total_bytes)} of input)'
              if self.passes > 1 else '')
    return (f'starting: {format_bytes(self.total_bytes * self.passes)} to '
            f'read{passes}')

  def note(self, values, short=False):
    items = f'{values.get(self._items, 0):,} {self.item_name}'
    # What moves once the input is read: the records being made and
    # written.
    encoded, written = (values.get(self._encoded, 0),
                        values.get(self._written, 0))
    if short:  # what moves: the items read, then the records
      return (f'{written:,} records written' if written else
              f'{encoded:,} records encoded' if encoded else items)
    parts = []
    if self.passes > 1 and self.total_bytes:
      parts.append(f'{self.passes} passes over {format_bytes(self.total_bytes)}'
                   ' of input')
    parts.append(items)
    if encoded:
      parts.append(f'records: {encoded:,} encoded, {written:,} written')
    return '; '.join(parts)


def format_bytes(n: float) -> str:
  """'512 B', '3.4 kB', '12.0 MB', '1.3 GB' (powers of 1000)."""
  for unit, size in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
    if n >= size:
      return f'{n / size:.1f} {unit}'
  return f'{int(n)} B'
