"""How both commands (preprocess, validate) set up Beam's runner: the
Beam options' values and the runner checked before Beam reads them (a
verified runner, or one allowed), which flags no one declares, and on this
machine the DirectRunner's mode and workers, no construction-time type
checks, no timed flush in the local data plane, and Beam's FnApiRunner
rather than Prism.
"""

import argparse
import os
import re
from typing import List, Optional

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import TypeOptions

from pipelines import options as options_lib
from transforms.compat import beam as compat_beam
from transforms.core.errors import UsageError


def flag_given(argv: List[str], flag: str) -> bool:
  """Whether `flag` is on the command line (as --flag or --flag=value)."""
  return any(a == flag or a.startswith(flag + '=') for a in argv)


def unknown_flags(argv: List[str]) -> List[str]:
  """Flags neither we nor any Beam options class declare (typos)."""
  parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
  seen = set()
  pending = [PipelineOptions]
  while pending:
    cls = pending.pop()
    for sub in cls.__subclasses__():
      if sub not in seen:
        seen.add(sub)
        pending.append(sub)
        try:
          sub._add_argparse_args(parser)  # pylint: disable=protected-access
        except argparse.ArgumentError:
          pass  # declared twice by two classes; either is fine
  _, rest = parser.parse_known_args(argv)
  return [a.split('=')[0] for a in rest if a.startswith('--')]


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
  if not flag_given(argv, '--direct_num_workers'):
    direct.direct_num_workers = workers
  if not flag_given(argv, '--direct_running_mode'):
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


def _option_parser():
  """An argument parser holding every option Beam's own parser holds (the
  direct subclasses of PipelineOptions, as Beam collects them), whose
  errors raise argparse.ArgumentError or UsageError instead of printing
  the usage and exiting."""
  from apache_beam.options import pipeline_options as beam_options  # pylint: disable=import-outside-toplevel
  base = getattr(beam_options, '_BeamArgumentParser', argparse.ArgumentParser)

  class _Parser(base):

    def error(self, message):
      # Beam's parser lets an ambiguous abbreviation pass; so do we.
      if message.startswith('ambiguous option: '):
        return
      raise UsageError(f'bad Beam option: {message} (see --help).')

  parser = _Parser(allow_abbrev=False, add_help=False, exit_on_error=False)
  classes = {}
  for cls in PipelineOptions.__subclasses__():
    classes.setdefault(str(cls), cls)
  for cls in classes.values():
    try:
      cls._add_argparse_args(parser)  # pylint: disable=protected-access
    except argparse.ArgumentError:
      pass  # declared twice; Beam's own parser would fail the same way
  return parser


def _bad_value(parser, err) -> str:
  """One sentence for argparse's complaint about one option's value."""
  name = (err.argument_name or '').split('/')[0]
  action = parser._option_string_actions.get(name)  # pylint: disable=protected-access
  message = err.message
  got = None
  quoted = re.search(r"invalid (?:choice|.+? value): ('.*?'|\".*?\")",
                     message)
  if quoted:
    got = quoted.group(1)
  if message.startswith('expected ') and name:
    return f'{name} needs a value'
  if got is None:
    return f'{name}: {message}' if name else message
  if action is not None and action.choices:
    return (f'{name} must be one of '
            f'{", ".join(str(c) for c in action.choices)} (got {got})')
  kind = getattr(action, 'type', None)
  if kind is int:
    return f'{name} must be a whole number (got {got})'
  if kind is float:
    return f'{name} must be a number (got {got})'
  return f'{name} has a value Beam cannot use (got {got})'


def check_beam_options(argv: List[str]) -> None:
  """Checks the values of every option Beam knows, as Beam would when it
  first reads them (lazily, and then by printing its whole usage and
  exiting with 2).

  Raises:
    UsageError: A value Beam would refuse, named in one sentence.
  """
  parser = _option_parser()
  try:
    parser.parse_known_args(list(argv))
  except argparse.ArgumentError as e:
    raise UsageError(_bad_value(parser, e)) from None


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
