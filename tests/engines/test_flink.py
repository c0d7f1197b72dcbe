"""Every modality on a real Flink cluster, through run_flink.sh.

The cluster is scripts/flink_cluster.sh's: a JobManager and two
TaskManagers as separate JVMs (one slot each), Beam's Flink job server and
the project's SDK worker pool (EXTERNAL environment), on Beam's batch
(DataSet) path with parallelism 2. Each run must publish the DirectRunner's
dataset (fingerprints, manifest counts, dead letters), pass validation, and
Flink's REST API must show the job FINISHED with subtasks on both
TaskManagers.
"""

import os
import sys

import pytest

from engines_lib import FLINK_JOB_ENDPOINT
from engines_lib import FLINK_REST
from engines_lib import FLINK_WORKER_POOL
from engines_lib import assert_same_dataset
from engines_lib import dataset_facts
from engines_lib import env
from engines_lib import get_json
from engines_lib import preprocess_argv
from engines_lib import run
from engines_lib import summary
from gcs_server import BUCKET
from repo import ROOT

RUN_FLINK = os.path.join(ROOT, 'run_flink.sh')


def flink_argv(modality, inputs, output):
  return ([RUN_FLINK] + preprocess_argv(modality, inputs, output) +
          ['--job_endpoint', FLINK_JOB_ENDPOINT, '--environment', 'EXTERNAL',
           '--environment_config', FLINK_WORKER_POOL, '--parallelism', '2'])


def job_ids():
  return {j['jid'] for j in get_json(f'{FLINK_REST}/jobs/overview')['jobs']}


def taskmanagers_that_finished_subtasks(jid):
  """The TaskManagers on which the job's subtasks ran to the end."""
  job = get_json(f'{FLINK_REST}/jobs/{jid}')
  seen = set()
  for vertex in job['vertices']:
    placed = get_json(f'{FLINK_REST}/jobs/{jid}/vertices/{vertex["id"]}/'
                      'taskmanagers')
    seen |= {t['taskmanager-id'] for t in placed['taskmanagers']
             if t['status'] == 'FINISHED'}
  return seen


@pytest.mark.parametrize('modality', ['image', 'text', 'sensor'])
def test_each_modality_on_flink_publishes_the_direct_runners_dataset(
    modality, flink_cluster, sample_inputs, direct_runs, tmp_path):
  taskmanagers = get_json(f'{FLINK_REST}/taskmanagers')['taskmanagers']
  assert len(taskmanagers) == 2
  before = job_ids()
  out = tmp_path / 'dataset'
  proc = run(flink_argv(modality, sample_inputs, out))
  assert proc.returncode == 0, proc.stderr[-4000:]
  result = summary(proc)
  assert result['status'] == 'published'
  assert result['runner'] == 'FlinkRunner'
  assert_same_dataset(dataset_facts(out), direct_runs(modality))

  # The job ran on the cluster, spread over both TaskManagers.
  jobs = [j for j in get_json(f'{FLINK_REST}/jobs/overview')['jobs']
          if j['jid'] not in before]
  assert [j['state'] for j in jobs] == ['FINISHED']
  assert taskmanagers_that_finished_subtasks(jobs[0]['jid']) == {
      t['id'] for t in taskmanagers}

  check = run([sys.executable, '-m', 'pipelines.validate', '--output',
               str(out)], timeout=600)
  assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]


def test_the_taskmanagers_working_files_are_in_the_run_folder(flink_cluster):
  """Not loose in /tmp: each TaskManager keeps the jobs' jars in its
  working folder, and a killed one leaves it behind; stop removes the run
  folder's tmp (scripts/flink_cluster.sh)."""
  config = {e['key']: e['value']
            for e in get_json(f'{FLINK_REST}/jobmanager/config')}
  run_folder = os.environ.get('TFRP_RUN', '/tmp/tfrecord-pipelines-flink')
  assert config['io.tmp.dirs'] == os.path.join(run_folder, 'tmp')
  assert config['blob.service.cleanup.interval'] == '60'
  for tm in get_json(f'{FLINK_REST}/taskmanagers')['taskmanagers']:
    assert os.path.isdir(os.path.join(run_folder, 'tmp', f'tm_{tm["id"]}'))
    assert not os.path.exists(f'/tmp/tm_{tm["id"]}')


def test_more_subtasks_than_slots_with_batch_forced(
    flink_cluster, sample_inputs, direct_runs, tmp_path):
  """--execution_mode_for_batch BATCH_FORCED runs a job of parallelism 4 on
  the 2 slots (its subtasks take turns), and publishes the same dataset.
  (With Beam's default, PIPELINED, such a job waits for 4 free slots.)"""
  before = job_ids()
  out = tmp_path / 'dataset'
  argv = flink_argv('text', sample_inputs, out)
  argv[argv.index('--parallelism') + 1] = '4'
  proc = run(argv + ['--execution_mode_for_batch', 'BATCH_FORCED'])
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert summary(proc)['status'] == 'published'
  assert_same_dataset(dataset_facts(out), direct_runs('text'))
  jobs = [j for j in get_json(f'{FLINK_REST}/jobs/overview')['jobs']
          if j['jid'] not in before]
  assert [j['state'] for j in jobs] == ['FINISHED']
  jid = jobs[0]['jid']
  config = get_json(f'{FLINK_REST}/jobs/{jid}/config')['execution-config']
  assert config['execution-mode'] == 'BATCH_FORCED'
  vertices = get_json(f'{FLINK_REST}/jobs/{jid}')['vertices']
  assert max(v['parallelism'] for v in vertices) == 4
  assert len(get_json(f'{FLINK_REST}/taskmanagers')['taskmanagers']) == 2


def test_a_flink_run_with_its_input_and_output_on_gs(
    flink_cluster, gcs, sample_inputs, direct_runs, tmp_path):
  """The image sample uploaded to the session's GCS server; the job's SDK
  workers on the cluster read the images and write the dataset through
  Beam's and TensorFlow's GCS file systems (tf.Transform's temp files and
  exported transform too). The dataset must be the DirectRunner's of the
  same files on disk."""
  remote = f'gs://{BUCKET}/flink'
  assert gcs.upload(sample_inputs['image'], remote + '/in') > 0
  environment = gcs.env(env())
  before = job_ids()
  proc = run(flink_argv('image', {'image': remote + '/in'}, remote + '/out'),
             environment=environment)
  assert proc.returncode == 0, proc.stderr[-4000:]
  result = summary(proc)
  assert result['status'] == 'published'
  assert result['runner'] == 'FlinkRunner'
  jobs = [j for j in get_json(f'{FLINK_REST}/jobs/overview')['jobs']
          if j['jid'] not in before]
  assert [j['state'] for j in jobs] == ['FINISHED']

  copy = tmp_path / 'copy'
  assert gcs.download(remote + '/out', str(copy)) > 0
  assert_same_dataset(
      dataset_facts(str(copy), (remote + '/in', sample_inputs['image'])),
      direct_runs('image'))
  check = run([sys.executable, '-m', 'pipelines.validate', '--output',
               remote + '/out'], timeout=600, environment=environment)
  assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
