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
    8096` in an environment with this project installed);
    --environment_config is its address;
  - DOCKER: a container per task manager; --environment_config is the image
    (default: Beam's Python SDK image, apache/beam_python3.X_sdk:2.77.0).
    This project and its dependencies are staged from setup.py and installed
    when a worker starts; an image with them installed starts faster.

--environment_cache_millis defaults to 60000 (a minute) unless given: a
TaskManager then keeps a job's SDK workers for its next tasks instead of
starting new ones (each imports TensorFlow) for each of the job's ~200
tasks, and ends them a minute after the job's last task there. Beam's
Flink runner honours it only when its classes are on the Flink cluster's
own classpath (docs/flink.md says how; scripts/flink_cluster.sh does it).

Flags may also come from the environment: FLINK_MASTER, FLINK_PARALLELISM,
FLINK_SDK_ENVIRONMENT, FLINK_ENVIRONMENT_CONFIG, FLINK_JOB_SERVER_JAR. The
input and output must be paths every Flink worker can reach (a shared
filesystem or gs://, s3:// with Beam's matching extra). Exit codes and the
JSON summary line are those of pipelines.preprocess.
"""

import json
import logging
import os
import re
import time
import urllib.parse
import urllib.request
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
_LOG = logging.getLogger('pipelines.flink')
ENGINE = 'Flink'
# Flink's default rest.port, where a JobManager beside the job server answers
# when --flink_master does not say (see rest_address).
DEFAULT_REST_PORT = 8081
_TERMINAL_STATES = ('FINISHED', 'FAILED', 'CANCELED')
_JOB = 'a Flink submission'
_LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]', '[local]', '[auto]')
_HOST_PORT = re.compile(r'^(https?://)?[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5}/?$')


def _is_local(master: str) -> bool:
  host = re.sub(r'^https?://', '', master).rsplit(':', 1)[0]
  return master in ('[local]', '[auto]') or host in _LOCAL_HOSTS


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

  out += launch.environment_cache(cmd,
                                  launch.FLINK_ENVIRONMENT_CACHE_MILLIS)
  beams = launch.beams_environment_type(cmd, env)
  if beams is not None:
    return cmd.rest + out + beams
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
  return launch.sdk_environment(cmd, env, environment, ENGINE, master,
                                local, SETUP_FILE)


def rest_address(options) -> Optional[str]:
  """The base URL of the Flink cluster's REST API for a job submitted with
  `options`: --flink_master when it is HOST:PORT; else, for a job server
  given as --job_endpoint HOST:PORT, Flink's default REST port on that
  host (the job server usually runs beside the JobManager); None for
  [local]/[auto] with an embedded job server (the Flink mini cluster lives
  and dies in the job server Beam starts and stops)."""
  # pylint: disable=import-outside-toplevel
  from apache_beam.options.pipeline_options import FlinkRunnerOptions
  from apache_beam.options.pipeline_options import PortableOptions
  # pylint: enable=import-outside-toplevel
  master = options.view_as(FlinkRunnerOptions).flink_master or ''
  if master not in ('[local]', '[auto]') and _HOST_PORT.match(master):
    master = master.rstrip('/')
    return master if master.startswith('http') else f'http://{master}'
  endpoint = options.view_as(PortableOptions).job_endpoint or ''
  if _HOST_PORT.match(endpoint):
    host = re.sub(r'^https?://', '', endpoint).rsplit(':', 1)[0]
    return f'http://{host}:{DEFAULT_REST_PORT}'
  return None


def _rest(url: str, method: str = 'GET') -> dict:
  request = urllib.request.Request(url, method=method)
  with urllib.request.urlopen(request, timeout=5) as response:
    body = response.read().decode() or '{}'
  return json.loads(body)


def cancel_on_cluster(result, options, wait_seconds: float = 30.0) -> None:
  """Cancels the Flink job behind a portable PipelineResult on the cluster
  and waits (up to `wait_seconds`) until Flink says it ended.

  Beam's job service does not do this for a batch job: its cancel
  (JobInvocation.cancel in Beam 2.70's Flink job server) interrupts the
  thread that waits for ExecutionEnvironment.execute(), and Flink is never
  told; the job ran on to the end, writing into the run folder that the
  cancelled run had removed. So the job is found through Flink's REST API
  by its name (Beam's job id is "<Flink job name>_<uuid>", and the name
  ends in a random part, so it names no one else's job) and cancelled
  there. Waiting for it to end keeps its tasks from writing into the run
  folder after the run removed it. Failures are logged, never raised: the
  run is being cancelled anyway.
  """
  job_id = getattr(result, '_job_id', None) or ''
  name = job_id.rsplit('_', 1)[0]
  rest = rest_address(options)
  if not name or not rest:
    _LOG.warning('cannot tell which Flink job to cancel (job %r, REST %r); '
                 'it may still run on the cluster', job_id, rest)
    return
  deadline = time.monotonic() + wait_seconds
  # The job server submits the job shortly after Beam's Run call; look for
  # it for a few seconds if it is not there yet.
  search_until = time.monotonic() + min(5.0, wait_seconds)
  try:
    while True:
      jobs = [j for j in _rest(f'{rest}/jobs/overview')['jobs']
              if j['name'] == name]
      if jobs or time.monotonic() > search_until:
        break
      time.sleep(0.5)
    pending = [j['jid'] for j in jobs if j['state'] not in _TERMINAL_STATES]
    for jid in pending:
      _rest(f'{rest}/jobs/{urllib.parse.quote(jid)}?mode=cancel', 'PATCH')
      _LOG.info('asked Flink at %s to cancel job %s (%s)', rest, jid, name)
    while pending and time.monotonic() < deadline:
      time.sleep(0.5)
      pending = [jid for jid in pending
                 if _rest(f'{rest}/jobs/{jid}')['state'] not in
                 _TERMINAL_STATES]
    if pending:
      _LOG.warning('the Flink job(s) %s did not end within %.0f s of being '
                   'cancelled', ', '.join(pending), wait_seconds)
  except Exception as e:  # pylint: disable=broad-except
    _LOG.warning('could not cancel the Flink job %s through %s (%s: %s); '
                 'it may still run on the cluster', name, rest,
                 type(e).__name__, e)


def main(argv: Optional[List[str]] = None,
         env: Optional[Mapping[str, str]] = None) -> int:
  """Command-line entry point; returns preprocess's exit code."""
  return launch.main(argv, env, beam_args, __doc__)


if __name__ == '__main__':
  from pipelines import quiet  # pylint: disable=ungrouped-imports
  quiet.start()  # before TensorFlow is imported (see pipelines/quiet.py)
  from pipelines.outcome import exit_now  # pylint: disable=ungrouped-imports
  exit_now(main())
