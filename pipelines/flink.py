"""Submits the preprocessing job to a Flink cluster (run_flink.sh).

    python -m pipelines.flink --modality image \\
        --input /data/raw --output /data/datasets/cats \\
        --flink_master flink-jobmanager:8081 --parallelism 8 \\
        --environment DOCKER [--environment_config IMAGE] \\
        [--job_server_jar beam-runners-flink-1.19-job-server-2.77.0.jar] \\
        [any preprocess option] [any Beam option]

Beam reaches Flink through its Flink job server, a Java program:
  - with --job_server_jar JAR (or FLINK_JOB_SERVER_JAR), Beam starts that
    jar on this machine (Java needed) and it submits to --flink_master;
  - with --job_endpoint HOST:PORT, an already running job server is used
    (for example Beam's beam_flinkX.Y_job_server container);
  - with neither, Beam downloads the job server jar matching --flink_version
    from Maven Central when the job starts.

--environment says where the Python SDK workers run:
  - LOOPBACK: inside this process; only for a Flink cluster on this machine
    (--flink_master localhost:PORT or [local]), the default there;
  - EXTERNAL: an SDK worker pool already running beside each task manager
    (`python -m apache_beam.runners.worker.worker_pool_main --service_port
    50000` in an environment with this project installed);
    --environment_config is its address;
  - DOCKER: a container per task manager; --environment_config is the image
    (default: Beam's Python SDK image, apache/beam_python3.X_sdk:2.77.0).
    This project and its dependencies are staged from setup.py and installed
    when a worker starts; an image with them installed starts faster.

Flags may also come from the environment: FLINK_MASTER, FLINK_PARALLELISM,
FLINK_SDK_ENVIRONMENT, FLINK_ENVIRONMENT_CONFIG, FLINK_JOB_SERVER_JAR. The
input and output must be paths every Flink worker can reach (a shared
filesystem or gs://, s3:// with Beam's matching extra). Exit codes and the
JSON summary line are those of pipelines.preprocess.
"""

import os
import re
import sys
from typing import List, Mapping, Optional

from pipelines import launch
from pipelines.options import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_FILE = os.path.join(ROOT, 'setup.py')

FLAGS = {
    '--flink_master': ('FLINK_MASTER',),
    '--parallelism': ('FLINK_PARALLELISM',),
    '--environment': ('FLINK_SDK_ENVIRONMENT',),
    '--environment_config': ('FLINK_ENVIRONMENT_CONFIG',),
    '--job_server_jar': ('FLINK_JOB_SERVER_JAR',),
}
ENVIRONMENTS = ('LOOPBACK', 'EXTERNAL', 'DOCKER')
_JOB = 'a Flink submission'
_LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]', '[local]', '[auto]')
_HOST_PORT = re.compile(r'^(https?://)?[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5}/?$')


def _is_local(master: str) -> bool:
  host = re.sub(r'^https?://', '', master).rsplit(':', 1)[0]
  return master in ('[local]', '[auto]') or host in _LOCAL_HOSTS


def sdk_image() -> str:
  """Beam's Python SDK container for this Python and Beam version."""
  import apache_beam  # pylint: disable=import-outside-toplevel
  return (f'apache/beam_python{sys.version_info.major}.'
          f'{sys.version_info.minor}_sdk:{apache_beam.__version__}')


def beam_args(args: List[str], env: Mapping[str, str]) -> List[str]:
  """Turns run_flink.sh's command line into preprocess's (with Beam's
  FlinkRunner options).

  Raises:
    UsageError: Something required is missing or malformed.
  """
  cmd = launch.Command(args, FLAGS)
  if cmd.given('--runner') and cmd.value('--runner') not in (
      'FlinkRunner', 'flink'):
    raise UsageError('run_flink.sh submits to Flink; leave out --runner '
                     '(use run_local.sh or run_dataflow.sh for other '
                     'runners).')
  out = ['--runner', 'FlinkRunner']
  endpoint = cmd.value('--job_endpoint')
  master = cmd.setting('--flink_master', env)
  if not endpoint:
    master = cmd.require('--flink_master', env,
                         'the Flink master address (HOST:PORT of the '
                         'JobManager\'s REST endpoint, or [local]) unless '
                         '--job_endpoint names a running Beam Flink job '
                         'server', _JOB)
  if master:
    if master not in ('[local]', '[auto]') and not _HOST_PORT.match(master):
      raise UsageError(f'--flink_master "{master}" is not HOST:PORT (like '
                       'flink-jobmanager:8081) or [local].')
    out += ['--flink_master', master]
  jar = cmd.setting('--job_server_jar', env)
  if jar:
    if endpoint:
      raise UsageError('give either --job_server_jar (Beam starts that job '
                       'server) or --job_endpoint (a running one), not both.')
    if not os.path.isfile(jar):
      raise UsageError(f'the Flink job server jar {jar} does not exist.')
    out += ['--flink_job_server_jar', os.path.abspath(jar)]

  parallelism = cmd.setting('--parallelism', env)
  if parallelism:
    out += ['--parallelism', str(launch.positive(parallelism,
                                                  '--parallelism'))]

  if cmd.given('--environment_type'):
    return cmd.rest + out  # Beam's own spelling: passed on as given
  return cmd.rest + out + _environment(cmd, env, master)


def _environment(cmd: launch.Command, env: Mapping[str, str],
                 master: Optional[str]) -> List[str]:
  """Where the SDK workers run: LOOPBACK (in this process, for a local
  master), EXTERNAL (a worker pool at an address) or DOCKER."""
  environment = cmd.setting('--environment', env)
  local = _is_local(master) if master else False
  if not environment:
    if not local:
      raise UsageError('a Flink cluster on another machine cannot reach SDK '
                       'workers in this process; pass --environment EXTERNAL '
                       '(a worker pool beside each task manager) or DOCKER.')
    environment = 'LOOPBACK'
  environment = environment.upper()
  if environment not in ENVIRONMENTS:
    raise UsageError(f'--environment must be one of {", ".join(ENVIRONMENTS)}'
                     f', not "{environment}".')
  config = cmd.setting('--environment_config', env)
  if environment == 'LOOPBACK':
    if master and not local:
      raise UsageError(f'--environment LOOPBACK runs the SDK workers in this '
                       f'process, which the Flink cluster at {master} cannot '
                       'reach; use EXTERNAL or DOCKER.')
    if config:
      raise UsageError('--environment LOOPBACK takes no '
                       '--environment_config.')
  elif environment == 'EXTERNAL':
    if not config:
      raise UsageError('--environment EXTERNAL needs --environment_config '
                       'HOST:PORT, the address of the SDK worker pool.')
  else:
    config = config or sdk_image()
  out = ['--environment_type', environment]
  if config:
    out += ['--environment_config', config]
  if environment == 'DOCKER' and not cmd.given('--setup_file'):
    out += ['--setup_file', SETUP_FILE]
  return out


def main(argv: Optional[List[str]] = None,
         env: Optional[Mapping[str, str]] = None) -> int:
  """Command-line entry point; returns preprocess's exit code."""
  return launch.main(argv, env, beam_args, __doc__)


if __name__ == '__main__':
  from pipelines import quiet  # pylint: disable=ungrouped-imports
  quiet.start()  # before TensorFlow is imported (see pipelines/quiet.py)
  from pipelines.preprocess import exit_now  # pylint: disable=ungrouped-imports
  exit_now(main())
