"""Faults during a job on a real Spark cluster, through run_spark.sh
(scripts/spark_cluster.sh's cluster, see test_spark.py).

  - A scheduler's SIGTERM to run_spark.sh: the launcher cancels the job
    through Beam's Spark job server, its Spark application ends, the run
    ends "cancelled" with exit code 143, and the dataset published before
    at the same output is left as it was, byte for byte: the cancelled
    run's folder is gone, with nothing a worker of the cancelled job wrote
    into it after the launcher first removed it (seen here: a hold file
    made by a bundle still running in an SDK worker after the application
    had ended).
  - Processes lost in the middle of one image job, at three moments
    chosen while it runs (SIGKILL, as the OOM killer or a lost machine
    does): an executor JVM while the images are read and decoded, an SDK
    worker (a child of the cluster's worker pool) in tf.Transform's
    analysis (building its graph or running the analyzers through it), and
    an executor again while the shards are written (a part the job passed
    between two looks of the test is disturbed in another job). Spark retries the lost tasks and recomputes the lost
    shuffle output, each worker starts a new executor in place of the lost
    one (the pool ends the executor whose SDK worker was killed, which
    would otherwise fail every task it is given), and the job publishes
    the DirectRunner's dataset, record for record, once.

Which part of the pipeline runs is read from what the job does on this
machine, since the Spark stages of a portable Beam job carry no transform
names (every stage is "mapPartitionsToPair at
GroupNonMergingWindowsFunctions", "collect at BoundedDataset" or the
like): the SDK workers' progress counts (images decoded of images listed,
transforms/runtime/progress.py), which worker has loaded TensorFlow (none
does before tf.Transform builds its graph), the transform function
tf.Transform writes when its analysis is done, and the shard files Beam
writes in the run folder. The running
application's REST API (the job server's driver UI) says which executors
have tasks running and which stages run, and that Spark lost each
executor.
"""

import collections
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from engines_lib import SPARK_MASTER_UI
from engines_lib import SPARK_WORKER_POOL
from engines_lib import assert_same_dataset
from engines_lib import cmdline
from engines_lib import dataset_facts
from engines_lib import env
from engines_lib import get_json
from engines_lib import pids_where
from engines_lib import preprocess_argv
from engines_lib import run
from engines_lib import sdk_workers
from engines_lib import snapshot
from engines_lib import summary
from engines_lib import tensorflow_loaded
from engines_lib import wait_until
from pipelines.worker_pool import open_targets
from repo import ROOT
from test_spark import app_ids
from test_spark import new_finished_apps
from test_spark import spark_argv
from transforms.runtime import progress

# Seconds the job's application runs before the SIGTERM (the sample's
# runs take 50-90 s in all).
RUNNING_FOR = 15


def _active(before):
  """The applications that appeared since `before` and still run."""
  master = get_json(f'{SPARK_MASTER_UI}/json/')
  return [a for a in master['activeapps'] if a['id'] not in before]


def test_sigterm_cancels_the_spark_application_and_keeps_the_published_dataset(  # pylint: disable=line-too-long
    spark_cluster, sample_inputs, tmp_path):
  del spark_cluster
  out = tmp_path / 'dataset'
  first = run([sys.executable, '-m', 'pipelines.preprocess'] +
              preprocess_argv('image', sample_inputs, out))
  assert first.returncode == 0, first.stderr[-3000:]
  with open(out / 'manifest.json', 'rb') as f:
    manifest = f.read()
  files = snapshot(out)

  before = app_ids()
  stdout, stderr = tmp_path / 'stdout.txt', tmp_path / 'stderr.txt'
  with open(stdout, 'w', encoding='utf-8') as o, \
      open(stderr, 'w', encoding='utf-8') as e:
    # run_spark.sh execs Python, so this pid gets the signal.
    launch = subprocess.Popen(
        spark_argv('image', sample_inputs, out) + ['--overwrite'], cwd=ROOT,
        env=env(), stdout=o, stderr=e, stdin=subprocess.DEVNULL)
  try:
    # The job's application has run on the cluster for RUNNING_FOR
    # seconds: its executors are at work.
    apps = wait_until(lambda: launch.poll() is None and _active(before),
                      600, interval=0.5,
                      what="the run's Spark application to start")
    time.sleep(RUNNING_FOR)
    assert launch.poll() is None and _active(before), (
        stderr.read_text(encoding='utf-8')[-4000:])
    launch.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    code = launch.wait(timeout=300)
    exited_after = time.monotonic() - signalled_at
    left_at_exit = snapshot(out)
  finally:
    if launch.poll() is None:
      launch.kill()
      launch.wait()
  err = stderr.read_text(encoding='utf-8')
  assert code == 143, err[-6000:]
  result = summary(subprocess.CompletedProcess(
      [], code, stdout.read_text(encoding='utf-8'), err))
  assert result['status'] == 'cancelled', result
  assert result['exit_code'] == 143
  assert result['published'] is False

  # The application ended on the cluster too, not only its launcher, and
  # at once: left alone, the job would have run on for most of a minute.
  [app] = apps
  wait_until(lambda: not _active(before), 30,
             what='the Spark application to end within 30 s')
  ended_after = time.monotonic() - signalled_at
  master = get_json(f'{SPARK_MASTER_UI}/json/')
  [done] = [a for a in master['completedapps'] if a['id'] == app['id']]
  print(f'\nrun_spark.sh exited {exited_after:.1f} s after SIGTERM; '
        f'application {app["id"]} ended ({done["state"]}) '
        f'{ended_after:.1f} s after it, {done["duration"] / 1000:.1f} s '
        'after it started')

  # Nothing published: the earlier dataset is there, byte for byte, and
  # the cancelled run left no folder behind, neither when its launcher
  # exited nor once its application had ended.
  assert left_at_exit == files
  with open(out / 'manifest.json', 'rb') as f:
    assert f.read() == manifest
  assert snapshot(out) == files


# --- Processes lost while one job runs --------------------------------------

# The image sample of the lost-process test is larger than the shared one
# (big_images, conftest.py), so that its job runs long enough to be hit
# three times.
# Generous: a shared 2-core machine; the tests assert outcomes, not times.
JOB_TIMEOUT = 1200
# Beam's Spark job server is the driver of each job; it serves the running
# application's UI and REST API here (scripts/spark_cluster.sh).
SPARK_APP_UI = 'http://localhost:4040'
POOL_PORT = SPARK_WORKER_POOL.rsplit(':', 1)[1]
# In the run folder while the job runs: the transform function
# tf.Transform writes when its analysis is done (transforms/core/
# skeleton.py), and the shards Beam is writing (moved out when done).
TRANSFORM_FN = os.path.join('transform_fn', 'saved_model.pb')
TEMP_SHARDS = os.path.join('beam-temp-*.tfrecord-*', '*')
# An application's executors at its start: one per worker.
EXECUTORS = 2


@pytest.fixture(scope='module')
def big_direct(big_direct_output):
  """The DirectRunner's run of the larger sample: (its facts, its
  layout)."""
  return (dataset_facts(big_direct_output),
          layout(big_direct_output))


def layout(out):
  """What a published output holds besides its records: every file but
  the shards its manifest names, the run folder named RUN; and whether
  each of those shards is there."""
  with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  shards = {shard['file'] for split in manifest['splits'].values()
            for shard in split['shards']}
  files = set(snapshot(out))
  run_folder = re.escape(manifest['data_dir'] + os.sep)
  return (sorted(re.sub(f'^{run_folder}', 'RUN/', path)
                 for path in files - shards), shards <= files)


def spark_pool():
  """The pid of the Spark cluster's SDK worker pool (the Flink cluster
  may run one too), which must end the executor of a worker that is
  killed: Beam's executor keeps the lost worker's environment for the
  rest of the job (--environment_cache_millis) and fails every task on
  it, which Spark retries there until the job fails."""
  def sparks_pool(cmd, _):
    return (cmd.split()[1:3] == ['-m', 'pipelines.worker_pool'] and
            f'--service_port {POOL_PORT}' in cmd)
  pools = pids_where(sparks_pool)
  assert len(pools) == 1, pools
  assert '--end_task_manager_of_lost_workers' in cmdline(pools[0]), (
      'the Spark worker pool runs without --end_task_manager_of_lost_workers'
      ' (started by an older scripts/spark_cluster.sh?): restart the '
      'cluster with scripts/spark_cluster.sh stop, then start')
  return pools[0]


class Application:
  """The job's Spark application while it runs: its REST API, and its
  executor JVMs and their SDK workers on this machine."""

  def __init__(self, app_id, pool):
    self.id = app_id
    self._pool = pool
    self._api = f'{SPARK_APP_UI}/api/v1/applications/{app_id}'

  def api(self, path=''):
    """The REST API's answer, or None while it does not answer."""
    try:
      return get_json(self._api + path)
    except (OSError, ValueError):
      return None

  def executor_pids(self):
    """{executor id: pid} of its live executor JVMs."""
    found = {}
    for pid in pids_where(
        lambda cmd, _: ('CoarseGrainedExecutorBackend' in cmd and
                        f' --app-id {self.id} ' in cmd)):
      match = re.search(r' --executor-id (\S+) ', cmdline(pid))
      if match:
        found[match.group(1)] = pid
    return found

  def busy_executors(self):
    """The ids of its executors that run a task now."""
    return sorted(e['id'] for e in self.api('/executors') or []
                  if e['id'] != 'driver' and e['isActive'] and
                  e['activeTasks'])

  def active_stages(self):
    return sorted(s['stageId']
                  for s in self.api('/stages?status=active') or [])

  def sdk_workers(self):
    """{pid: executor id} of the SDK workers serving its executors: the
    pool's children, each connected to the control endpoint of its
    executor (the address in its command line)."""
    executors = {pid: e for e, pid in self.executor_pids().items()}
    return {pid: executors[owner]
            for pid, owner in sdk_workers(self._pool, executors).items()}

  def removed(self, executor, failed=0):
    """The driver's entry of an executor it lost, once it has counted at
    least `failed` failed tasks on it; else None."""
    for e in self.api('/allexecutors') or []:
      if (e['id'] == executor and not e['isActive'] and
          e['failedTasks'] >= failed):
        return e
    return None


def images_decoded(workers):
  """(images decoded, images listed) so far by the SDK workers `workers`
  (pids): each writes its progress counts into the launcher's progress
  folder, named by its pid (transforms/runtime/progress.py)."""
  counts = collections.Counter()
  for path in glob.glob(os.path.join(tempfile.gettempdir(),
                                     'tfrecord-progress-*', '*.json')):
    pid = os.path.basename(path)[:-len('.json')].rsplit('-', 1)[-1]
    if not pid.isdigit() or int(pid) not in workers:
      continue
    try:
      with open(path, encoding='utf-8') as f:
        counts.update(json.load(f))
    except (OSError, ValueError):
      continue  # being replaced
  return (counts[progress.key('image', 'processed')],
          counts[progress.key('image', 'listed')])


def writing_workers(workers, out):
  """The ones of `workers` (pids) that have a shard open now."""
  folders = tuple(os.path.dirname(p) + os.sep
                  for p in glob.glob(os.path.join(out, 'run-*',
                                                  TEMP_SHARDS)))
  if not folders:
    return []
  return [pid for pid in workers
          if any(target.startswith(folders) for target in open_targets(pid))]


def executors_per_worker(app_id):
  """{worker id: the ids of the executors it ran for the application}."""
  found = {}
  for worker in get_json(f'{SPARK_MASTER_UI}/json/')['workers']:
    state = get_json(f'{worker["webuiaddress"]}/json/')
    found[worker['id']] = sorted(
        e['id'] for e in state['executors'] + state['finishedexecutors']
        if e['appid'] == app_id)
  return found


# The parts of the job in which a process is killed, in this order. A part
# the job passed before the test saw it (a loaded machine looks seconds
# apart) is disturbed in another job, up to MAX_JOBS jobs in all.
PARTS = ('reading', 'analysis', 'writing')
MAX_JOBS = 3


def test_executors_and_an_sdk_worker_lost_mid_job_publish_the_same_dataset(
    spark_cluster, big_images, big_direct, tmp_path):
  del spark_cluster
  pool = spark_pool()
  parts, kills = list(PARTS), []
  for attempt in range(1, MAX_JOBS + 1):
    killed, parts = _job_with_kills(pool, big_images, big_direct,
                                    tmp_path / f'job-{attempt}', parts)
    kills += killed
    if not parts:
      break
    print(f'\njob {attempt} passed {parts} before a kill; running another')
  assert not parts, f'no kill while {parts} in {MAX_JOBS} jobs: {kills}'
  assert len(kills) == len(PARTS), kills


def _job_with_kills(pool, big_images, big_direct, folder, parts):
  """Runs the image job alone on the cluster and kills a process in each
  of `parts` (PARTS) while the job is in it; asserts the job recovered and
  published the DirectRunner's dataset once. Returns (what was killed,
  the parts the job passed before a kill)."""
  # Our job alone on a whole cluster: what is killed is ours.
  wait_until(lambda: not get_json(f'{SPARK_MASTER_UI}/json/')['activeapps'],
             900, interval=3, what='the other applications to end')
  workers = get_json(f'{SPARK_MASTER_UI}/json/')['workers']
  assert [w['state'] for w in workers] == ['ALIVE'] * EXECUTORS

  before = app_ids()
  folder.mkdir()
  out = folder / 'dataset'
  stdout, stderr = folder / 'stdout.txt', folder / 'stderr.txt'
  with open(stdout, 'w', encoding='utf-8') as o, \
      open(stderr, 'w', encoding='utf-8') as e:
    launch = subprocess.Popen(
        spark_argv('image', big_images, out), cwd=ROOT, env=env(),
        stdout=o, stderr=e, stdin=subprocess.DEVNULL)

  def running():
    assert launch.poll() is None, (
        'run_spark.sh ended while a lost executor was awaited:\n' +
        stderr.read_text(encoding='utf-8')[-6000:])

  kills, missed = [], []
  try:
    [started] = wait_until(lambda: running() or _active(before), 600,
                           interval=0.5, what="the job's application")
    app = Application(started['id'], pool)
    started_at = time.monotonic()
    assert wait_until(app.api, 120, what=f'the REST API of {app.id} on '
                      f'{SPARK_APP_UI}')['id'] == app.id
    settings = dict(wait_until(lambda: app.api('/environment'), 120)
                    ['sparkProperties'])
    assert 'spark.task.maxFailures' in settings, (
        'the job server runs without spark.task.maxFailures (started by an '
        'older scripts/spark_cluster.sh?): restart the cluster')

    def killed(victim, pid, when, failed=0):
      """Kills pid (an executor, or the SDK worker of executor `victim`)
      and waits until the driver has lost that executor, with `failed`
      failed tasks on it at least."""
      stages = app.active_stages()
      os.kill(pid, signal.SIGKILL)
      at = time.monotonic() - started_at
      lost = wait_until(
          lambda: running() or app.removed(victim, failed), 120,
          what=f'the driver to lose executor {victim} ({failed} failed '
          'tasks at least)')
      kills.append(f'{when} at {at:.1f} s (stages {stages}): executor '
                   f'{victim} lost ("{lost["removeReason"]}", '
                   f'{lost["failedTasks"]} failed tasks)')

    def transform_fn_written():
      return glob.glob(os.path.join(out, 'run-*', TRANSFORM_FN))

    # Each look returns what to kill, 'passed' once the job is past the
    # part, or nothing yet.
    # (1) An executor while the images are read: some decoded, not all.
    def reading():
      decoded, listed = images_decoded(app.sdk_workers())
      if launch.poll() is not None or 0 < listed <= decoded:
        return 'passed'
      busy = app.busy_executors()
      return 0 < decoded < listed and busy and (busy[0], decoded, listed)

    # (2) An SDK worker in tf.Transform's analysis: TensorFlow is loaded
    # in it (no step of the job before the analysis loads it), and the
    # transform function is not in the run folder yet. (Building the
    # graph alone can take less than the time between two looks.)
    def analysis():
      if launch.poll() is not None or transform_fn_written():
        return 'passed'
      workers = app.sdk_workers()
      busy = app.busy_executors()
      return [(pid, workers[pid]) for pid in sorted(workers)
              if workers[pid] in busy and tensorflow_loaded(pid)]

    # (3) An executor while the shards are written: one whose SDK worker
    # has a shard open if one does, else one with a task running.
    def writing():
      if launch.poll() is not None:
        return 'passed'
      shards = glob.glob(os.path.join(out, 'run-*', TEMP_SHARDS))
      busy = shards and app.busy_executors()
      if not busy:
        return None
      workers = app.sdk_workers()
      writers = [workers[pid] for pid in writing_workers(workers, out)]
      return [e for e in writers if e in busy] or busy, len(shards)

    looks = {'reading': (reading, 0.2, 'the images to be read'),
             'analysis': (analysis, 0.2,
                          "an SDK worker in tf.Transform's analysis"),
             'writing': (writing, 0.05, 'the shards to be written')}
    for part in parts:
      look, interval, what = looks[part]
      found = wait_until(look, 600, interval=interval, what=what)
      if found == 'passed':
        missed.append(part)
      elif part == 'reading':
        victim, decoded, listed = found
        killed(victim, app.executor_pids()[victim],
               f'executor {victim} while reading ({decoded} of {listed} '
               'images decoded)')
      elif part == 'analysis':
        [(worker, victim), *_] = found
        # The task that used it fails, and the pool ends the executor it
        # served (see spark_pool).
        killed(victim, worker, f'the SDK worker (pid {worker}) of executor '
               f"{victim} in tf.Transform's analysis", failed=1)
      else:
        busy, shards = found
        killed(busy[0], app.executor_pids()[busy[0]],
               f'executor {busy[0]} while writing ({shards} shard files '
               'begun)')
    code = launch.wait(timeout=JOB_TIMEOUT)
  finally:
    if launch.poll() is None:
      launch.kill()
      launch.wait()
  err = stderr.read_text(encoding='utf-8')
  assert code == 0, err[-6000:]
  result = summary(subprocess.CompletedProcess(
      [], code, stdout.read_text(encoding='utf-8'), err))
  assert result['status'] == 'published', result

  # The application ran to the end, and each lost executor's worker
  # started a new one: the ones it began with, and one per loss.
  apps = new_finished_apps(before)
  assert [a['state'] for a in apps] == ['FINISHED'], apps
  executors = EXECUTORS + len(kills)
  per_worker = wait_until(
      lambda: (lambda found: sum(map(len, found.values())) >= executors and
               found)(executors_per_worker(app.id)),
      60, what='the workers to list the executors of the application')
  print(f'\nkilled {"; ".join(kills)}. The application finished '
        f'{apps[0]["duration"] / 1000:.1f} s after it started, on '
        f'executors {per_worker}')
  assert sorted(sum(per_worker.values(), [])) == list(range(executors))

  # The DirectRunner's dataset, published once: one run folder, the one
  # the manifest names, with the shards it names and nothing else a run
  # leaves while it runs (beam-temp-*, tft_tmp, hold files, ...).
  facts, direct_layout = big_direct
  assert_same_dataset(dataset_facts(out), facts)
  assert layout(out) == direct_layout
  return kills, missed
