"""Session fixtures the test folders share: the project's sample inputs,
with the oddities real collections have, and a real GCS server on
loopback (tests/gcs_server.py).

./run_tests.sh runs the suite in two pytest-xdist workers. The engine and
object-store tests (tests/engines, tests/stores) are one xdist group: they
run one after another on one worker, which starts the Flink and Spark
clusters and the GCS server once, while the other worker takes the rest.
"""

import os
import sys

import pytest

import gcs_server
from engines_lib import run

# The folders whose tests share a cluster or a server, run in one group.
SERIAL = ('engines', 'stores')
_TESTS = os.path.dirname(os.path.abspath(__file__))


# First: xdist's own hook reads the group marks to name the groups.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
  for item in items:
    folder = os.path.relpath(str(item.path), _TESTS).split(os.sep)[0]
    if folder in SERIAL:
      item.add_marker(pytest.mark.xdist_group('serial'))


def pytest_collection_finish(session):
  """In an xdist worker of `--dist loadgroup`, every test of the group
  carries its name (xdist's mark), or the clusters' tests would run in
  both workers at once."""
  if not getattr(session.config.option, 'loadgroup', False):
    return
  lost = [item.nodeid for item in session.items
          if item.get_closest_marker('xdist_group') and
          not item.nodeid.endswith('@serial')]
  if lost:
    raise pytest.UsageError(
        f'pytest-xdist did not group {len(lost)} tests (e.g. {lost[0]}): '
        'this pytest renames tests in a way xdist does not follow.')


@pytest.fixture(scope='session')
def sample_inputs(tmp_path_factory):
  """{modality: the --input of its sample}."""
  root = tmp_path_factory.mktemp('engine_inputs')
  python = [sys.executable, '-m', 'pipelines.sample_data']
  for argv in (['--output', str(root / 'images'), '--count', '60',
                '--oddities'],
               ['--modality', 'text', '--output', str(root / 'text'),
                '--count', '300'],
               ['--modality', 'sensor', '--output', str(root / 'sensor')]):
    proc = run(python + argv, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
  return {'image': str(root / 'images'),
          'text': str(root / 'text' / 'quotes.csv'),
          'sensor': str(root / 'sensor' / 'logs')}


@pytest.fixture(scope='session')
def gcs(tmp_path_factory):
  """A GcsServer holding an empty bucket gcs_server.BUCKET, in memory."""
  server = gcs_server.GcsServer(str(tmp_path_factory.mktemp('gcs')),
                                buckets=[gcs_server.BUCKET])
  yield server
  server.stop()
