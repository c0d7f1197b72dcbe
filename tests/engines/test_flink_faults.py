"""Faults during a job on a real Flink cluster, through run_flink.sh.

The cluster is scripts/flink_cluster.sh's (see test_flink.py). While the
image job runs, each test does one thing that happens to real clusters:

  - a TaskManager JVM is killed (SIGKILL, as the OOM killer or a lost
    machine does) while the job reads its inputs, again during
    tf.Transform's analysis, and again while it writes the shards (one job,
    three kills, each when the REST API shows that part's subtasks on the
    TaskManager; a part that a loaded machine missed between two looks is
    disturbed in another job): Flink restarts the failed regions, the
    TaskManagers' supervisors start new ones, and the job finishes;
  - the same three moments, but the SDK worker process (a child of the
    worker pool) serving a busy TaskManager is killed instead: the pool
    ends that TaskManager, and the job recovers as from a lost one;
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

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
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
from engines_lib import sdk_workers
from engines_lib import snapshot
from engines_lib import tensorflow_loaded
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


# The parts of a job in which a TaskManager is killed, in this order:
# (what, a pattern of the names of the Flink vertices that do that part).
# The image job's vertices are fused stages named after the Beam transforms
# in them. A part spans several vertices, some under a second long: any of
# them counts. (WriteSplits also has steps at the job's start; the writing
# pattern names only those that build, write and move the shards.)
TASKMANAGER_KILLS = (
    ('reading the inputs', re.compile(r'PreprocessDataset/\{ReadInputs, ')),
    ("tf.Transform's analysis", re.compile(
        r'\{ApplySavedModel\[Phase0\]|InitialPackedCombineGlobally'
        r'|MergePackedCombinesGlobally|\{AnalyzeTrainSplit, WriteTransformFn')),
    ('writing the shards', re.compile(
        r'\{BuildRecords, WriteSplits\}|WriteSplits/WriteSplit\[\w+\]/'
        r'WriteRecordLists/WriteImpl/(\{WriteBundles|Extract|PreFinalize'
        r'|FinalizeWrite)')),
)
# The analysis of the image job lasts about 3 s, and a loaded machine can
# miss it between two looks; a part the job passed unhit is disturbed in
# another job, up to this many jobs in all.
MAX_JOBS = 3


# A subtask in these states has its TaskManager: killing that fails it.
_PLACED = ('DEPLOYING', 'INITIALIZING', 'RUNNING')


def vertices_of_part(jid, pattern):
  """(TaskManager ids to which a subtask of a vertex of the job whose name
  matches `pattern` is deployed or on which one runs, whether all those
  vertices have finished). A part of a small job may run for less than a
  second: a subtask being deployed counts."""
  job = get_json(f'{FLINK_REST}/jobs/{jid}')
  found = set()
  matching = [v for v in job['vertices'] if pattern.search(v['name'])]
  for vertex in matching:
    if not any(vertex['tasks'].get(state) for state in _PLACED):
      continue
    placed = get_json(f'{FLINK_REST}/jobs/{jid}/vertices/{vertex["id"]}/'
                      'taskmanagers')
    found |= {tm['taskmanager-id'] for tm in placed['taskmanagers']
              if any(tm['status-counts'].get(state) for state in _PLACED)}
  passed = bool(matching) and all(v['status'] == 'FINISHED'
                                  for v in matching)
  return found, passed


def kill_in_parts(launch, jid, victim, parts):
  """While the job `jid` runs, SIGKILLs one process in each of `parts`
  (of TASKMANAGER_KILLS), once a subtask of that part is placed on a
  TaskManager: victim(TaskManager id) is the pid to kill for that
  TaskManager (its JVM, or the SDK worker serving it), or None when there
  is none yet. Returns (kills, missed): [(part, TaskManager id, pid,
  seconds into the job, supervisor place)], and the parts the job passed
  (or ended) before one of them could be hit."""
  kills, missed = [], []
  # The JVMs of the TaskManagers hit so far: one whose SDK worker was
  # killed lives on for a moment until the pool ends it, and is not hit
  # again (one loss, one restart).
  doomed = set()
  started = time.monotonic()
  for what, pattern in parts:
    def busy():
      if launch.proc.poll() is not None:
        return 'ended'
      tms, passed = vertices_of_part(jid, pattern)
      # (Flink lists a killed TaskManager's subtasks as running until it
      # notices the loss: only live processes count.)
      live = {tm: pid for tm in tms
              if flink_taskmanager_pid(tm) not in doomed
              for pid in [victim(tm)] if pid}
      return live or (passed and 'passed')
    # No waiting for the replacements in between: the parts overlap
    # (records are written while the analysis runs).
    busy_tms = wait_until(busy, 600, interval=0.1,
                          what=f'our job {what} on a TaskManager')
    if busy_tms in ('ended', 'passed'):
      missed.append((what, pattern))
      continue
    # Spread the kills over the supervisors' places when both are busy: a
    # replaced TaskManager has a new id, so the place is what counts.
    hits = collections.Counter(place for _, _, _, _, place in kills)
    places = {tm: supervisor_place(tm) for tm in busy_tms}
    tm = min(busy_tms, key=lambda t: (hits[places[t]], t))
    assert not flink_active_jobs() - {jid}
    doomed.add(flink_taskmanager_pid(tm))
    os.kill(busy_tms[tm], signal.SIGKILL)
    kills.append((what, tm, busy_tms[tm], time.monotonic() - started,
                  places[tm]))
  return kills, missed


def disturb_each_part(short, what, victim_of, inputs, direct, folder):
  """Runs the image job on the cluster (named after `short`) and kills
  `what` in each of its parts (kill_in_parts; victim_of() gives the
  victim function for a job); a part a job passed unhit is disturbed in
  another job (up to MAX_JOBS). Asserts of every job that it recovered
  and published the DirectRunner's dataset; returns every job's kills."""
  parts, all_kills = list(TASKMANAGER_KILLS), []
  for attempt in range(1, MAX_JOBS + 1):
    before_tms = flink_taskmanager_ids()
    restarts_before = taskmanager_restarts()
    name = job_name(f'{short}-{attempt}')
    out = os.path.join(folder, f'dataset-{attempt}')
    launch = Launch(flink_argv(inputs, out, name), folder)
    try:
      jid = wait_for_our_job(name, launch)
      kills, parts = kill_in_parts(launch, jid, victim_of(), parts)
      job = finished_job(launch, jid)
    finally:
      launch.stop()
    assert_recovered(jid, job, kills, before_tms, restarts_before, what)
    assert_same_dataset(dataset_facts(out), direct)
    all_kills += kills
    if not parts:
      return all_kills
    print(f'\njob {attempt} passed {[p for p, _ in parts]} before a kill; '
          'running another')
  raise AssertionError(f'no {what} was killed while {[p for p, _ in parts]}'
                       f' in {MAX_JOBS} jobs: {all_kills}')


def supervisor_place(tm):
  """The number of the supervisor (scripts/flink_cluster.sh) whose
  TaskManager JVM (its child) has the Flink id `tm`, or `tm` itself when
  that is not known."""
  pid = flink_taskmanager_pid(tm)
  try:
    parent = pid and psutil.Process(pid).parent()
    match = parent and re.search(r'supervise-taskmanager (\d+)',
                                 ' '.join(parent.cmdline()))
  except psutil.Error:
    return tm
  return int(match.group(1)) if match else tm


def taskmanager_restarts():
  """How many times the supervisors have restarted a TaskManager since
  the cluster started (scripts/flink_cluster.sh status)."""
  status = run([FLINK_SCRIPT, 'status'], timeout=120)
  assert status.returncode == 0, status.stderr[-3000:]
  return sum(int(n) for n in re.findall(r'restarted (\d+) time\(s\)',
                                        status.stderr))


def assert_recovered(jid, job, kills, before_tms, restarts_before,
                     what_dies):
  """Flink saw each failure and restarted what it lost; the supervisors
  replaced each TaskManager that was killed or ended (and none was
  stopped for good)."""
  print(f'\nkilled {what_dies} ' +
        '; '.join(f'{pid} of {tm} while {what} at {at:.1f} s'
                  for what, tm, pid, at, _ in kills) +
        f'; the job took {job["duration"] / 1000:.1f} s in all, '
        f'{len(job_exceptions(jid))} failures in its exception history')
  assert len(job_exceptions(jid)) >= len(kills)
  after = wait_for_taskmanagers()
  hit = {tm for _, tm, _, _, _ in kills}
  assert not set(after) & hit
  assert set(before_tms) - hit <= set(after)
  assert taskmanager_restarts() - restarts_before >= len(kills)


def test_taskmanagers_killed_while_reading_analysing_and_writing(
    whole_cluster, big_images, big_direct, tmp_path):
  """One job, a TaskManager killed in each of its parts: Flink restarts
  the regions it lost (tf.Transform's analysis among them), the
  supervisors start new TaskManagers, and the job publishes the
  DirectRunner's dataset."""
  kills = disturb_each_part('taskmanagers', 'a TaskManager',
                            lambda: flink_taskmanager_pid,
                            big_images, big_direct, str(tmp_path))
  assert len(kills) == len(TASKMANAGER_KILLS)


def flinks_pool(cmd, _):
  """Whether a process is the Flink cluster's SDK worker pool (a Spark
  cluster may run one too)."""
  return (cmd.split()[1:3] == ['-m', 'pipelines.worker_pool'] and
          f'--service_port {WORKER_POOL_PORT}' in cmd)


def working_sdk_worker_of(pool):
  """victim(TaskManager id): the pid of the SDK worker (a child of the
  pool) that serves that TaskManager and works on our DoFns, or None. A
  new worker imports Beam and connects, then loads TensorFlow in its first
  bundle of the image job's DoFns: loaded means it is in a bundle."""
  def victim(tm):
    tm_pid = flink_taskmanager_pid(tm)
    if not tm_pid:
      return None
    return next((worker for worker in sdk_workers(pool, [tm_pid])
                 if tensorflow_loaded(worker)), None)
  return victim


def test_sdk_workers_killed_while_reading_analysing_and_writing(
    whole_cluster, big_images, big_direct, tmp_path):
  """One job, the SDK worker of a busy TaskManager killed in each of its
  parts. The pool ends the TaskManager the lost worker served (Beam's
  Flink runner would wait for the worker for ever: see
  pipelines/worker_pool.py); Flink restarts the regions it lost, among
  them tf.Transform's analysis, whose new attempt runs a new saved model on
  the other TaskManager's surviving worker (the cached graph must be
  replaced: transforms/core/analysis.py); and the job publishes the
  DirectRunner's dataset."""
  pools = pids_where(flinks_pool)
  assert len(pools) == 1, pools
  kills = disturb_each_part('sdk-workers', 'the SDK worker of a TaskManager',
                            lambda: working_sdk_worker_of(pools[0]),
                            big_images, big_direct, str(tmp_path))
  assert len(kills) == len(TASKMANAGER_KILLS)
  # The worker pool lives on.
  assert pids_where(flinks_pool) == pools


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
