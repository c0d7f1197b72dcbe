"""The command lines of both commands (preprocess, validate), read by
argparse: preprocess's one parser holds its own flags and Beam's, and gives
--help, the values checked and the flags no one declares (typos); validate
reads its own flags first (they may be abbreviated), then the rest with the
parser of Beam's flags. Beam's options classes are read in
transforms/compat/beam.py.
"""

import argparse
import re
from typing import List

from pipelines import options as options_lib
from transforms.compat import beam as compat_beam
from transforms.core.errors import UsageError
from transforms.validation import dataset_checks

REPORT = 'validation_report.json'


def flag_given(argv: List[str], flag: str) -> bool:
  """Whether `flag` is on the command line (as --flag or --flag=value)."""
  return any(a == flag or a.startswith(flag + '=') for a in argv)


class _Parser(compat_beam.argument_parser_class()):
  """A command's parser, on Beam's parser class (the options classes declare
  their flags on it). Its errors raise argparse.ArgumentError or UsageError
  instead of printing the usage and exiting; the flags declared while
  `hiding` is set are not listed by --help."""

  hiding = False

  def add_argument(self, *args, **kwargs):
    if self.hiding:
      kwargs['help'] = argparse.SUPPRESS
    return super().add_argument(*args, **kwargs)

  def error(self, message):
    # Beam's parser lets an ambiguous abbreviation pass; so do we.
    if message.startswith('ambiguous option: '):
      return
    raise UsageError(f'bad Beam option: {message} (see --help).')


def _add_beam_flags(parser: _Parser) -> None:
  """Declares every flag of Beam's options classes on `parser`, unlisted
  by --help (the command's own flags, declared first, keep their place)."""
  parser.hiding = True
  try:
    compat_beam.declare_every_option(parser)
  finally:
    parser.hiding = False


def preprocess_parser() -> argparse.ArgumentParser:
  """The one parser of `python -m pipelines.preprocess`: its own flags, in
  the groups --help lists, and every flag Beam's options classes declare
  (`--runner`, ...), which --help leaves to Beam's documentation."""
  parser = _Parser(
      prog='python -m pipelines.preprocess',
      description='Turns labelled images, documents or sensor rows into a '
      'sharded, validated TFRecord dataset. Any other option goes to Apache '
      'Beam (--runner, --direct_running_mode, --direct_num_workers, ...).',
      allow_abbrev=False, exit_on_error=False)
  options_lib.add_preprocess_flags(parser)
  _add_beam_flags(parser)
  return parser


def beam_parser() -> argparse.ArgumentParser:
  """A parser of the flags Beam's options classes declare (and of
  preprocess's, which is one of them), for the options a command passes on
  to Beam."""
  parser = _Parser(allow_abbrev=False, add_help=False, exit_on_error=False)
  _add_beam_flags(parser)
  return parser


def help_requested(argv: List[str]) -> bool:
  """Whether --help or -h is anywhere on the command line: help wins over
  every other flag, even one with a bad value before it (argparse would
  stop at that value first)."""
  return '--help' in argv or '-h' in argv


def read(parser: argparse.ArgumentParser, argv: List[str]) -> List[str]:
  """Reads `argv` with `parser`, checking the values of every option it
  declares, as Beam would when it first reads them (lazily, and then by
  printing its whole usage and exiting with 2).

  Returns:
    The flags `parser` does not declare (typos), for the caller to refuse.

  Raises:
    UsageError: A value Beam would refuse, named in one sentence.
  """
  try:
    _, rest = parser.parse_known_args(list(argv))
  except argparse.ArgumentError as e:
    raise UsageError(_bad_value(parser, e)) from None
  return [a.split('=')[0] for a in rest if a.startswith('--')]


def unknown_sentence(unknown: List[str]) -> str:
  """The usage error's sentence for flags no one declares."""
  return f'unknown option {", ".join(unknown)} (see --help).'


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


class HelpRequested(Exception):
  """--help was given: print the options instead of running."""


def print_help() -> None:
  """Prints preprocess's --help."""
  preprocess_parser().print_help()


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
