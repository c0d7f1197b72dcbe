"""How both commands (preprocess, validate) set up Beam's runner on this
machine: the DirectRunner's mode and workers, no construction-time type
checks, no timed flush in the local data plane, Beam's FnApiRunner rather
than Prism, and which flags no one declares.
"""

import argparse
import os
from typing import List, Optional

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import TypeOptions

from pipelines import options as options_lib
from transforms.compat import beam as compat_beam


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
