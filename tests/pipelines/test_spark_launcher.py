"""run_spark.sh's own flags: what they turn into for Beam's SparkRunner, and
the one sentence of each bad invocation. No cluster is needed (the runs on
the real one are tests/engines/test_spark.py)."""

import json
import os
import re
import subprocess

import pytest

from pipelines import launch
from pipelines import spark
from pipelines.options import UsageError
import repo

ROOT = repo.ROOT
BASE = ['--modality', 'image', '--input', '/shared/in', '--output',
        '/shared/out']
EXTERNAL = ['--environment', 'EXTERNAL', '--environment_config',
            'localhost:8196']


def _opts(args):
  """Beam's options after the ones passed on: {flag: value}."""
  assert args[:len(BASE)] == BASE
  rest = args[len(BASE):]
  return dict(zip(rest[::2], rest[1::2]))


@pytest.fixture(name='jar')
def _jar(tmp_path):
  path = tmp_path / 'beam-runners-spark-3-job-server-2.70.0.jar'
  path.write_bytes(b'PK')
  return str(path)


def test_a_running_job_server_and_an_external_worker_pool():
  opts = _opts(spark.beam_args(
      BASE + ['--job_endpoint', 'localhost:8199'] + EXTERNAL, {}))
  assert opts == {
      '--runner': 'SparkRunner', '--job_endpoint': 'localhost:8199',
      '--environment_cache_millis': '86400000',
      '--environment_type': 'EXTERNAL',
      '--environment_config': 'localhost:8196'}


def test_environment_variables_stand_in_for_the_flags():
  opts = _opts(spark.beam_args(BASE, {
      'SPARK_JOB_ENDPOINT': 'js:8099', 'SPARK_SDK_ENVIRONMENT': 'external',
      'SPARK_ENVIRONMENT_CONFIG': 'pool:50000',
      # Ignored with a job endpoint: that server has its own master.
      'SPARK_MASTER_URL': 'spark://elsewhere:7077'}))
  assert opts['--job_endpoint'] == 'js:8099'
  assert opts['--environment_type'] == 'EXTERNAL'
  assert opts['--environment_config'] == 'pool:50000'
  assert '--spark_master_url' not in opts
  # A flag beats its environment variable.
  opts = _opts(spark.beam_args(BASE + ['--job_endpoint=mine:1'] + EXTERNAL,
                               {'SPARK_JOB_ENDPOINT': 'js:8099'}))
  assert opts['--job_endpoint'] == 'mine:1'


def test_a_job_server_jar_with_a_local_master_defaults_to_loopback(jar):
  opts = _opts(spark.beam_args(
      BASE + ['--spark_job_server_jar', jar, '--spark_master_url',
              'spark://localhost:7077'], {}))
  assert opts == {
      '--runner': 'SparkRunner', '--spark_job_server_jar': jar,
      '--spark_master_url': 'spark://localhost:7077',
      '--environment_cache_millis': '86400000',
      '--environment_type': 'LOOPBACK'}
  opts = _opts(spark.beam_args(BASE, {'SPARK_JOB_SERVER_JAR': jar,
                                      'SPARK_MASTER_URL': 'local[2]'}))
  assert opts['--spark_master_url'] == 'local[2]'
  assert opts['--environment_type'] == 'LOOPBACK'


def test_a_relative_jar_is_made_absolute(jar, monkeypatch):
  monkeypatch.chdir(os.path.dirname(jar))
  opts = _opts(spark.beam_args(
      BASE + ['--spark_job_server_jar', os.path.basename(jar),
              '--spark_master_url', 'local'], {}))
  assert opts['--spark_job_server_jar'] == jar


def test_docker_names_beams_sdk_image_and_stages_the_project(jar):
  opts = _opts(spark.beam_args(
      BASE + ['--spark_job_server_jar', jar, '--spark_master_url',
              'spark://m1:7077,m2:7077', '--environment', 'docker'], {}))
  assert opts['--environment_type'] == 'DOCKER'
  assert opts['--environment_config'] == launch.sdk_image()
  assert re.fullmatch(r'apache/beam_python3\.\d+_sdk:\S+',
                      launch.sdk_image())
  assert opts['--setup_file'] == os.path.join(ROOT, 'setup.py')
  # The user's image and setup file are kept.
  args = spark.beam_args(
      BASE + ['--job_endpoint', 'js:8099', '--environment', 'DOCKER',
              '--environment_config', 'me/sdk:1', '--setup_file',
              '/my/setup.py'], {})
  assert args.count('--setup_file') == 1
  assert _opts(args)['--environment_config'] == 'me/sdk:1'


def test_the_users_environment_cache_is_kept():
  args = spark.beam_args(BASE + ['--environment_cache_millis=0',
                                 '--job_endpoint', 'js:8099'] + EXTERNAL, {})
  assert '--environment_cache_millis=0' in args
  assert '--environment_cache_millis' not in args
  args = spark.beam_args(BASE + ['--environment_cache_millis', '5000',
                                 '--job_endpoint', 'js:8099'] + EXTERNAL, {})
  assert args.count('--environment_cache_millis') == 1
  assert args[args.index('--environment_cache_millis') + 1] == '5000'


def test_beams_environment_type_is_passed_on_with_its_config():
  """As the cluster script's hand-made command spells it."""
  args = spark.beam_args(
      BASE + ['--job_endpoint', 'localhost:8199', '--environment_type',
              'EXTERNAL', '--environment_config', 'localhost:8196'], {})
  opts = _opts(args)
  assert opts['--environment_type'] == 'EXTERNAL'
  assert opts['--environment_config'] == 'localhost:8196'
  assert args.count('--environment_type') == 1


def test_spark_runner_may_be_named():
  for runner in (['--runner', 'SparkRunner'], ['--runner=spark']):
    args = spark.beam_args(BASE + runner + ['--job_endpoint', 'js:8099'] +
                           EXTERNAL, {})
    # Beam reads the last --runner.
    last = len(args) - 1 - args[::-1].index('--runner')
    assert args[last + 1] == 'SparkRunner'


@pytest.mark.parametrize('extra, env, message', [
    ([], {},
     'a Spark submission needs a Beam Spark job server: pass --job_endpoint '
     'HOST:PORT (a running one) or --spark_job_server_jar PATH (Beam starts '
     'it here), or set SPARK_JOB_ENDPOINT or SPARK_JOB_SERVER_JAR; without '
     'them Beam would download a job server jar when the job starts.'),
    # A master alone is no job server.
    (['--spark_master_url', 'spark://m:7077'], {},
     'a Spark submission needs a Beam Spark job server'),
    (['--job_endpoint', 'js:8099', '--spark_job_server_jar', 'JAR'], {},
     'give either --job_endpoint (a running Beam Spark job server) or '
     '--spark_job_server_jar (Beam starts that job server), not both; '
     'SPARK_JOB_ENDPOINT and SPARK_JOB_SERVER_JAR count as given.'),
    (['--spark_job_server_jar', 'JAR'], {'SPARK_JOB_ENDPOINT': 'js:8099'},
     'not both'),
    (['--job_endpoint', 'embed'], {},
     '--job_endpoint "embed" is not the HOST:PORT of a Beam Spark job '
     'server (like localhost:8099).'),
    (['--job_endpoint', 'js:8099', '--spark_master_url', 'spark://m:7077'],
     {},
     'a running Spark job server submits to the master it was started with '
     '(its --spark-master-url); leave out --spark_master_url with '
     '--job_endpoint.'),
    (['--spark_job_server_jar', '/no/such.jar', '--spark_master_url',
      'local'], {},
     'the Spark job server jar /no/such.jar does not exist.'),
    (['--spark_job_server_jar', 'JAR'], {},
     'a Spark submission from --spark_job_server_jar needs the Spark master '
     'URL the job server submits to (spark://HOST:PORT, or local[N] to run '
     'Spark inside the job server): pass --spark_master_url or set '
     'SPARK_MASTER_URL.'),
    (['--spark_job_server_jar', 'JAR', '--spark_master_url', 'm:7077'], {},
     '--spark_master_url "m:7077" is not a Spark master URL '
     '(spark://HOST:PORT, local[N], yarn or k8s://HOST:PORT).'),
    (['--job_endpoint', 'js:8099'], {},
     'with --job_endpoint this script cannot tell where the Spark workers '
     'are; pass --environment EXTERNAL (a worker pool on each worker host), '
     'DOCKER, or LOOPBACK if every Spark worker runs on this machine.'),
    (['--spark_job_server_jar', 'JAR', '--spark_master_url',
      'spark://m:7077'], {},
     'a Spark cluster on another machine cannot reach SDK workers in this '
     'process; pass --environment EXTERNAL (a worker pool on each worker '
     'host) or DOCKER.'),
    (['--spark_job_server_jar', 'JAR', '--spark_master_url',
      'spark://m:7077', '--environment', 'LOOPBACK'], {},
     '--environment LOOPBACK runs the SDK workers in this process, which '
     'the Spark cluster at spark://m:7077 cannot reach; use EXTERNAL or '
     'DOCKER.'),
    (['--job_endpoint', 'js:8099', '--environment', 'LOOPBACK',
      '--environment_config', 'x:1'], {},
     '--environment LOOPBACK takes no --environment_config.'),
    (['--job_endpoint', 'js:8099', '--environment', 'SSH'], {},
     '--environment must be one of LOOPBACK, EXTERNAL, DOCKER, not "SSH".'),
    (['--job_endpoint', 'js:8099', '--environment', 'EXTERNAL'], {},
     '--environment EXTERNAL needs --environment_config HOST:PORT, the '
     'address of the SDK worker pool.'),
    (['--job_endpoint', 'js:8099', '--environment', 'EXTERNAL',
      '--environment_config', 'pool'], {},
     '--environment_config "pool" is not the HOST:PORT of an SDK worker '
     'pool.'),
    (['--job_endpoint', 'js:8099', '--environment', 'EXTERNAL',
      '--environment_type', 'EXTERNAL'], {},
     '--environment and Beam\'s --environment_type both say where the SDK '
     'workers run; give only one.'),
    (['--job_endpoint', 'js:8099', '--environment_cache_millis', 'a day'],
     {},
     '--environment_cache_millis must be a whole number of milliseconds (0 '
     'or more), not "a day".'),
    (['--job_endpoint', 'js:8099', '--environment_cache_millis=-1'], {},
     'not "-1"'),
    (['--job_endpoint', 'js:8099', '--parallelism', '4'], {},
     'Beam\'s Spark runner has no --parallelism: Spark splits the work by '
     'the cores of the job\'s executors (spark.default.parallelism of the '
     'job server); leave it out.'),
    (['--job_endpoint', 'js:8099', '--runner', 'FlinkRunner'], {},
     'run_spark.sh submits to Spark; leave out --runner (use run_local.sh, '
     'run_flink.sh or run_dataflow.sh for other runners).'),
    (['--job_endpoint'], {}, '--job_endpoint needs a value.'),
])
def test_bad_invocations_are_one_sentence(jar, extra, env, message):
  extra = [jar if a == 'JAR' else a for a in extra]
  with pytest.raises(UsageError) as raised:
    spark.beam_args(BASE + extra, env)
  assert message in str(raised.value)


def test_is_local():
  for master in ('local', 'local[4]', 'local[*]', 'spark://localhost:7077',
                 'spark://127.0.0.1:7077,localhost:7078'):
    assert spark.is_local(master), master
  for master in ('spark://m:7077', 'spark://localhost:7077,m:7077', 'yarn',
                 'k8s://https://api:6443'):
    assert not spark.is_local(master), master


def _script(args, **env):
  clean = {k: v for k, v in os.environ.items() if not k.startswith('SPARK_')}
  clean.update(env)
  return subprocess.run([os.path.join(ROOT, 'run_spark.sh')] + args,
                        env=clean, capture_output=True, text=True,
                        timeout=120)


def test_run_spark_sh_bad_invocation_exits_2():
  proc = _script(['--modality', 'image', '--input', 'in', '--output', 'out'])
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      'error: A Spark submission needs a Beam Spark job server: pass '
      '--job_endpoint HOST:PORT (a running one) or --spark_job_server_jar '
      'PATH (Beam starts it here), or set SPARK_JOB_ENDPOINT or '
      'SPARK_JOB_SERVER_JAR; without them Beam would download a job server '
      'jar when the job starts.']
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result['exit_code'] == 2 and result['status'] == 'bad_invocation'


def test_run_spark_sh_help():
  proc = _script(['--help'])
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.startswith('Submits the preprocessing job to a Spark')
  for flag in spark.FLAGS:
    assert flag in proc.stdout
  for variable in (v for names in spark.FLAGS.values() for v in names):
    assert variable in proc.stdout
