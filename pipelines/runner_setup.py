"""How both commands (preprocess, validate) set up Beam's runner: the
runner checked before Beam reads it (a verified runner, or one allowed),
and on this machine the DirectRunner's mode and workers, no
construction-time type checks, no timed flush in the local data plane, and
Beam's FnApiRunner rather than Prism. (The values of Beam's options and the
flags no one declares are checked by pipelines/command_line.py.)
"""

import os
from typing import List, Optional

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import TypeOptions

from pipelines import command_line
from pipelines import options as options_lib
from transforms.compat import beam as compat_beam
from transforms.core.errors import UsageError


def apply_local_defaults(options: PipelineOptions, argv: List[str],
                         default_workers: Optional[int] = None) -> None:
  """Picks the DirectRunner's mode unless the flags name one.

  `--workers N` sets the number of workers (threads when N > 1). Without
  it, `default_workers` (the modality's choice: images, one while worker
  processes decode, else one per core, as the decoders release the GIL;
  text and sensor rows, one, as
  their work is NumPy and TensorFlow batches and two threads or processes
  were not faster on 2 cores), or one per core when None. Whatever the
  runner, the timed flush of the local data plane is turned off (see
  compat_beam.disable_timed_flush); it only concerns runners that run in
  this process.
  On the DirectRunner, Beam's type checks while the pipeline is built are
  off (see skip_type_checks).
  """
  # Also for a PortableRunner whose job service runs in this process
  # (--job_endpoint embed): it is the same local runner.
  compat_beam.disable_timed_flush()
  if not options_lib.direct_runner(options):
    return
  skip_type_checks(options)
  direct = options.view_as(DirectOptions)
  workers = options.view_as(options_lib.PreprocessOptions).workers
  if workers is not None:
    workers = options_lib.check_workers(workers)
  else:
    workers = (default_workers if default_workers is not None else
               os.cpu_count() or 1)
  if not command_line.flag_given(argv, '--direct_num_workers'):
    direct.direct_num_workers = workers
  if not command_line.flag_given(argv, '--direct_running_mode'):
    direct.direct_running_mode = ('multi_threading'
                                  if direct.direct_num_workers > 1 else
                                  'in_memory')


def skip_type_checks(options: PipelineOptions) -> None:
  """Turns Beam's construction-time type checks off (as
  --no_pipeline_type_check does), unless --pipeline_type_check, or a type
  check while the pipeline runs (--runtime_type_check,
  --performance_runtime_type_check), is asked for.

  For each step it applies, Beam checks its input's type and infers its
  output's type, reading the bytecode of every function given to Map or
  FlatMap: a fixed 0.3-0.5 s of every run (about 500 steps), and the
  inferred types only choose coders between the local runner's stages. No
  record depends on them (the same shards either way); a modality's
  pipeline is still built with the checks on by the tests and on every
  other runner.
  """
  types = options.view_as(TypeOptions)
  asked = options.view_as(options_lib.PreprocessOptions)
  if (asked.type_check_on_direct_runner or types.runtime_type_check or
      types.performance_runtime_type_check):
    return
  types.pipeline_type_check = False


def local_runner(options: PipelineOptions):
  """The runner object for `options`: for the DirectRunner, Beam's
  FnApiRunner, made as the DirectRunner makes it for a batch pipeline it
  supports (ours are); None (the runner the options name) otherwise.

  (Beam's own DirectRunner may pick its Prism runner instead: see
  compat_beam.fn_api_runner.)
  """
  if not options_lib.direct_runner(options):
    return None
  return compat_beam.fn_api_runner(options)


_DASK_REFUSAL = (
    "Beam 2.77's DaskRunner drops outputs emitted in finish_bundle, merges "
    "the outputs of multi-output steps and recomputes side inputs, so it "
    "would lose or mix up records")


def _runner_class(path: str):
  """The runner class at a dotted path, or None when it cannot be loaded
  or is not a Beam runner."""
  import importlib  # pylint: disable=import-outside-toplevel
  from apache_beam.runners.runner import PipelineRunner  # pylint: disable=import-outside-toplevel
  module, _, name = path.rpartition('.')
  try:
    cls = getattr(importlib.import_module(module), name)
  except Exception:  # pylint: disable=broad-except
    return None
  return cls if isinstance(cls, type) and issubclass(
      cls, PipelineRunner) else None


def _beam_runner_path(name: str) -> Optional[str]:
  """The class path Beam resolves a runner name to (case-insensitive, with
  or without "Runner", as Beam's create_runner does), or None."""
  from apache_beam.options.pipeline_options import StandardOptions  # pylint: disable=import-outside-toplevel
  known = {path.rsplit('.', 1)[-1].lower(): path
           for path in StandardOptions.ALL_KNOWN_RUNNERS}
  return known.get(name.lower(), known.get(name.lower() + 'runner'))


def _verified_paths():
  """{verified runner name: its class path}."""
  return {name: _beam_runner_path(name) for name in options_lib.VERIFIED_RUNNERS}


def check_runner(runner, allow_unverified: bool) -> Optional[str]:
  """Refuses a runner that is unknown, or not verified with this pipeline.

  Args:
    runner: --runner as given (None: Beam's default, the DirectRunner).
    allow_unverified: --allow_unverified_runner.

  Returns:
    The runner to use: a verified runner under its plain name
    (DirectRunner for `direct`, `Direct` or the class path), another one as
    given; None when none was given.

  Raises:
    UsageError: An unknown runner, DaskRunner, or a runner that is not
      verified without --allow_unverified_runner.
  """
  if runner is None:
    return None
  name = str(runner).strip()
  verified = _verified_paths()
  listed = ', '.join(options_lib.VERIFIED_RUNNERS)
  short = name.rsplit('.', 1)[-1].lower()
  if short in ('dask', 'daskrunner'):
    raise UsageError(f'--runner {name} is refused: {_DASK_REFUSAL} '
                     f'(verified runners: {listed}).')
  path = name if '.' in name else _beam_runner_path(name)
  for plain, verified_path in verified.items():
    if path == verified_path:
      return plain
  cls = _runner_class(path) if path else None
  if cls is None and (path is None or '.' in name):
    import difflib  # pylint: disable=import-outside-toplevel
    from apache_beam.options.pipeline_options import StandardOptions  # pylint: disable=import-outside-toplevel
    close = difflib.get_close_matches(
        name.rsplit('.', 1)[-1], StandardOptions.KNOWN_RUNNER_NAMES, n=1,
        cutoff=0.6)
    hint = f' (did you mean {close[0]}?)' if close else ''
    what = ('not a runner class Beam can load' if '.' in name else
            'not a runner name Beam knows')
    raise UsageError(f'unknown runner "{name}" for --runner{hint}: it is '
                     f'{what}; the verified runners are {listed}.')
  for plain, verified_path in verified.items():
    if cls is not None and cls is _runner_class(verified_path):
      return plain
  if not allow_unverified:
    raise UsageError(f'the runner {name} has not been verified with this '
                     f'pipeline (verified: {listed}); pass '
                     '--allow_unverified_runner to run on it anyway.')
  return name
