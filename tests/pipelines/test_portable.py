"""The pipelines through Beam's portable path: PortableRunner against the
Python job service, embedded and as separate processes with an external
worker pool, and the FlinkRunner's submission path (run_flink.sh) against
that job service. The output must have the DirectRunner's fingerprint.

This proves the pipelines translate to the portable representation (the
pipeline proto, gRPC, separate SDK workers) and run there; it does not run
Flink, whose job server is a jar this machine cannot download.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

import imagegen
import sensorgen
from pipelines import command_line
from pipelines import flink
from pipelines import launch
from pipelines import preprocess
from pipelines.options import UsageError
import repo

ROOT = repo.ROOT
SENSOR = ['--modality', 'sensor', '--timestamp_column', 'time',
          '--entity_column', 'device', '--window_length', '20',
          '--window_stride', '10', '--chunk_rows', '1000']
IMAGE = ['--modality', 'image', '--image_size', '32', '--max_pixels',
         '1000000']


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
  root = tmp_path_factory.mktemp('portable_inputs')
  sensorgen.frame(devices=12, rows_per_device=150, seed=4).to_csv(
      root / 'log.csv', index=False)
  imagegen.write_good_images(str(root / 'images'))
  return {'sensor': (root / 'log.csv', SENSOR),
          'image': (root / 'images', IMAGE)}


def _run(src, out, flags, *runner):
  return preprocess.run(['--input', str(src), '--output', str(out)] +
                        flags + list(runner))


@pytest.fixture(scope='module')
def direct_fingerprints(inputs, tmp_path_factory):
  out = tmp_path_factory.mktemp('direct')
  return {name: _run(src, out / name, flags)['fingerprint']
          for name, (src, flags) in inputs.items()}


@pytest.mark.parametrize('modality', ['image', 'sensor'])
def test_embedded_job_service(inputs, direct_fingerprints, tmp_path,
                              modality):
  src, flags = inputs[modality]
  manifest = _run(src, tmp_path / 'out', flags, '--runner', 'PortableRunner',
                  '--job_endpoint', 'embed', '--environment_type',
                  'LOOPBACK')
  assert manifest['fingerprint'] == direct_fingerprints[modality]


def _free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _wait_for_port(port, proc, deadline_s=60):
  deadline = time.time() + deadline_s
  while time.time() < deadline:
    if proc.poll() is not None:
      raise RuntimeError(f'service exited with {proc.returncode}')
    with socket.socket() as s:
      if s.connect_ex(('localhost', port)) == 0:
        return
    time.sleep(0.2)
  raise TimeoutError(f'nothing listens on port {port} after {deadline_s} s')


@pytest.fixture
def job_service_and_worker_pool(tmp_path):
  """A local job service and an external SDK worker pool, as processes;
  stopped by process id whatever happens."""
  env = dict(os.environ, PYTHONPATH=ROOT,
             PATH=os.path.dirname(sys.executable) + os.pathsep +
             os.environ.get('PATH', ''))
  job_port, pool_port = _free_port(), _free_port()
  procs = []
  try:
    for args, name in (
        (['-m', 'apache_beam.runners.portability.local_job_service_main',
          '--port', str(job_port)], 'job_service'),
        (['-m', 'apache_beam.runners.worker.worker_pool_main',
          '--service_port', str(pool_port)], 'worker_pool')):
      log = open(tmp_path / f'{name}.log', 'w', encoding='utf-8')
      procs.append(subprocess.Popen([sys.executable] + args, env=env,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True))
    _wait_for_port(job_port, procs[0])
    _wait_for_port(pool_port, procs[1])
    yield job_port, pool_port
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, 15)
    for proc in procs:
      try:
        proc.wait(timeout=20)
      except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=20)


@pytest.mark.parametrize('modality', ['image', 'sensor'])
def test_separate_job_service_with_external_worker_pool(
    inputs, direct_fingerprints, tmp_path, job_service_and_worker_pool,
    modality):
  job_port, pool_port = job_service_and_worker_pool
  src, flags = inputs[modality]
  manifest = _run(src, tmp_path / 'out', flags, '--runner', 'PortableRunner',
                  '--job_endpoint', f'localhost:{job_port}',
                  '--environment_type', 'EXTERNAL', '--environment_config',
                  f'localhost:{pool_port}')
  assert manifest['fingerprint'] == direct_fingerprints[modality]


# --- Flink ------------------------------------------------------------------


@pytest.mark.parametrize('modality, environment', [
    ('image', 'EXTERNAL'), ('sensor', 'LOOPBACK')])
def test_flink_runner_submission_path_through_python_job_service(
    inputs, direct_fingerprints, tmp_path, job_service_and_worker_pool,
    modality, environment):
  """run_flink.sh -> FlinkRunner -> a job service -> SDK workers.

  The job service here is Beam's Python one, not Beam's Flink job server
  (a jar this machine cannot download), so this proves that the launcher's
  options and the FlinkRunner's submission path (portable translation,
  artifact staging, job service API, SDK workers) work with these
  pipelines; it does not prove that Flink executed them.
  """
  job_port, pool_port = job_service_and_worker_pool
  src, flags = inputs[modality]
  out = tmp_path / 'out'
  args = [os.path.join(ROOT, 'run_flink.sh'), '--input', str(src), '--output',
          str(out), '--flink_master', 'localhost:8081', '--parallelism', '2',
          '--job_endpoint', f'localhost:{job_port}'] + flags
  if environment == 'EXTERNAL':
    args += ['--environment', 'EXTERNAL', '--environment_config',
             f'localhost:{pool_port}']
  proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  assert summary['runner'] == 'FlinkRunner'
  assert summary['status'] == 'published'
  assert summary['fingerprint'] == direct_fingerprints[modality]


def test_flink_launcher_options(tmp_path):
  jar = tmp_path / 'beam-runners-flink-1.19-job-server-2.77.0.jar'
  jar.write_bytes(b'PK')
  base = ['--modality', 'image', '--input', '/shared/in', '--output',
          '/shared/out']
  args = flink.beam_args(base + [
      '--flink_master', 'flink-jm:8081', '--parallelism', '8',
      '--environment', 'docker', '--job_server_jar', str(jar)], {})
  assert args[:6] == base
  opts = dict(zip(args[6::2], args[7::2]))
  assert opts == {
      '--runner': 'FlinkRunner', '--flink_master': 'flink-jm:8081',
      '--flink_job_server_jar': str(jar), '--parallelism': '8',
      '--environment_cache_millis': '60000',
      '--environment_type': 'DOCKER',
      '--environment_config': launch.sdk_image(),
      '--setup_file': os.path.join(ROOT, 'setup.py')}
  assert launch.sdk_image().startswith('apache/beam_python3.')
  # The user's environment cache is kept, and checked.
  args = flink.beam_args(base + ['--flink_master', 'localhost:8081',
                                 '--environment_cache_millis=0'], {})
  assert '--environment_cache_millis=0' in args
  assert '--environment_cache_millis' not in args
  with pytest.raises(UsageError, match='whole number of milliseconds'):
    flink.beam_args(base + ['--flink_master', 'localhost:8081',
                            '--environment_cache_millis', '1m'], {})
  # Environment variables stand in for flags; a local master defaults to
  # LOOPBACK.
  args = flink.beam_args(base, {'FLINK_MASTER': 'localhost:8081',
                                'FLINK_PARALLELISM': '2'})
  opts = dict(zip(args[6::2], args[7::2]))
  assert opts['--flink_master'] == 'localhost:8081'
  assert opts['--parallelism'] == '2'
  assert opts['--environment_type'] == 'LOOPBACK'
  assert '--environment_config' not in opts
  # A running job server needs no master.
  args = flink.beam_args(base + ['--job_endpoint', 'js:8099', '--environment',
                                 'EXTERNAL', '--environment_config',
                                 'localhost:8096'], {})
  assert '--flink_master' not in args and 'js:8099' in args
  # Beam's own --environment_type is passed on with its address (the
  # launcher's flag table once kept --environment_config to itself).
  args = flink.beam_args(base + ['--job_endpoint', 'js:8099',
                                 '--environment_type', 'EXTERNAL',
                                 '--environment_config', 'pool:50000'], {})
  assert args[args.index('--environment_type') + 1] == 'EXTERNAL'
  assert args[args.index('--environment_config') + 1] == 'pool:50000'
  with pytest.raises(UsageError, match='give only one'):
    flink.beam_args(base + ['--job_endpoint', 'js:8099', '--environment',
                            'EXTERNAL', '--environment_type', 'EXTERNAL'], {})


def test_flink_execution_mode_reaches_the_job_server():
  """--execution_mode_for_batch, a flag of Beam's Java Flink runner, passes
  the project's check for unknown flags and is among the options sent to
  the job server."""
  from apache_beam.options.pipeline_options import PipelineOptions
  from apache_beam.runners.portability import portable_runner
  argv = ['--runner', 'FlinkRunner', '--execution_mode_for_batch',
          'BATCH_FORCED']
  parser = command_line.preprocess_parser()
  assert command_line.read(parser, argv) == []
  assert command_line.read(parser, ['--execution_mode_for_batchh', 'x']) == [
      '--execution_mode_for_batchh']
  options = PipelineOptions(argv)
  assert options.get_all_options()['execution_mode_for_batch'] == (
      'BATCH_FORCED')
  proto = portable_runner.JobServiceHandle.encode_pipeline_options(
      options.get_all_options())
  assert proto.fields[
      'beam:option:execution_mode_for_batch:v1'].string_value == 'BATCH_FORCED'
  # Beam's own default (PIPELINED) unless the user asks.
  args = flink.beam_args(['--modality', 'text', '--job_endpoint', 'js:8099',
                          '--environment', 'EXTERNAL', '--environment_config',
                          'localhost:8096'], {})
  assert '--execution_mode_for_batch' not in args


@pytest.mark.parametrize('extra, message', [
    ([], 'needs the Flink master address'),
    (['--flink_master', 'flink-jm'], 'is not HOST:PORT'),
    (['--flink_master', 'flink-jm:8081'],
     'cannot reach SDK workers in this process'),
    (['--flink_master', 'flink-jm:8081', '--environment', 'LOOPBACK'],
     'which the Flink cluster at flink-jm:8081 cannot reach'),
    (['--flink_master', 'localhost:8081', '--environment', 'SSH'],
     '--environment must be one of LOOPBACK, EXTERNAL, DOCKER'),
    (['--flink_master', 'flink-jm:8081', '--environment', 'EXTERNAL'],
     'needs --environment_config HOST:PORT'),
    (['--flink_master', 'localhost:8081', '--parallelism', '0'],
     '--parallelism must be a whole number'),
    (['--flink_master', 'localhost:8081', '--job_server_jar', '/no/such.jar'],
     'the Flink job server jar /no/such.jar does not exist'),
    (['--flink_master', 'localhost:8081', '--runner', 'DataflowRunner'],
     'leave out --runner'),
])
def test_flink_launcher_bad_invocations(extra, message):
  with pytest.raises(UsageError, match=re.escape(message)):
    flink.beam_args(['--modality', 'image'] + extra, {})


def test_run_flink_sh_bad_invocation_exits_2():
  env = {k: v for k, v in os.environ.items() if not k.startswith('FLINK_')}
  proc = subprocess.run(
      [os.path.join(ROOT, 'run_flink.sh'), '--modality', 'image', '--input',
       'in', '--output', 'out'], env=env, capture_output=True, text=True,
      timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      'error: A Flink submission needs the Flink master address (HOST:PORT '
      'of the JobManager\'s REST endpoint, or [local]) unless --job_endpoint '
      'names a running Beam Flink job server: pass --flink_master or set '
      'FLINK_MASTER.']
  assert json.loads(proc.stdout.strip().splitlines()[-1])['exit_code'] == 2
