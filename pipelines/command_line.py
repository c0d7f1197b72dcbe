"""The command lines of both commands (preprocess, validate): what
argparse reads of them, --help, the values of Beam's options checked, and
the flags no one declares.
"""

import argparse
import re
from typing import List

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import options as options_lib
from transforms.core.errors import UsageError
from transforms.validation import dataset_checks

REPORT = 'validation_report.json'


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


class HelpRequested(Exception):
  """--help was given: print the options instead of running."""


def print_help() -> None:
  """Prints preprocess's --help."""
  import argparse  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(
      prog='python -m pipelines.preprocess',
      description='Turns labelled images, documents or sensor rows into a '
      'sharded, validated TFRecord dataset. Any other option goes to Apache '
      'Beam (--runner, --direct_running_mode, --direct_num_workers, ...).')
  options_lib.PreprocessOptions._add_argparse_args(parser)  # pylint: disable=protected-access
  parser.print_help()


class _ValidateParser(argparse.ArgumentParser):
  """Says what is wrong in one sentence (a UsageError) instead of printing
  the usage and exiting."""

  def error(self, message):
    raise UsageError(f'{message} (see --help).')


def validate_parser(description: str) -> argparse.ArgumentParser:
  """The validation flags (any other goes to Beam)."""
  parser = _ValidateParser(description=description)
  # The groups of the guide's validation page (docs/validation.md).
  dataset = parser.add_argument_group('dataset and report')
  dataset.add_argument('--output', required=True,
                       help='The dataset folder to validate.')
  dataset.add_argument('--report', default=None,
                       help='Where to write the JSON report (default: '
                       f'<output>/{REPORT}).')
  defaults = dataset_checks.Thresholds()
  limits = parser.add_argument_group('thresholds')
  limits.add_argument('--feature_drift_warn', default=str(
      defaults.feature_drift_warn), help='Warn when a feature\'s mean in a '
                      'split is this many training standard deviations from '
                      'the training mean (default %(default)s).')
  limits.add_argument('--feature_drift_fail', default='none',
                      help='Fail above this feature drift (default none).')
  limits.add_argument('--class_drift_warn', default=str(
      defaults.class_drift_warn), help='Warn when a split\'s class shares '
                      'are this far (total variation distance, 0-1) from '
                      'the training split\'s (default %(default)s).')
  limits.add_argument('--class_drift_fail', default='none',
                      help='Fail above this class drift (default none).')
  limits.add_argument('--record_warn_mib', default=str(
      defaults.record_warn_bytes / 2**20), help='Warn about records larger '
                      'than this many MiB (default %(default)s; protobuf '
                      'refuses 2 GiB).')
  limits.add_argument('--strict', action='store_true',
                      help='Every warning fails the dataset.')
  runs = parser.add_argument_group('runners and diagnostics')
  runs.add_argument('--verbose', action='store_true',
                    help='When the validation pipeline fails, also print '
                    'the full traceback on stderr (it is always written '
                    'to the log file the error names).')
  runs.add_argument('--allow_unverified_runner', action='store_true',
                    help='Run on a Beam runner this pipeline has not been '
                    'verified on (see docs/runners.md).')
  return parser
