"""The one-writer lease and the publish step on gs://, against a real GCS
server (tests/gcs_server.py), with real runs as separate processes.

- Processes racing for one output: exactly one wins, through the server's
  generation preconditions (ifGenerationMatch), both for whole runs and
  for bare lease takers started at the same instant.
- A run killed before, during and after the manifest write (the commit):
  the front holds the request in question while the test kills the run's
  process group. Before: the server never gets the manifest; during: the
  server wrote it, the run never heard; after: the old dataset's clean-up
  had begun. Each time the dataset the manifest names is whole and
  validates, and a retry (waiting out the killed run's lease) publishes
  exactly one dataset.
- A second run without --overwrite is refused and changes nothing.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from engines_lib import FLAGS
from engines_lib import env as user_env
from engines_lib import run
from engines_lib import summary
from engines_lib import wait_until
from gcs_server import BUCKET
from gcs_server import encoded_name
from gcs_server import without_server
import repo

LEASE_FLAGS = ['--lease_seconds', '10']


def _argv(source, output, *extra):
  return ([sys.executable, '-m', 'pipelines.preprocess'] + FLAGS['text'] +
          ['--input', source, '--output', output] + LEASE_FLAGS +
          list(extra))


def _manifest(gcs, output):
  bucket, _, prefix = output[len('gs://'):].partition('/')
  blob = gcs.client().bucket(bucket).blob(prefix + '/manifest.json')
  return json.loads(blob.download_as_bytes()) if blob.exists() else None


def _run_folders(gcs, output):
  return sorted({n.split('/')[0] for n in gcs.names(output)
                 if n.startswith('run-') and '/' in n})


def _validates(gcs, output):
  proc = run([sys.executable, '-m', 'pipelines.validate', '--output',
              output], timeout=600, environment=gcs.env(
                  without_server(user_env())))
  return proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope='module')
def text_input(gcs, store_samples):
  folder, name = store_samples['text']
  gcs.upload(str(folder), f'gs://{BUCKET}/lease-in')
  return f'gs://{BUCKET}/lease-in/{name}'


@pytest.fixture(scope='module')
def first(gcs, text_input):
  """(output of run A, A's manifest): A published to a template output
  that each test copies."""
  output = f'gs://{BUCKET}/lease-template'
  proc = run(_argv(text_input, output),
             environment=gcs.env(without_server(user_env())))
  assert proc.returncode == 0, proc.stderr[-4000:]
  return output, _manifest(gcs, output)


def _copy(gcs, source, target):
  """Every object below `source` to the same name below `target`, on the
  server (a rewrite, as gsutil cp does)."""
  bucket = gcs.client().bucket(BUCKET)
  for name in gcs.names(source):
    blob = bucket.blob(source[len(f'gs://{BUCKET}/'):] + '/' + name)
    bucket.copy_blob(blob, bucket,
                     target[len(f'gs://{BUCKET}/'):] + '/' + name)


def test_runs_racing_for_one_output_one_publishes(gcs, text_input):
  output = f'gs://{BUCKET}/race-runs/out'
  env = gcs.env(without_server(user_env()))
  procs = [subprocess.Popen(_argv(text_input, output), cwd=repo.ROOT,
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
           for _ in range(4)]
  results = [(p.returncode, out, err) for p in procs
             for out, err in [p.communicate(timeout=900)]]
  published = [r for r in results if r[0] == 0]
  refused = [r for r in results if r[0] != 0]
  assert len(published) == 1, [r[2][-500:] for r in results]
  for code, _, err in refused:
    assert code == 2, err[-2000:]
    assert ('is being written by run' in err or
            'already holds a dataset' in err), err[-2000:]
  winner = json.loads(published[0][1].strip().splitlines()[-1])
  manifest = _manifest(gcs, output)
  assert manifest['run_id'] == winner['run_id']
  assert _run_folders(gcs, output) == [manifest['data_dir']]
  assert '.lease.json' not in gcs.names(output)


_TAKER = '''
import json, sys, time
from transforms.output import lease as lease_lib
output, run_id, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
lease = lease_lib.Lease(output, run_id, seconds=60)
time.sleep(max(0.0, start - time.time()))
holder = lease.try_acquire()
print(json.dumps({'won': holder is None}))
'''


def test_lease_takers_started_at_one_instant_one_wins(gcs):
  output = f'gs://{BUCKET}/race-leases/out'
  env = gcs.env(without_server(user_env()))
  start = time.time() + 8  # after every process has imported Beam
  procs = [subprocess.Popen([sys.executable, '-c', _TAKER, output,
                             f'taker{i}', str(start)], cwd=repo.ROOT,
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
           for i in range(6)]
  won = []
  for i, proc in enumerate(procs):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    if json.loads(out.strip().splitlines()[-1])['won']:
      won.append(f'taker{i}')
  assert len(won) == 1, won
  bucket, _, prefix = output[len('gs://'):].partition('/')
  lease = json.loads(gcs.client().bucket(bucket).blob(
      prefix + '/.lease.json').download_as_bytes())
  assert lease['run_id'] == won[0]


# Where a run is killed: the request held, and where it is held.
KILL_POINTS = {
    # The manifest's upload (its last PUT, which names the object) is
    # dropped unsent.
    'before': ('PUT', 'name={manifest}&', 'request'),
    # The server has written the manifest; its answer is held.
    'during': ('PUT', 'name={manifest}&', 'response'),
    # The first step after the commit: the TFDS files are copied beside
    # the manifest.
    'after': ('POST', '(copyTo|rewriteTo)/b/{bucket}/o/{dataset_info}',
              'request'),
}


@pytest.mark.parametrize('point', list(KILL_POINTS))
def test_a_run_killed_at_the_commit_leaves_a_whole_dataset_and_a_retry_publishes_once(  # pylint: disable=line-too-long
    gcs, text_input, first, point):
  template, manifest_a = first
  output = f'gs://{BUCKET}/kill-{point}/out'
  _copy(gcs, template, output)
  method, pattern, at = KILL_POINTS[point]
  gcs.faults.hold(method, pattern.format(
      manifest=encoded_name(output + '/manifest.json'), bucket=BUCKET,
      dataset_info=encoded_name(output + '/dataset_info.json')), at=at)
  env = gcs.env(without_server(user_env()))
  victim = subprocess.Popen(_argv(text_input, output, '--overwrite'),
                            cwd=repo.ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
  try:
    wait_until(lambda: gcs.faults.applied or victim.poll() is not None,
               timeout=600, what=f'the run to reach the point {point}')
    assert victim.poll() is None, victim.communicate()[1][-3000:]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=60)
  finally:
    gcs.faults.release()
  # The killed run's lease is left behind, to run out.
  assert '.lease.json' in gcs.names(output)

  after_kill = _manifest(gcs, output)
  if point == 'before':
    assert after_kill == manifest_a
  else:
    assert after_kill['run_id'] != manifest_a['run_id']
    assert after_kill['fingerprint'] == manifest_a['fingerprint']
  ok, report = _validates(gcs, output)
  assert ok, report

  retry = run(_argv(text_input, output, '--overwrite', '--wait_for_output',
                    '120'), environment=env)
  assert retry.returncode == 0, retry.stderr[-4000:]
  final = _manifest(gcs, output)
  assert final['run_id'] == summary(retry)['run_id']
  assert final['fingerprint'] == manifest_a['fingerprint']
  assert final['totals'] == manifest_a['totals']
  # One dataset: the retry's run folder only, and no lease left.
  assert _run_folders(gcs, output) == [final['data_dir']]
  assert '.lease.json' not in gcs.names(output)
  ok, report = _validates(gcs, output)
  assert ok, report


def test_a_second_run_without_overwrite_changes_nothing(gcs, text_input,
                                                        first):
  template, manifest_a = first
  output = f'gs://{BUCKET}/second-run/out'
  _copy(gcs, template, output)
  before = gcs.names(output)
  proc = run(_argv(text_input, output),
             environment=gcs.env(without_server(user_env())))
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert summary(proc)['status'] == 'bad_invocation'
  assert ('already holds a dataset; pass --overwrite to replace it.'
          in proc.stderr), proc.stderr[-3000:]
  assert 'Traceback' not in proc.stderr
  assert gcs.names(output) == before
  assert _manifest(gcs, output) == manifest_a
