"""Real Flink and Spark clusters for the engines' tests, one per test session.

The clusters are the ones a user starts: scripts/flink_cluster.sh and
scripts/spark_cluster.sh (separate JVMs for the JobManager, the two
TaskManagers, the Spark master and its two workers; Beam's job servers; the
project's SDK worker pools). A session fixture starts a cluster the first
time a test asks for it and stops it when the session ends; a cluster that
was already running when the session began is used and left running. These
tests always run: a cluster that cannot start fails them.

The sample inputs are the project's own (pipelines.sample_data), with the
oddities real collections have: transparent PNGs and a JPEG cut short,
repeated documents and an empty one, sensor logs of eight devices rotated
into three files that repeat rows, with a dropout and one unreadable
timestamp. The reference for every
engine run is the DirectRunner's run of the same input and flags.
"""

import os
import sys

import pytest

from engines_lib import FLINK_SCRIPT
from engines_lib import SPARK_SCRIPT
from engines_lib import dataset_facts
from engines_lib import env
from engines_lib import preprocess_argv
from engines_lib import run


def _cluster(script, environment=None):
  """Starts the cluster (in `environment`) unless it runs; yields; stops
  it if it started it."""
  status = run([script, 'status'], timeout=120)
  started = status.returncode != 0
  if started:
    start = run([script, 'start'], timeout=1200, environment=environment)
    assert start.returncode == 0, (
        f'{os.path.basename(script)} start failed:\n{start.stderr[-4000:]}')
  yield
  if started:
    stop = run([script, 'stop'], timeout=300)
    assert stop.returncode == 0, stop.stderr[-3000:]


@pytest.fixture(scope='session')
def flink_cluster(gcs):
  """The Flink cluster, started with the session's GCS server named in its
  environment, as a cluster set up for an emulator is: its SDK workers
  read and write gs:// there (a cluster that was already running when the
  session began does not know the server)."""
  yield from _cluster(FLINK_SCRIPT, gcs.env(env()))


@pytest.fixture(scope='session')
def spark_cluster():
  yield from _cluster(SPARK_SCRIPT)


@pytest.fixture(scope='session')
def direct_runs(sample_inputs, tmp_path_factory):
  """facts(modality): the facts of the DirectRunner's run of the sample,
  made once per session."""
  made = {}

  def facts(modality):
    if modality not in made:
      out = tmp_path_factory.mktemp(f'direct_{modality}') / 'dataset'
      proc = run([sys.executable, '-m', 'pipelines.preprocess'] +
                 preprocess_argv(modality, sample_inputs, out))
      assert proc.returncode == 0, proc.stderr[-3000:]
      made[modality] = dataset_facts(out)
    return made[modality]

  return facts


# The fault tests' image sample: larger than the shared one, so that a job
# runs long enough to be disturbed at several moments while it runs.
FAULT_IMAGES = 320


@pytest.fixture(scope='session')
def big_images(tmp_path_factory):
  """{'image': the --input of the fault tests' larger image sample}."""
  root = tmp_path_factory.mktemp('fault_inputs') / 'images'
  proc = run([sys.executable, '-m', 'pipelines.sample_data', '--output',
              str(root), '--count', str(FAULT_IMAGES), '--oddities'],
             timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return {'image': str(root)}


@pytest.fixture(scope='session')
def big_direct_output(big_images, tmp_path_factory):
  """The output of the DirectRunner's run of the larger sample (once
  per session, for the Flink and the Spark fault tests)."""
  out = tmp_path_factory.mktemp('fault_direct') / 'dataset'
  proc = run([sys.executable, '-m', 'pipelines.preprocess'] +
             preprocess_argv('image', big_images, out), timeout=1200)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out


