"""Faults during a job on a real Flink cluster, through run_flink.sh.

The cluster is scripts/flink_cluster.sh's (see test_flink.py). While the
image job runs, each test does one thing that happens to real clusters:

  - a TaskManager JVM is killed (SIGKILL, as the OOM killer or a lost
    machine does) while the job reads its inputs, again during
    tf.Transform's analysis, and again while it writes the shards (one job,
    three kills, each when the REST API shows that part's subtasks on the
    TaskManager): Flink restarts the failed regions, the TaskManagers'
    supervisors start new ones, and the job finishes;
  - one SDK worker process (a child of the worker pool) is killed: the
    tasks using it fail and are restarted, and the job finishes;
  - the launcher gets SIGTERM (a scheduler's timeout): the Flink job is
    cancelled, the run ends "cancelled" with exit code 143, and the dataset
    published before at the same output is left as it was.

After a fault the published dataset must be the DirectRunner's, record
for record (fingerprints, counts, dead letters) with one publish: nothing
lost or written twice by the restarted tasks.

The image sample here is larger than the shared one (conftest.py), so
the job runs long enough to be disturbed while it runs. The cluster is
shared with other test sessions: a test disturbs it only while its own job
is the only one running, and ends with both TaskManagers back.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from engines_lib import FLINK_JOB_ENDPOINT
from engines_lib import FLINK_REST
from engines_lib import FLINK_SCRIPT
from engines_lib import FLINK_TASKMANAGERS
from engines_lib import FLINK_WORKER_POOL
from engines_lib import assert_same_dataset
from engines_lib import dataset_facts
from engines_lib import env
from engines_lib import flink_active_jobs
from engines_lib import flink_jobs
from engines_lib import flink_taskmanager_ids
from engines_lib import flink_taskmanager_pid
from engines_lib import get_json
from engines_lib import pids_where
from engines_lib import preprocess_argv
from engines_lib import run
from engines_lib import snapshot
from engines_lib import wait_until
from repo import ROOT

RUN_FLINK = os.path.join(ROOT, 'run_flink.sh')
# Generous: a shared 2-core machine; the tests assert outcomes, not times.
JOB_TIMEOUT = 1200
# Another session's job (test_flink.py) may hold the cluster for minutes.
IDLE_TIMEOUT = 900
WORKER_POOL_PORT = FLINK_WORKER_POOL.rsplit(':', 1)[1]


@pytest.fixture(scope='module')
def big_direct(big_direct_output):
  """The facts of the DirectRunner's run of the larger sample."""
  return dataset_facts(big_direct_output)


@pytest.fixture
def whole_cluster(flink_cluster):
  """Waits until no other job runs on the cluster and both TaskManagers
  are there; afterwards, asserts both are there again (replaced by their
  supervisors if a test killed one)."""
  del flink_cluster
  wait_until(lambda: not flink_active_jobs(), IDLE_TIMEOUT,
             interval=3, what='the other jobs on the cluster to end')
  wait_for_taskmanagers()
  yield
  wait_for_taskmanagers()


def wait_for_taskmanagers():
  """Asserts (waiting up to 3 minutes) that FLINK_TASKMANAGERS are
  registered, each a live JVM on this machine; returns their ids."""
  def registered_and_alive():
    # A killed TaskManager stays listed until Flink notices it is gone.
    ids = flink_taskmanager_ids()
    alive = len(ids) == FLINK_TASKMANAGERS and all(
        flink_taskmanager_pid(i) for i in ids)
    return ids if alive else None
  return wait_until(registered_and_alive, 180,
                    what=f'{FLINK_TASKMANAGERS} live TaskManagers')


def flink_argv(inputs, output, job_name, *extra):
  """run_flink.sh's command line; the Flink job is named job_name, which
  is how the test tells its job from other sessions' on the cluster."""
  return ([RUN_FLINK] + preprocess_argv('image', inputs, output) +
          ['--job_endpoint', FLINK_JOB_ENDPOINT, '--environment', 'EXTERNAL',
           '--environment_config', FLINK_WORKER_POOL, '--parallelism', '2',
           '--job_name', job_name] + list(extra))


def job_name(what):
  return f'tfrp-faults-{what}-{os.getpid()}-{int(time.time())}'


class Launch:
  """run_flink.sh started in the background, its output in files (a pipe
  could fill up and stall it while the test waits)."""

  def __init__(self, argv, folder):
    self.stdout_path = os.path.join(folder, 'stdout.txt')
    self.stderr_path = os.path.join(folder, 'stderr.txt')
    with open(self.stdout_path, 'w', encoding='utf-8') as out, \
        open(self.stderr_path, 'w', encoding='utf-8') as err:
      # run_flink.sh execs Python, so this pid gets the signals.
      self.proc = subprocess.Popen(argv, cwd=ROOT, env=env(), stdout=out,
                                   stderr=err, stdin=subprocess.DEVNULL)

  def wait(self, timeout=JOB_TIMEOUT):
    try:
      return self.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      self.proc.kill()
      raise

  def stdout(self):
    with open(self.stdout_path, encoding='utf-8') as f:
      return f.read()

  def stderr(self):
    with open(self.stderr_path, encoding='utf-8') as f:
      return f.read()

  def summary(self):
    lines = self.stdout().strip().splitlines()
    assert lines, self.stderr()[-4000:]
    return json.loads(lines[-1])

  def stop(self):
    if self.proc.poll() is None:
      self.proc.kill()
      self.proc.wait()


def wait_for_our_job(name, launch):
  """The jid of the job the launch submitted (Flink job `name`), once it is
  RUNNING with running subtasks and no other job is active on the cluster,
  so that the fault we cause disturbs nobody else's job."""
  def alone():
    assert launch.proc.poll() is None, (
        'run_flink.sh ended before its job ran alone on the cluster:\n' +
        launch.stderr()[-4000:])
    jobs = flink_jobs()
    ours = [jid for jid, j in jobs.items() if j['name'] == name]
    if not ours:
      return None
    job = jobs[ours[0]]
    assert job['state'] not in ('FINISHED', 'FAILED', 'CANCELED'), (
        f'our job ended ({job["state"]}) while another job ran on the '
        'cluster; it could not be disturbed alone')
    if job['state'] != 'RUNNING' or not job['tasks']['running']:
      return None
    return ours[0] if flink_active_jobs() == {ours[0]} else None
  return wait_until(alone, 600, interval=0.5,
                    what=f'our job {name} to run alone on the cluster')


def running_subtasks_by_taskmanager(jid):
  """{TaskManager id: number of the job's subtasks RUNNING on it}."""
  job = get_json(f'{FLINK_REST}/jobs/{jid}')
  counts = {}
  for vertex in job['vertices']:
    if vertex['status'] != 'RUNNING':
      continue
    placed = get_json(f'{FLINK_REST}/jobs/{jid}/vertices/{vertex["id"]}/'
                      'taskmanagers')
    for tm in placed['taskmanagers']:
      if tm['status'] == 'RUNNING':
        counts[tm['taskmanager-id']] = counts.get(tm['taskmanager-id'], 0) + 1
  return counts


def job_exceptions(jid):
  """The failures Flink recorded for the job (its exception history)."""
  history = get_json(f'{FLINK_REST}/jobs/{jid}/exceptions')
  return history.get('exceptionHistory', {}).get('entries', [])


def finished_job(launch, jid):
  """Waits for the launch; asserts it published and the job FINISHED."""
  code = launch.wait()
  assert code == 0, launch.stderr()[-6000:]
  result = launch.summary()
  assert result['status'] == 'published', result
  job = flink_jobs()[jid]
  assert job['state'] == 'FINISHED', job
  return job


# The parts of one job in which a TaskManager is killed, in this order:
# (what, a pattern of the names of the Flink vertices that do that part).
# The image job's vertices are fused stages named after the Beam transforms
# in them. A part spans several vertices, some only a second long: any of
# them counts. (Writing also has steps at the job's start; by the time the
# analysis has been hit, only the writing itself is left.)
TASKMANAGER_KILLS = (
    ('reading the inputs', re.compile(r'PreprocessDataset/\{ReadInputs, ')),
    ("tf.Transform's analysis", re.compile(
        r'\{ApplySavedModel\[Phase0\]|InitialPackedCombineGlobally'
        r'|MergePackedCombinesGlobally|\{AnalyzeTrainSplit, WriteTransformFn')),
    ('writing the shards', re.compile(r'WriteSplits')),
)


# A subtask in these states has its TaskManager: killing that fails it.
_PLACED = ('DEPLOYING', 'INITIALIZING', 'RUNNING')


def running_vertex_taskmanagers(jid, pattern):
  """{TaskManager id} to which a subtask of a vertex of the job whose name
  matches `pattern` is deployed, or on which one runs. (A part of a small
  job may run for less than a second: a subtask being deployed counts.)"""
  job = get_json(f'{FLINK_REST}/jobs/{jid}')
  found = set()
  for vertex in job['vertices']:
    if (not pattern.search(vertex['name']) or
        not any(vertex['tasks'].get(state) for state in _PLACED)):
      continue
    placed = get_json(f'{FLINK_REST}/jobs/{jid}/vertices/{vertex["id"]}/'
                      'taskmanagers')
    found |= {tm['taskmanager-id'] for tm in placed['taskmanagers']
              if any(tm['status-counts'].get(state) for state in _PLACED)}
  return found


def test_taskmanagers_killed_while_reading_analysing_and_writing(
    whole_cluster, big_images, big_direct, tmp_path):
  """One job, a TaskManager killed in each of its parts: Flink restarts
  the regions it lost (tf.Transform's analysis among them), the
  supervisors start new TaskManagers, and the job publishes the
  DirectRunner's dataset."""
  before_tms = flink_taskmanager_ids()
  name = job_name('taskmanagers')
  out = tmp_path / 'dataset'
  launch = Launch(flink_argv(big_images, out, name), str(tmp_path))
  kills = []
  try:
    jid = wait_for_our_job(name, launch)
    started = time.monotonic()
    for what, pattern in TASKMANAGER_KILLS:
      def busy():
        assert launch.proc.poll() is None, (
            f'the job ended before a TaskManager was killed while {what} '
            f'(killed before: {kills}):\n' + launch.stderr()[-4000:])
        # (Flink lists a killed TaskManager's subtasks as running until it
        # notices the loss: only live JVMs count.)
        return {tm: pid for tm in running_vertex_taskmanagers(jid, pattern)
                for pid in [flink_taskmanager_pid(tm)] if pid}
      # No waiting for the replacements in between: the parts overlap
      # (records are written while the analysis runs).
      busy_tms = wait_until(busy, 600, interval=0.1,
                            what=f'our job {what} on a TaskManager')
      # Spread the kills: a TaskManager not killed before, when one is busy
      # (a supervisor gives up on a TaskManager killed more than 5 times in
      # 10 minutes, as on a crash loop: see scripts/flink_cluster.sh).
      killed = {k[1] for k in kills}
      victim = sorted(busy_tms, key=lambda tm: (tm in killed, tm))[0]
      assert not flink_active_jobs() - {jid}
      os.kill(busy_tms[victim], signal.SIGKILL)
      kills.append((what, victim, time.monotonic() - started))
    job = finished_job(launch, jid)
  finally:
    launch.stop()
  print('\n' + '; '.join(f'killed {tm} while {what} at {at:.1f} s'
                         for what, tm, at in kills) +
        f'; the job took {job["duration"] / 1000:.1f} s in all, '
        f'{len(job_exceptions(jid))} failures in its exception history')

  # Flink saw each failure and restarted what it lost; the supervisors
  # replaced each killed TaskManager.
  assert len(job_exceptions(jid)) >= len(TASKMANAGER_KILLS)
  after = wait_for_taskmanagers()
  killed = {tm for _, tm, _ in kills}
  assert not set(after) & killed
  assert set(before_tms) - killed <= set(after)
  status = run([FLINK_SCRIPT, 'status'], timeout=120)
  assert status.returncode == 0, status.stderr[-3000:]
  restarts = [int(n) for n in re.findall(r'restarted (\d+) time\(s\)',
                                         status.stderr)]
  assert sum(restarts) >= len(TASKMANAGER_KILLS), status.stderr
  assert_same_dataset(dataset_facts(out), big_direct)


def test_a_killed_sdk_worker_is_replaced_and_the_job_recovers(
    whole_cluster, big_images, big_direct, tmp_path):
  def flinks_pool(cmd, _):
    # The Flink cluster's pool (a Spark cluster may run one too).
    return (cmd.split()[1:3] == ['-m', 'pipelines.worker_pool'] and
            f'--service_port {WORKER_POOL_PORT}' in cmd)
  pools = pids_where(flinks_pool)
  assert len(pools) == 1, pools
  before_workers = set(pids_where(lambda _, ppid: ppid == pools[0]))
  before_tms = flink_taskmanager_ids()
  name = job_name('sdk-worker')
  out = tmp_path / 'dataset'
  launch = Launch(flink_argv(big_images, out, name), str(tmp_path))
  try:
    jid = wait_for_our_job(name, launch)
    # A worker started for our job (older ones may still be exiting).
    workers = wait_until(
        lambda: sorted(set(pids_where(
            lambda cmd, ppid: ppid == pools[0] and 'SdkHarness' in cmd)) -
                       before_workers),
        300, interval=0.5, what='an SDK worker for our job')
    # Kill it in the middle of its work: a worker connects to its
    # TaskManager within its first CPU second (importing Beam), then spends
    # the next seconds in its first bundle (importing TensorFlow for our
    # DoFns, then processing); Flink starts new workers for each task, so
    # one lives 6-9 s. 2 CPU seconds is inside that bundle.
    wait_until(lambda: running_subtasks_by_taskmanager(jid), 300,
               interval=0.5, what='a subtask of our job to run')
    busy = wait_until(
        lambda: [p for p in workers if cpu_seconds(p) >= WORKING_CPU_SECONDS],
        300, interval=0.2, what='an SDK worker in the middle of its work')
    assert not flink_active_jobs() - {jid}
    workers = busy
    os.kill(workers[0], signal.SIGKILL)
    killed_at = time.monotonic()
    job = finished_job(launch, jid)
  finally:
    launch.stop()
  print(f'\nkilled SDK worker pid {workers[0]} (one of {len(workers)}); '
        f'the job finished {time.monotonic() - killed_at:.1f} s after the '
        f'kill ({job["duration"] / 1000:.1f} s in all); '
        f'{len(job_exceptions(jid))} failures in its exception history')

  assert job_exceptions(jid)
  assert_same_dataset(dataset_facts(out), big_direct)
  # The worker pool lives on. Either the TaskManager failed the task by
  # itself, or it waited for the lost worker (as Beam's Flink runner can
  # for ever) and the pool ended it: then a new one took its place. Both
  # ways two live TaskManagers serve the cluster again.
  assert pids_where(flinks_pool) == pools
  after = wait_for_taskmanagers()
  print(f'TaskManagers replaced: {len(set(after) - set(before_tms))}')


WORKING_CPU_SECONDS = 2.0


def cpu_seconds(pid):
  """CPU seconds (user + system) process pid has used; 0 once it is
  gone."""
  try:
    with open(f'/proc/{pid}/stat', 'rb') as f:
      stat = f.read()
  except OSError:
    return 0.0
  fields = stat[stat.rindex(b')') + 2:].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def test_sigterm_cancels_the_flink_job_and_keeps_the_published_dataset(
    whole_cluster, sample_inputs, big_images, tmp_path):
  # A dataset published before (by the DirectRunner: quicker, and the same
  # files as on Flink) at the output the cancelled run overwrites.
  out = tmp_path / 'dataset'
  first = run([sys.executable, '-m', 'pipelines.preprocess'] +
              preprocess_argv('image', sample_inputs, out),
              timeout=JOB_TIMEOUT)
  assert first.returncode == 0, first.stderr[-3000:]
  with open(out / 'manifest.json', 'rb') as f:
    manifest = f.read()
  files = snapshot(out)

  before_tms = flink_taskmanager_ids()
  name = job_name('sigterm')
  launch = Launch(flink_argv(big_images, out, name, '--overwrite'),
                  str(tmp_path))
  try:
    jid = wait_for_our_job(name, launch)
    launch.proc.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    code = launch.wait(timeout=300)
    exited_after = time.monotonic() - signalled_at
  finally:
    launch.stop()
  assert code == 143, launch.stderr()[-6000:]
  result = launch.summary()
  assert result['status'] == 'cancelled', result
  assert result['exit_code'] == 143
  assert result['published'] is False

  # The job stopped on the cluster too, not only its launcher.
  state = wait_until(
      lambda: (lambda s: s if s in ('CANCELED', 'FINISHED', 'FAILED')
               else None)(flink_jobs()[jid]['state']),
      120, what='the Flink job to end')
  print(f'\nrun_flink.sh exited {exited_after:.1f} s after SIGTERM; the '
        f'Flink job was {state} {time.monotonic() - signalled_at:.1f} s '
        'after it')
  assert state == 'CANCELED'

  # Nothing published: the earlier dataset is there, byte for byte, and
  # the cancelled run left no folder behind.
  with open(out / 'manifest.json', 'rb') as f:
    assert f.read() == manifest
  assert snapshot(out) == files
  assert flink_taskmanager_ids() == before_tms
