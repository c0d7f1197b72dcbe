"""What the engines' tests share: the clusters' addresses, the sample runs'
flags, running a command as a user would, and the facts of a dataset that
must be equal whatever the runner (fixtures: tests/engines/conftest.py)."""

import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from pipelines.worker_pool import pid_listening_on
from repo import ROOT

FLINK_SCRIPT = os.path.join(ROOT, 'scripts', 'flink_cluster.sh')
SPARK_SCRIPT = os.path.join(ROOT, 'scripts', 'spark_cluster.sh')
FLINK_REST = 'http://localhost:8081'
FLINK_JOB_ENDPOINT = 'localhost:8099'
FLINK_WORKER_POOL = 'localhost:8096'
SPARK_MASTER_UI = 'http://localhost:8080'
SPARK_JOB_ENDPOINT = 'localhost:8199'
SPARK_WORKER_POOL = 'localhost:8196'

# The flags of each modality's sample run, on every runner.
FLAGS = {
    'image': ['--modality', 'image'],
    'text': ['--modality', 'text', '--vocab_size', '500', '--max_tokens',
             '16'],
    'sensor': ['--modality', 'sensor', '--timestamp_column', 'time',
               '--entity_column', 'device', '--label_column', 'activity',
               '--window_length', '40', '--window_stride', '20'],
}


def env():
  """The environment of a command run like a user's: the venv's Python
  first on PATH."""
  out = dict(os.environ)
  out['PATH'] = os.path.dirname(sys.executable) + os.pathsep + out['PATH']
  out.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  return out


def get_json(url, timeout=10):
  with urllib.request.urlopen(url, timeout=timeout) as response:
    return json.loads(response.read().decode())


def summary(proc):
  """The JSON summary, the last line a run prints on stdout."""
  lines = proc.stdout.strip().splitlines()
  assert lines, proc.stderr[-3000:]
  return json.loads(lines[-1])


def run(argv, timeout=900, environment=None, **kwargs):
  """Runs a command as a user would (in `environment`, default env())."""
  return subprocess.run(argv, cwd=ROOT,
                        env=env() if environment is None else environment,
                        capture_output=True, text=True, timeout=timeout,
                        check=False, **kwargs)


def preprocess_argv(modality, inputs, output):
  return (FLAGS[modality] + ['--input', inputs[modality], '--output',
                             str(output)])


def preprocess_ok(argv, environment=None, timeout=900):
  """Runs `python -m pipelines.preprocess argv` as a user would; asserts it
  exits 0; (its JSON summary, its stderr)."""
  proc = run([sys.executable, '-m', 'pipelines.preprocess'] + list(argv),
             timeout=timeout, environment=environment)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return summary(proc), proc.stderr


def dataset_facts(out, read_from=None):
  """What must be equal whatever the runner: the fingerprint, the counts
  of the manifest, and the dead letters. read_from=(remote, local): the
  input was read at `remote`; dead letters name it as `local` (a dead
  letter names its input where it was read)."""
  with open(os.path.join(out, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  splits = {name: {k: v for k, v in split.items()
                   if k not in ('shards', 'fingerprint')}
            for name, split in manifest['splits'].items()}
  letters = []
  for path in manifest['dead_letter']['files']:
    with open(os.path.join(out, path), encoding='utf-8') as f:
      letters += [json.loads(line) for line in f if line.strip()]
  return {
      'fingerprint': manifest['fingerprint'],
      'split_fingerprints': {n: s['fingerprint']
                             for n, s in manifest['splits'].items()},
      'totals': manifest['totals'],
      'splits': splits,
      'labels': manifest['labels'],
      # Sensor data: each entity's time shape (gaps, repeats, windows).
      'time': (manifest.get('sensor') or {}).get('time'),
      'dead_letters': sorted(
          json.dumps(d, sort_keys=True) if read_from is None else
          json.dumps(d, sort_keys=True).replace(*read_from)
          for d in letters),
      'run_folders': sorted(os.path.basename(p) for p in
                            glob.glob(os.path.join(out, 'run-*'))),
  }


def assert_remote_input_reads_as_on_disk(modality, remote, folder, name,
                                          remote_env, local_env, out):
  """The sample in `folder` (uploaded to `remote`; `name` the input below
  it, or '') run from `remote` in remote_env and from `folder` in
  local_env, both into local folders below `out`: the same dataset."""
  suffix = f'/{name}' if name else ''
  outs = {}
  for where, source, environment in (('remote', remote, remote_env),
                                     ('disk', str(folder), local_env)):
    outs[where] = os.path.join(out, where)
    result, _ = preprocess_ok(FLAGS[modality] + [
        '--input', source + suffix, '--output', outs[where]], environment)
    assert result['status'] == 'published'
  assert_same_dataset(dataset_facts(outs['remote'], (remote, str(folder))),
                      dataset_facts(outs['disk']))


def assert_same_dataset(got, want):
  """An engine's dataset against the DirectRunner's."""
  assert got['fingerprint'] == want['fingerprint']
  assert got['split_fingerprints'] == want['split_fingerprints']
  assert got['totals'] == want['totals']
  assert got['splits'] == want['splits']
  assert got['labels'] == want['labels']
  assert got['time'] == want['time']
  assert got['dead_letters'] == want['dead_letters']
  # One publish: one run folder, the one the manifest names.
  assert len(got['run_folders']) == 1


# --- Flink: the cluster's jobs and processes (tests/engines/test_flink*) ---

FLINK_TASKMANAGERS = 2
_TERMINAL = ('FINISHED', 'FAILED', 'CANCELED')


def flink_jobs():
  """{jid: job overview} of every job the JobManager knows."""
  return {j['jid']: j
          for j in get_json(f'{FLINK_REST}/jobs/overview')['jobs']}


def flink_active_jobs():
  """The jids of jobs not yet FINISHED, FAILED or CANCELED."""
  return {jid for jid, j in flink_jobs().items()
          if j['state'] not in _TERMINAL}


def flink_taskmanager_ids():
  return {t['id']
          for t in get_json(f'{FLINK_REST}/taskmanagers')['taskmanagers']}


def wait_until(check, timeout, interval=1.0, what='the condition'):
  """Polls check() until it returns something true; returns that, or
  raises AssertionError naming `what` after `timeout` seconds."""
  deadline = time.monotonic() + timeout
  while True:
    got = check()
    if got:
      return got
    if time.monotonic() > deadline:
      raise AssertionError(f'timed out after {timeout:.0f} s waiting for '
                           f'{what}')
    time.sleep(interval)


def pids_where(predicate):
  """The pids of this machine's processes whose /proc/PID/cmdline (NULs
  made spaces) and parent pid satisfy predicate(cmdline, ppid)."""
  out = []
  for name in os.listdir('/proc'):
    if not name.isdigit():
      continue
    try:
      with open(f'/proc/{name}/cmdline', 'rb') as f:
        cmdline = f.read().replace(b'\0', b' ').decode(errors='replace')
      with open(f'/proc/{name}/stat', encoding='utf-8') as f:
        # The field after the parenthesised command name, which may hold
        # spaces: state, then the parent's pid.
        ppid = int(f.read().rsplit(')', 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
      continue  # exited meanwhile, or a kernel thread
    if predicate(cmdline, ppid):
      out.append(int(name))
  return out


def cmdline(pid):
  """Process pid's command line (NULs made spaces); '' once it is gone."""
  try:
    with open(f'/proc/{pid}/cmdline', 'rb') as f:
      return f.read().replace(b'\0', b' ').decode(errors='replace')
  except OSError:
    return ''


def tensorflow_loaded(pid):
  """Whether process pid has TensorFlow's library loaded."""
  try:
    with open(f'/proc/{pid}/maps', encoding='utf-8',
              errors='replace') as f:
      return 'libtensorflow_framework' in f.read()
  except OSError:
    return False


# An SDK worker's command line names the control endpoint of the task
# manager (Flink TaskManager, Spark executor) it serves
# (pipelines/worker_pool.py).
_CONTROL_PORT = re.compile(r"SdkHarness\('[^']*:(\d+)'")


def sdk_workers(pool, owners):
  """{pid: owner pid} of the live SDK workers the worker pool `pool`
  started that serve one of `owners` (task manager pids): the one that
  listens on the control endpoint in the worker's command line."""
  workers = {}
  for pid in pids_where(lambda cmd, ppid: ppid == pool and
                        'SdkHarness' in cmd):
    match = _CONTROL_PORT.search(cmdline(pid))
    owner = match and pid_listening_on(int(match.group(1)), owners)
    if owner:
      workers[pid] = owner
  return workers


def flink_taskmanager_pid(tm_id):
  """The pid of the TaskManager JVM whose Flink id is `tm_id`: Flink names
  a TaskManager HOST:RPC_PORT-SUFFIX, so it is the TaskManagerRunner
  process listening on that port."""
  port = int(tm_id.rsplit('-', 1)[0].rsplit(':', 1)[1])
  jvms = pids_where(lambda cmd, _: 'TaskManagerRunner' in cmd)
  return pid_listening_on(port, jvms)


def snapshot(folder):
  """{relative path: sha256} of every file in a dataset folder, but the
  output's lease (a run takes and gives it back; it is no dataset file)."""
  files = {}
  for parent, _, names in os.walk(folder):
    for name in names:
      if name.startswith('.lease.json'):
        continue
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        files[os.path.relpath(path, folder)] = hashlib.sha256(
            f.read()).hexdigest()
  return files
