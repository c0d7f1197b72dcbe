"""Submits the preprocessing job to a Spark cluster (run_spark.sh).

    python -m pipelines.spark --modality image \\
        --input /shared/raw --output /shared/datasets/cats \\
        --job_endpoint spark-job-server:8099 \\
        --environment EXTERNAL --environment_config localhost:8096 \\
        [any preprocess option] [any Beam option]

Beam reaches Spark through its Spark job server, a Java program that is
the Spark driver of every job it runs. One of these is required:
  --job_endpoint HOST:PORT  a Beam Spark job server that is already running
                     (started with the Spark master URL it submits to);
  --spark_job_server_jar JAR  Beam's shaded Spark job server jar; Beam
                     starts it on this machine (Java needed) and it submits
                     to --spark_master_url (spark://HOST:PORT, or local[N]
                     for Spark inside the job server).
Without either, Beam would download a job server jar from Maven Central
when the job starts; that is refused here rather than left to fail (or to
fetch an unpinned jar) in the middle of a run. With --job_endpoint the job
server's own master is used: --spark_master_url is refused there and
SPARK_MASTER_URL is ignored.

--environment says where the Python SDK workers run:
  - LOOPBACK: inside this process; only when every Spark worker is on this
    machine (the default for a local master);
  - EXTERNAL: an SDK worker pool on each Spark worker host (`python -m
    pipelines.worker_pool --service_port 8096` in an environment with
    this project installed); --environment_config is its HOST:PORT, as the
    executors see it;
  - DOCKER: a container per executor; --environment_config is the image
    (default: Beam's Python SDK image, apache/beam_python3.X_sdk:2.77.0).
    This project is staged from setup.py and installed when a worker
    starts; an image with it installed starts faster.
Beam's own --environment_type is passed on as given instead.

--environment_cache_millis defaults to 86400000 (a day) unless given: with
Beam's default (0) a Spark executor gives its SDK worker back after every
task and starts a new Python process for the next one (several times
slower: benchmarks/TRIED.md, "Whole runs and fixed cost"); a cache longer
than any job keeps one
worker per executor for the whole application (executors end with their
application, their workers with them).

Beam's Spark runner has no --parallelism: Spark splits the work by the
cores of the job's executors (spark.default.parallelism of the job
server), so --parallelism is refused rather than ignored.

Flags may also come from the environment: SPARK_JOB_ENDPOINT,
SPARK_JOB_SERVER_JAR, SPARK_MASTER_URL, SPARK_SDK_ENVIRONMENT,
SPARK_ENVIRONMENT_CONFIG. The input and output must be paths every Spark
worker can reach (a shared filesystem, or gs://, s3:// with Beam's matching
extra). Exit codes and the JSON summary line are those of
pipelines.preprocess; see docs/spark.md.
"""

import os
import re
from typing import List, Mapping, Optional

from pipelines import launch
from pipelines.options import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUP_FILE = os.path.join(ROOT, 'setup.py')

FLAGS = {
    '--job_endpoint': ('SPARK_JOB_ENDPOINT',),
    '--spark_job_server_jar': ('SPARK_JOB_SERVER_JAR',),
    '--spark_master_url': ('SPARK_MASTER_URL',),
    '--environment': ('SPARK_SDK_ENVIRONMENT',),
    '--environment_config': ('SPARK_ENVIRONMENT_CONFIG',),
}
ENGINE = 'Spark'
_LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]')
_HOST_PORT = re.compile(r'^[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5}$')
# The master URLs Spark takes (standalone, with standby masters after
# commas; local mode; YARN; Kubernetes).
_MASTER = re.compile(r'^(spark://[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5}'
                     r'(,[-a-zA-Z0-9.\[\]:]+:[0-9]{1,5})*'
                     r'|local(\[[0-9*]+(,[0-9]+)?\])?|yarn|k8s://\S+)$')


def is_local(master: str) -> bool:
  """Whether the Spark master (and so, as far as this script can tell, its
  workers) is on this machine: local mode or a standalone master here."""
  if master.startswith('local'):
    return True
  hosts = [h.rsplit(':', 1)[0] for h in
           master[len('spark://'):].split(',')] if master.startswith(
               'spark://') else []
  return bool(hosts) and all(h in _LOCAL_HOSTS for h in hosts)


def beam_args(args: List[str], env: Mapping[str, str]) -> List[str]:
  """Turns run_spark.sh's command line into preprocess's (with Beam's
  SparkRunner options).

  Raises:
    UsageError: Something required is missing, malformed or would make
      Beam download a job server.
  """
  cmd = launch.Command(args, FLAGS)
  if cmd.given('--runner') and cmd.value('--runner') not in (
      'SparkRunner', 'spark'):
    raise UsageError('run_spark.sh submits to Spark; leave out --runner '
                     '(use run_local.sh, run_flink.sh or run_dataflow.sh for '
                     'other runners).')
  if cmd.given('--parallelism'):
    raise UsageError('Beam\'s Spark runner has no --parallelism: Spark '
                     'splits the work by the cores of the job\'s executors '
                     '(spark.default.parallelism of the job server); leave '
                     'it out.')
  out = ['--runner', 'SparkRunner']
  endpoint = cmd.setting('--job_endpoint', env)
  jar = cmd.setting('--spark_job_server_jar', env)
  master = None
  if endpoint and jar:
    raise UsageError('give either --job_endpoint (a running Beam Spark job '
                     'server) or --spark_job_server_jar (Beam starts that '
                     'job server), not both; SPARK_JOB_ENDPOINT and '
                     'SPARK_JOB_SERVER_JAR count as given.')
  if endpoint:
    if not _HOST_PORT.match(endpoint):
      raise UsageError(f'--job_endpoint "{endpoint}" is not the HOST:PORT '
                       'of a Beam Spark job server (like localhost:8099).')
    if cmd.own.get('--spark_master_url'):
      raise UsageError('a running Spark job server submits to the master it '
                       'was started with (its --spark-master-url); leave out '
                       '--spark_master_url with --job_endpoint.')
    out += ['--job_endpoint', endpoint]
  elif jar:
    if not os.path.isfile(jar):
      raise UsageError(f'the Spark job server jar {jar} does not exist.')
    master = cmd.require('--spark_master_url', env,
                         'the Spark master URL the job server submits to '
                         '(spark://HOST:PORT, or local[N] to run Spark inside '
                         'the job server)', 'a Spark submission from '
                         '--spark_job_server_jar')
    if not _MASTER.match(master):
      raise UsageError(f'--spark_master_url "{master}" is not a Spark master '
                       'URL (spark://HOST:PORT, local[N], yarn or '
                       'k8s://HOST:PORT).')
    out += ['--spark_job_server_jar', os.path.abspath(jar),
            '--spark_master_url', master]
  else:
    raise UsageError('a Spark submission needs a Beam Spark job server: '
                     'pass --job_endpoint HOST:PORT (a running one) or '
                     '--spark_job_server_jar PATH (Beam starts it here), or '
                     'set SPARK_JOB_ENDPOINT or SPARK_JOB_SERVER_JAR; '
                     'without them Beam would download a job server jar '
                     'when the job starts.')

  out += launch.environment_cache(cmd,
                                  launch.SPARK_ENVIRONMENT_CACHE_MILLIS)
  beams = launch.beams_environment_type(cmd, env)
  if beams is not None:
    return cmd.rest + out + beams
  return cmd.rest + out + _environment(cmd, env, master)


def _environment(cmd: launch.Command, env: Mapping[str, str],
                 master: Optional[str]) -> List[str]:
  """Where the SDK workers run: LOOPBACK (in this process, for a cluster
  on this machine), EXTERNAL (a worker pool at an address) or DOCKER.

  Args:
    master: The master a job server started by Beam submits to; None with
      --job_endpoint, where this script cannot know where the cluster is.
  """
  environment = cmd.setting('--environment', env)
  local = is_local(master) if master else False
  if not environment:
    if master is None:
      raise UsageError('with --job_endpoint this script cannot tell where '
                       'the Spark workers are; pass --environment EXTERNAL '
                       '(a worker pool on each worker host), DOCKER, or '
                       'LOOPBACK if every Spark worker runs on this '
                       'machine.')
    if not local:
      raise UsageError('a Spark cluster on another machine cannot reach SDK '
                       'workers in this process; pass --environment EXTERNAL '
                       '(a worker pool on each worker host) or DOCKER.')
    environment = 'LOOPBACK'
  return launch.sdk_environment(cmd, env, environment, ENGINE, master,
                                local, SETUP_FILE)


def main(argv: Optional[List[str]] = None,
         env: Optional[Mapping[str, str]] = None) -> int:
  """Command-line entry point; returns preprocess's exit code."""
  return launch.main(argv, env, beam_args, __doc__)


if __name__ == '__main__':
  from pipelines import quiet  # pylint: disable=ungrouped-imports
  quiet.start()  # before TensorFlow is imported (see pipelines/quiet.py)
  from pipelines.outcome import exit_now  # pylint: disable=ungrouped-imports
  exit_now(main())
