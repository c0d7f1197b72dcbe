"""What the cluster launchers (run_dataflow.sh, run_flink.sh, run_spark.sh)
share.

A launcher takes a few flags of its own (with environment variables as
fallbacks), turns them into Beam's runner options and passes everything else
to `pipelines.preprocess` unchanged, so exit codes and the JSON summary line
are those of a local run.
"""

import re
import sys
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from pipelines.options import UsageError


class Command:
  """A launcher's command line: its own flags and the rest.

  Args:
    args: The command line (without the program name).
    flags: The launcher's flags that take a value -> the environment
      variables that stand in for them, in order of preference.
    switches: Spellings of the launcher's one on/off flag (or none); it may
      be given bare or as =true/=false.
  """

  def __init__(self, args: Sequence[str],
               flags: Mapping[str, Tuple[str, ...]],
               switches: Sequence[str] = ()):
    self._flags = flags
    self.own: Dict[str, str] = {}
    self.switch = False
    self.rest: List[str] = []
    args = list(args)
    i = 0
    while i < len(args):
      name, eq, value = args[i].partition('=')
      if name in switches:
        if eq and value.lower() not in ('true', 'false'):
          raise UsageError(f'{name} takes no value (or true/false), not '
                           f'"{value}".')
        self.switch = not eq or value.lower() == 'true'
      elif name in flags:
        if not eq:
          if i + 1 >= len(args) or args[i + 1].startswith('--'):
            raise UsageError(f'{name} needs a value.')
          i += 1
          value = args[i]
        self.own[name] = value
      else:
        self.rest.append(args[i])
      i += 1

  def given(self, flag: str) -> bool:
    """Whether `flag` is among the options passed on."""
    return any(a == flag or a.startswith(flag + '=') for a in self.rest)

  def value(self, flag: str) -> Optional[str]:
    """The value of `flag` among the options passed on, or None."""
    for i, a in enumerate(self.rest):
      if a.startswith(flag + '='):
        return a.split('=', 1)[1]
      if a == flag and i + 1 < len(self.rest):
        return self.rest[i + 1]
    return None

  def setting(self, flag: str, env: Mapping[str, str]) -> Optional[str]:
    """The launcher flag's value, else its first environment variable set."""
    if self.own.get(flag):
      return self.own[flag]
    for var in self._flags[flag]:
      if env.get(var):
        return env[var]
    return None

  def require(self, flag: str, env: Mapping[str, str], what: str,
              job: str) -> str:
    """setting(), or a UsageError naming the flag and its variables."""
    value = self.setting(flag, env)
    if not value:
      alternatives = ' or '.join(self._flags[flag])
      alternatives = f' or set {alternatives}' if alternatives else ''
      raise UsageError(f'{job} needs {what}: pass {flag}{alternatives}.')
    return value


def positive(value: str, flag: str) -> int:
  """A whole number >= 1, or a UsageError saying so."""
  try:
    n = int(value)
  except ValueError:
    n = 0
  if n < 1:
    raise UsageError(f'{flag} must be a whole number of at least 1, not '
                     f'"{value}".')
  return n


# How long an idle Python SDK worker is kept for the next task of its job
# (Beam's --environment_cache_millis). With Beam's default, 0, each task
# gives its worker back when it ends and the next task starts a new Python
# process, which imports TensorFlow again (about 4 CPU seconds a worker).
# Spark: a day, longer than any job; executors end with their application
# and their workers with them. 200 images took 250 s with 0, 46 s with it.
# Flink: a minute; TaskManagers outlive jobs, so a job's workers end a
# minute after its last task on that TaskManager, while the gaps between
# the tasks of one job are seconds. Beam's Flink runner only honours it
# when its own classes come from Flink's classpath, not from the job's jars
# (scripts/flink_cluster.sh; docs/flink.md): 300 images took 64 s with 0,
# 38 s with it.
SPARK_ENVIRONMENT_CACHE_MILLIS = '86400000'
FLINK_ENVIRONMENT_CACHE_MILLIS = '60000'


def environment_cache(cmd: Command, default: str) -> List[str]:
  """--environment_cache_millis for a cluster launcher: the user's,
  checked, or `default`."""
  if not cmd.given('--environment_cache_millis'):
    return ['--environment_cache_millis', default]
  value = cmd.value('--environment_cache_millis') or ''
  if not value.isdigit():
    # Beam takes any text here and the Java job server fails on it later,
    # after the job was staged.
    raise UsageError('--environment_cache_millis must be a whole number of '
                     f'milliseconds (0 or more), not "{value}".')
  return []


ENVIRONMENTS = ('LOOPBACK', 'EXTERNAL', 'DOCKER')


def beams_environment_type(cmd: Command,
                           env: Mapping[str, str]) -> Optional[List[str]]:
  """With Beam's own --environment_type (passed on as given among the
  rest), the --environment_config a launcher's flag table keeps to itself;
  None when --environment_type is not given.

  Raises:
    UsageError: --environment was given as well.
  """
  if not cmd.given('--environment_type'):
    return None
  if cmd.setting('--environment', env):
    raise UsageError('--environment and Beam\'s --environment_type both '
                     'say where the SDK workers run; give only one.')
  config = cmd.setting('--environment_config', env)
  return ['--environment_config', config] if config else []


_POOL_ADDRESS = re.compile(r'^[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5}$')


def sdk_environment(cmd: Command, env: Mapping[str, str], environment: str,
                    engine: str, master: Optional[str], local: bool,
                    setup_file: str) -> List[str]:
  """Beam's options for where the SDK workers run, checked: LOOPBACK (in
  this process, for a cluster on this machine), EXTERNAL (a worker pool at
  a HOST:PORT) or DOCKER (an image, Beam's by default; the project staged
  from `setup_file`).

  Args:
    cmd: The launcher's command line.
    env: The environment (for --environment_config's variable).
    environment: The chosen --environment, any case.
    engine: 'Flink' or 'Spark', for the sentences.
    master: The cluster's address when known, else None.
    local: Whether that cluster is on this machine.
    setup_file: This project's setup.py.
  """
  environment = environment.upper()
  if environment not in ENVIRONMENTS:
    raise UsageError(f'--environment must be one of {", ".join(ENVIRONMENTS)}'
                     f', not "{environment}".')
  config = cmd.setting('--environment_config', env)
  if environment == 'LOOPBACK':
    if master and not local:
      raise UsageError(f'--environment LOOPBACK runs the SDK workers in this '
                       f'process, which the {engine} cluster at {master} '
                       'cannot reach; use EXTERNAL or DOCKER.')
    if config:
      raise UsageError('--environment LOOPBACK takes no '
                       '--environment_config.')
  elif environment == 'EXTERNAL':
    if not config:
      raise UsageError('--environment EXTERNAL needs --environment_config '
                       'HOST:PORT, the address of the SDK worker pool.')
    if not _POOL_ADDRESS.match(config):
      raise UsageError(f'--environment_config "{config}" is not the '
                       'HOST:PORT of an SDK worker pool.')
  else:
    config = config or sdk_image()
  out = ['--environment_type', environment]
  if config:
    out += ['--environment_config', config]
  if environment == 'DOCKER' and not cmd.given('--setup_file'):
    out += ['--setup_file', setup_file]
  return out


def sdk_image() -> str:
  """Beam's Python SDK container for this Python and Beam version: the
  image a DOCKER environment runs when none is named."""
  import apache_beam  # pylint: disable=import-outside-toplevel
  return (f'apache/beam_python{sys.version_info.major}.'
          f'{sys.version_info.minor}_sdk:{apache_beam.__version__}')


def main(argv: Optional[List[str]], env: Optional[Mapping[str, str]],
         to_preprocess_args: Callable[[List[str], Mapping[str, str]],
                                      List[str]],
         doc: str) -> int:
  """Runs pipelines.preprocess with the launcher's translated arguments.

  A launcher's own usage error gets what preprocess gives its own: one
  sentence on stderr, the JSON summary on stdout, exit code 2.
  """
  import os  # pylint: disable=import-outside-toplevel
  from pipelines import outcome  # pylint: disable=import-outside-toplevel
  from pipelines import preprocess  # pylint: disable=import-outside-toplevel
  argv = list(sys.argv[1:] if argv is None else argv)
  if '--help' in argv or '-h' in argv:
    print(doc.strip())
    return outcome.EXIT_OK
  try:
    args = to_preprocess_args(argv, os.environ if env is None else env)
  except UsageError as e:
    outcome.configure_logging()
    error = outcome.usage_sentence(e)
    print(f'error: {error}', file=sys.stderr)
    print(outcome.summary_json(outcome.EXIT_USAGE, {}, None, error))
    return outcome.EXIT_USAGE
  return preprocess.main(args)
