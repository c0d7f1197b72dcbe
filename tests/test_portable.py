"""The pipelines through Beam's portable path: PortableRunner against the
Python job service, embedded and as separate processes with an external
worker pool. The output must have the DirectRunner's fingerprint.

This proves the pipelines translate to the portable representation (the
pipeline proto, gRPC, separate SDK workers) and run there; it does not run
Flink, whose job server is a jar this machine cannot download.
"""

import os
import socket
import subprocess
import sys
import time

import pytest

import imagegen
import sensorgen
from pipelines import preprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
