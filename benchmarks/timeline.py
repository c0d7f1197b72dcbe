"""A timeline of one preprocessing run: what the launching process does,
when, and for how long.

    python benchmarks/timeline.py [--stages N] [--markdown] -- \\
        --modality text --input data.csv --output OUT --overwrite ...

Everything after `--` is passed to `python -m pipelines.preprocess`, which
runs in this process (its log on stderr, its summary and then the timeline
on stdout) with timers around its phases: the interpreter's
start, the imports of the large libraries, reading the command line,
building the pipeline (tf.Transform's tracing among it), Beam's
translation, the runner's stages, publishing. Nothing in the run changes
(the same records); the timers add a few milliseconds.

Phases are shown nested: a line's time includes the lines indented below
it. "the rest" lines are the part of a phase no line below it accounts
for. The runner's stages are summed (how many, how long in all, the
runner's own time between them), the N longest listed by name. Functions
called many times (Beam setting up each stage, pickling, measuring side
inputs; tf.Transform saving its graphs) are summed over the run.

Times are wall seconds of one run on a shared machine: run it twice and
read the second (the first fills the file cache).
"""

import argparse
import builtins
import functools
import os
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Libraries whose first import is timed: (top-level module, label).
LIBRARIES = (
    ('apache_beam', 'import Apache Beam'),
    ('tensorflow', 'import TensorFlow'),
    ('tensorflow_transform', 'import tf.Transform'),
    ('tfx_bsl', 'import tfx-bsl'),
    ('pyarrow', 'import PyArrow'),
    ('tensorflow_datasets', 'import TensorFlow Datasets'),
    ('PIL', 'import Pillow'),
)

# Functions timed each call, wrapped once their module is imported:
# (module, attribute path, label). A target this version of the code or
# of a library lacks is skipped (and named at the end).
PHASES = (
    ('pipelines.preprocess', '_configure',
     'read and check the command line and input'),
    ('pipelines.preprocess', '_take_output', 'take the output\'s lease'),
    ('pipelines.preprocess', '_build', 'build the pipeline'),
    ('tensorflow_transform.beam.impl', 'AnalyzeDataset.expand',
     'tf.Transform: trace the preprocessing function, plan the analysis'),
    ('pipelines.preprocess', '_run_pipeline', 'run the pipeline'),
    ('apache_beam.pipeline', 'Pipeline.to_runner_api',
     'Beam: the pipeline to its proto (pickles every DoFn)'),
    ('apache_beam.runners.portability.fn_api_runner.fn_runner',
     'FnApiRunner.create_stages', 'Beam: fuse the steps into stages'),
    ('apache_beam.runners.portability.fn_api_runner.fn_runner',
     'FnApiRunner.run_stages', 'Beam: run the stages'),
    ('transforms.output.manifest', 'publish', 'publish the dataset'),
)

# Functions called many times inside the stages, whose calls are summed:
# (module, attribute path, label).
SUMMED = (
    ('apache_beam.runners.worker.bundle_processor', 'BundleProcessor.__init__',
     'Beam: set up a stage\'s bundle processor (unpickle its DoFns)'),
    ('apache_beam.runners.worker.statecache', 'get_deep_size',
     'Beam: measure a side input\'s size for its cache'),
    ('apache_beam.internal.pickler', 'loads', 'Beam: unpickle'),
    ('apache_beam.internal.pickler', 'dumps', 'Beam: pickle'),
    ('tensorflow_transform.beam.impl', '_create_v2_saved_model',
     'tf.Transform: trace and save a SavedModel'),
    ('tensorflow_transform.beam.impl', '_RunMetaGraphDoFn._make_graph_state',
     'tf.Transform: load its analysis graph'),
    ('transforms.core.batches', 'ApplyTransform._load',
     'load the exported transform'),
    ('transforms.runtime.processes', '_new_pool',
     'start local worker processes and wait for them'),
    ('apache_beam.internal.util', 'run_using_threadpool',
     'Beam: run on a new thread pool (file sinks\' renames)'),
    ('transforms.output.tfds_metadata', 'write',
     'write the TFDS metadata (imports TFDS)'),
)

STAGE = ('apache_beam.runners.portability.fn_api_runner.fn_runner',
         'FnApiRunner._execute_bundle')


class Recorder:
  """Intervals (label, start, end, depth) of the main thread, and the
  runner's stages (name, start, end)."""

  def __init__(self):
    self.t0 = time.perf_counter()
    self.intervals: List[Tuple[str, float, float, int]] = []
    self.stages: List[Tuple[str, float, float]] = []
    self._depth = 0
    self._main = threading.main_thread()
    self._pending = {}  # module -> [(attribute path, label)]
    for module, attr, label in PHASES:
      self._pending.setdefault(module, []).append((attr, label))
    self._pending.setdefault(STAGE[0], []).append((STAGE[1], None))
    for module, attr, label in SUMMED:
      self._pending.setdefault(module, []).append((attr, ('sum', label)))
    self.sums: Dict[str, List[float]] = {}
    self.missing: List[str] = []

  def timed(self, label: str, fn: Callable) -> Callable:
    recorder = self

    # functools.wraps: a wrapped function a DoFn refers to is pickled by
    # reference to the module's name, as the original would be.
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      if threading.current_thread() is not recorder._main:
        return fn(*args, **kwargs)
      start = time.perf_counter()
      recorder._depth += 1
      try:
        return fn(*args, **kwargs)
      finally:
        recorder._depth -= 1
        recorder.intervals.append(
            (label, start, time.perf_counter(), recorder._depth))
    return wrapper

  def summed(self, label: str, fn: Callable) -> Callable:
    times = self.sums.setdefault(label, [])
    calls = threading.local()  # calls of fn in progress, per thread

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      outer = not getattr(calls, 'depth', 0)
      calls.depth = getattr(calls, 'depth', 0) + 1
      start = time.perf_counter()
      try:
        return fn(*args, **kwargs)
      finally:
        calls.depth -= 1
        if outer:  # a call inside another of the same counts once
          times.append(time.perf_counter() - start)
    return wrapper

  def stage_timer(self, fn: Callable) -> Callable:
    recorder = self

    @functools.wraps(fn)
    def wrapper(runner, runner_execution_context, bundle_context_manager,
                *args, **kwargs):
      start = time.perf_counter()
      try:
        return fn(runner, runner_execution_context, bundle_context_manager,
                  *args, **kwargs)
      finally:
        recorder.stages.append((bundle_context_manager.stage.name, start,
                                time.perf_counter()))
    return wrapper

  def patch_loaded(self) -> None:
    """Wraps the targets of every watched module imported by now."""
    for module in [m for m in self._pending if _imported(m)]:
      for attr, label in self._pending.pop(module):
        owner = sys.modules[module]
        *path, name = attr.split('.')
        try:
          for part in path:
            owner = getattr(owner, part)
          fn = getattr(owner, name)
        except AttributeError:
          self.missing.append(f'{module}.{attr}')
          continue
        if label is None:
          wrapped = self.stage_timer(fn)
        elif isinstance(label, tuple):
          wrapped = self.summed(label[1], fn)
        else:
          wrapped = self.timed(label, fn)
        if isinstance(owner, type) and isinstance(
            owner.__dict__.get(name), staticmethod):
          wrapped = staticmethod(wrapped)
        setattr(owner, name, wrapped)


def _imported(name: str) -> bool:
  """Whether the module `name` has finished importing (a module being
  imported is in sys.modules already, without its names yet)."""
  module = sys.modules.get(name)
  spec = getattr(module, '__spec__', None)
  return module is not None and not getattr(spec, '_initializing', False)


def _watch_imports(recorder: Recorder) -> None:
  """Times the first import of each library in LIBRARIES (as a phase), and
  wraps PHASES' functions as their modules arrive."""
  original = builtins.__import__
  libraries = dict(LIBRARIES)

  def importing(name, globals=None, locals=None, fromlist=(), level=0):  # pylint: disable=redefined-builtin
    top = name.partition('.')[0] if level == 0 else None
    if (top in libraries and top not in sys.modules and
        threading.current_thread() is recorder._main):
      label = libraries.pop(top)
      module = recorder.timed(label, original)(name, globals, locals,
                                              fromlist, level)
    else:
      module = original(name, globals, locals, fromlist, level)
    if recorder._pending:
      recorder.patch_loaded()
    return module

  builtins.__import__ = importing


def _seconds_since_boot() -> Optional[float]:
  """Now on the clock a process's start is counted on (seconds since the
  machine booted), or None where there is no such clock."""
  clock = getattr(time, 'CLOCK_BOOTTIME', None)
  return None if clock is None else time.clock_gettime(clock)


def _process_age(then: Optional[float]) -> Optional[float]:
  """Seconds from this process's start to `then` (a _seconds_since_boot()
  reading), or None.

  psutil is imported here, once the timed run is over: its import would
  otherwise count in the first row.
  """
  import psutil  # pylint: disable=import-outside-toplevel
  if then is None:
    return None
  try:
    started = psutil.Process().create_time() - psutil.boot_time()
  except psutil.Error:
    return None
  return then - started


def _rows(recorder: Recorder, end: float,
          age: float) -> List[Tuple[float, float, int, str]]:
  """(start, seconds, depth, label) rows in time order, starts from the
  process's start; each phase with children gets a 'the rest' row."""
  rows = [(0.0, age, 0, 'start Python (before this script\'s first line)')]
  shift = age - recorder.t0
  spans = sorted(recorder.intervals, key=lambda r: (r[1], -r[2]))
  for i, (label, start, stop, depth) in enumerate(spans):
    rows.append((start + shift, stop - start, depth, label))
    if label == 'Beam: run the stages':
      rows.extend(_stage_rows(recorder.stages, start, stop, depth + 1,
                              shift))
      continue
    # The part of the phase the phases inside it do not account for.
    inside = sum(e - s for _, s, e, d in spans[i + 1:]
                 if d == depth + 1 and start <= s < stop)
    if inside:
      rows.append((stop + shift - 1e-9, stop - start - inside, depth + 1,
                   'the rest'))
  rows.sort(key=lambda r: (r[0], r[2]))
  covered = sum(r[1] for r in rows if r[2] == 0)
  rows.append((end + shift, 0.0, 0, 'end of the run'))
  rows.append((0.0, end + shift - covered, 0,
               'not in any phase above (checks, logging, staging, summary)'))
  return rows


def _stage_rows(stages, start, stop, depth, shift):
  inside = sum(s[2] - s[1] for s in stages)
  names = len({s[0] for s in stages})
  return [(start + shift, inside, depth,
           f'{len(stages)} bundles of the runner\'s {names} stages (the '
           'things below happen in them)'),
          (start + shift + 1e-9, stop - start - inside, depth,
           'the runner between bundles (scheduling, watermarks)')]


def longest_stages(stages, count: int) -> List[Tuple[float, int, str]]:
  """(seconds, bundles, name) of the `count` stages that took longest."""
  by_name: Dict[str, List[float]] = {}
  for name, s, e in stages:
    by_name.setdefault(name, []).append(e - s)
  return sorted(((sum(t), len(t), name) for name, t in by_name.items()),
                reverse=True)[:count]


def _short(name: str, width: int = 70) -> str:
  name = name.replace('PreprocessDataset/', '')
  return name if len(name) <= width else name[:width - 3] + '...'


def _print(rows, markdown: bool, out) -> None:
  if markdown:
    print('| starts at s | seconds | phase |', file=out)
    print('|---|---|---|', file=out)
  for start, seconds, depth, label in rows:
    if markdown:
      indent = '&nbsp;' * 4 * depth
      print(f'| {start:.2f} | {seconds:.2f} | {indent}{label} |', file=out)
    else:
      print(f'{start:7.2f} {seconds:7.2f}  {"  " * depth}{label}', file=out)


def main(argv: Optional[List[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if '--' not in argv:
    print('usage: python benchmarks/timeline.py [--stages N] [--markdown] '
          '-- ARGUMENTS OF pipelines.preprocess', file=sys.stderr)
    return 2
  cut = argv.index('--')
  parser = argparse.ArgumentParser()
  parser.add_argument('--stages', type=int, default=5,
                      help='how many of the longest stages to name')
  parser.add_argument('--markdown', action='store_true',
                      help='print a Markdown table')
  own = parser.parse_args(argv[:cut])
  age_then = _seconds_since_boot()
  recorder = Recorder()
  _watch_imports(recorder)
  sys.path.insert(0, ROOT)
  # As the command does (python -m pipelines.preprocess): the garbage
  # collector paused until the pipeline is built (pipelines/collector.py),
  # TensorFlow's native start-up lines filtered (pipelines/quiet.py).
  from pipelines import collector  # pylint: disable=import-outside-toplevel
  collector.pause()
  from pipelines import quiet  # pylint: disable=import-outside-toplevel
  quiet.start(argv[cut + 1:])
  from pipelines import outcome  # pylint: disable=import-outside-toplevel
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  code = preprocess.main(argv[cut + 1:])
  end = time.perf_counter()
  age = _process_age(age_then)
  out = sys.stdout
  print(file=out)
  _print(_rows(recorder, end, age if age is not None else 0.0),
         own.markdown, out)
  print('\nsummed over the run (calls, seconds):', file=out)
  for label, times in recorder.sums.items():
    print(f'{len(times):7d} {sum(times):7.2f}  {label}', file=out)
  if own.stages:
    print(f'\nthe {own.stages} longest stages (seconds, bundles, name):',
          file=out)
    for seconds, bundles, name in longest_stages(recorder.stages,
                                                 own.stages):
      print(f'{seconds:7.2f} {bundles:4d}  {_short(name, 110)}', file=out)
  if recorder.missing:
    print(f'not timed (not in this version): {", ".join(recorder.missing)}',
          file=out)
  outcome.exit_now(code)
  return code


if __name__ == '__main__':
  sys.exit(main())
