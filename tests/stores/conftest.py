"""A real GCS server on loopback for the object-store tests, one per test
session (tests/gcs_server.py: fake-gcs-server behind a small front that
TensorFlow also reaches), and the project's sample inputs."""

import pytest

import gcs_server
from engines_lib import run
from gcs_server import BUCKET


@pytest.fixture(scope='session')
def gcs(tmp_path_factory):
  """A GcsServer holding an empty BUCKET, kept in memory."""
  server = gcs_server.GcsServer(str(tmp_path_factory.mktemp('gcs')),
                                buckets=[BUCKET])
  yield server
  server.stop()


@pytest.fixture(autouse=True)
def _no_faults_left(request):
  """Each test starts and ends with no fault rules in the front."""
  if 'gcs' in request.fixturenames:
    server = request.getfixturevalue('gcs')
    server.faults.clear()
    yield
    server.faults.clear()
  else:
    yield


@pytest.fixture(scope='session')
def store_samples(tmp_path_factory):
  """{modality: (folder to upload, input below it or '', flags)}: the
  project's sample inputs (oddities included)."""
  import sys  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp('store_samples')
  python = [sys.executable, '-m', 'pipelines.sample_data']
  for argv in (['--output', str(root / 'image'), '--count', '60',
                '--oddities'],
               ['--modality', 'text', '--output', str(root / 'text'),
                '--count', '300'],
               ['--modality', 'sensor', '--output', str(root / 'sensor')]):
    proc = run(python + argv, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
  return {'image': (root / 'image', ''),
          'text': (root / 'text', 'quotes.csv'),
          'sensor': (root / 'sensor', 'logs')}
