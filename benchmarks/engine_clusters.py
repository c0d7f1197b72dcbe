"""The local Flink and Spark clusters that engines_benchmark.py runs on:
where they listen, how our command is submitted to each runner, and
how a cluster is started and stopped (scripts/flink_cluster.sh,
scripts/spark_cluster.sh).
"""

import os
import subprocess
import sys
import time

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
from harness import BenchmarkError, REPO
sys.path.insert(0, REPO)
from pipelines import launch
# pylint: enable=g-import-not-at-top,wrong-import-position

RUNNERS = ('direct', 'flink', 'spark')
ENGINES = ('flink', 'spark')

FLINK_REST = 'http://localhost:8081'
FLINK_RUN = os.environ.get('TFRP_FLINK_RUN', '/tmp/tfrecord-pipelines-flink')
SPARK_RUN = os.environ.get('TFRP_RUN_SPARK', '/tmp/tfrecord-pipelines-spark')
FLINK_ARGS = ['--job_endpoint', 'localhost:8099', '--environment',
              'EXTERNAL', '--environment_config', 'localhost:8096',
              '--parallelism', '2']
SPARK_ENDPOINT, SPARK_POOL = 'localhost:8199', 'localhost:8196'
SCRIPTS = {'flink': os.path.join(REPO, 'scripts', 'flink_cluster.sh'),
           'spark': os.path.join(REPO, 'scripts', 'spark_cluster.sh')}


# --------------------------------------------------------------- commands --


def flink_command(preprocess_args):
  """run_flink.sh on the local cluster, 2 slots (one per TaskManager)."""
  return [os.path.join(REPO, 'run_flink.sh')] + preprocess_args + FLINK_ARGS


def spark_command(preprocess_args, via='run_spark'):
  """The Spark submission: one place to switch to run_spark.sh.

  via='preprocess' is Beam's PortableRunner through pipelines.preprocess,
  which the Spark job server takes as it is; via='run_spark' is the
  project's wrapper, which sets the same cache of SDK workers itself.
  """
  if via == 'run_spark':
    return ([os.path.join(REPO, 'run_spark.sh')] + preprocess_args +
            ['--job_endpoint', SPARK_ENDPOINT, '--environment', 'EXTERNAL',
             '--environment_config', SPARK_POOL])
  # The cache keeps one SDK worker per executor for the whole job instead
  # of a new Python process per task (scripts/spark_cluster.sh says why).
  return ([sys.executable, '-m', 'pipelines.preprocess'] + preprocess_args +
          ['--runner', 'PortableRunner', '--job_endpoint', SPARK_ENDPOINT,
           '--environment_type', 'EXTERNAL', '--environment_config',
           SPARK_POOL,
           '--environment_cache_millis=' +
           launch.SPARK_ENVIRONMENT_CACHE_MILLIS])


def runner_command(runner, ours, out, job_name, spark_via='run_spark'):
  """Our command (argv of all_modalities) for one runner, writing to out.

  Args:
    runner: One of RUNNERS.
    ours: The DirectRunner argv, [python, '-m', 'pipelines.preprocess',
      ...args] with '--output', PATH among the args.
    out: The output folder of this runner's run.
    job_name: The engine's job name (how the run's job is found in Flink's
      REST view and the Spark job server's log); unused for direct.
    spark_via: See spark_command.
  """
  if ours[1:3] != ['-m', 'pipelines.preprocess']:
    raise ValueError(f'not a pipelines.preprocess command: {ours}')
  args = list(ours[3:])
  args[args.index('--output') + 1] = out
  if runner == 'direct':
    return [ours[0], '-m', 'pipelines.preprocess'] + args
  args += ['--job_name', job_name]
  if runner == 'flink':
    return flink_command(args)
  if runner == 'spark':
    return spark_command(args, spark_via)
  raise ValueError(f'unknown runner {runner!r}')


# -------------------------------------------------------------- clusters --


def cluster_running(engine):
  """Whether `<engine>_cluster.sh status` says it is fully running."""
  return subprocess.run([SCRIPTS[engine], 'status'], cwd=REPO,
                        capture_output=True, check=False).returncode == 0


def ensure_cluster(engine):
  """Starts the engine's cluster unless it runs; returns what happened.

  Returns:
    {'started': bool, 'start_seconds': seconds or None}.

  Raises:
    BenchmarkError: The start script failed.
  """
  if cluster_running(engine):
    print(f'{engine}: cluster already running; it is used as it is and '
          'left running', flush=True)
    return {'started': False, 'start_seconds': None}
  print(f'{engine}: cluster not running; starting it ({SCRIPTS[engine]} '
        'start), timed apart from the runs', flush=True)
  t0 = time.perf_counter()
  proc = subprocess.run([SCRIPTS[engine], 'start'], cwd=REPO,
                        capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - t0
  if proc.returncode != 0:
    raise BenchmarkError(f'{engine}: {SCRIPTS[engine]} start failed after '
                         f'{seconds:.0f} s:\n{proc.stderr[-3000:]}')
  print(f'{engine}: started in {seconds:.1f} s', flush=True)
  return {'started': True, 'start_seconds': seconds}


def stop_cluster(engine):
  print(f'{engine}: stopping the cluster this benchmark started', flush=True)
  proc = subprocess.run([SCRIPTS[engine], 'stop'], cwd=REPO,
                        capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    print(f'{engine}: stop failed:\n{proc.stderr[-2000:]}', flush=True)
