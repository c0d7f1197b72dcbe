"""Real processes against one output: two runs started together (exactly
one publishes), a run waiting for another, and SIGTERM/SIGINT mid-run
(status cancelled, nothing published, the previous dataset intact)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines import outcome
from pipelines import validate
import repo

ROOT = repo.ROOT
TEXT = ['--modality', 'text', '--direct_running_mode', 'in_memory',
        '--direct_num_workers', '1']


def _docs(path, n=3000):
  lines = ['text,label']
  lines += [f'word{i % 7} word{i % 11} common {i},{("a", "b")[i % 2]}'
            for i in range(n)]
  path.write_text('\n'.join(lines) + '\n')


def _command(src, out, *extra):
  return [sys.executable, '-m', 'pipelines.preprocess', '--input', str(src),
          '--output', str(out)] + TEXT + list(extra)


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def _summary(stdout: str) -> dict:
  return json.loads(stdout.strip().splitlines()[-1])


def _start(src, out, log_path, *extra):
  log = open(log_path, 'w+', encoding='utf-8')  # pylint: disable=consider-using-with
  proc = subprocess.Popen(_command(src, out, *extra), cwd=ROOT, env=_env(),
                          stdout=subprocess.PIPE, stderr=log, text=True)
  return proc, log


def test_two_runs_started_together_exactly_one_publishes(tmp_path):
  src = tmp_path / 'docs.csv'
  _docs(src)
  out = tmp_path / 'out'
  procs = [_start(src, out, tmp_path / f'log{i}') for i in range(2)]
  results = []
  for proc, log in procs:
    stdout, _ = proc.communicate(timeout=600)
    log.seek(0)
    results.append((proc.returncode, _summary(stdout), log.read()))
    log.close()
  codes = sorted(code for code, _, _ in results)
  assert codes == [outcome.EXIT_OK, outcome.EXIT_USAGE], results
  [(_, won, _)] = [r for r in results if r[0] == outcome.EXIT_OK]
  [(_, lost, err)] = [r for r in results if r[0] == outcome.EXIT_USAGE]
  assert won['status'] == 'published' and not lost['published']
  assert lost['status'] == 'bad_invocation'
  # One sentence naming the run that holds the output.
  assert f'being written by run {won["run_id"]}' in lost['error']
  errors = [line for line in err.splitlines() if line.startswith('error:')]
  assert len(errors) == 1 and won['run_id'] in errors[0]
  manifest = json.loads((out / 'manifest.json').read_text())
  assert manifest['run_id'] == won['run_id']
  assert sorted(p.name for p in out.glob('run-*')) == [manifest['data_dir']]
  assert not (out / '.lease.json').exists()
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND


def test_a_second_run_can_wait_for_the_first(tmp_path):
  src = tmp_path / 'docs.csv'
  _docs(src)
  out = tmp_path / 'out'
  first, first_log = _start(src, out, tmp_path / 'first.log')
  # The second starts once the first holds the lease.
  deadline = time.time() + 120
  while not (out / '.lease.json').exists() and time.time() < deadline:
    time.sleep(0.1)
  second = subprocess.run(
      _command(src, out, '--wait_for_output', '600', '--overwrite'),
      cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600,
      check=False)
  first_out, _ = first.communicate(timeout=600)
  first_log.close()
  assert first.returncode == 0 and second.returncode == 0, second.stderr
  a, b = _summary(first_out), _summary(second.stdout)
  assert 'waiting up to 600 s for run ' + a['run_id'] in second.stderr
  manifest = json.loads((out / 'manifest.json').read_text())
  # The second published after the first, replacing it.
  assert manifest['run_id'] == b['run_id'] != a['run_id']
  assert b['fingerprint'] == a['fingerprint']
  assert sorted(p.name for p in out.glob('run-*')) == [manifest['data_dir']]


def _running(log, proc, timeout=180):
  """Waits until the run has built its pipeline and is running it."""
  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    log.seek(0)
    if 'running it' in log.read():
      return
    time.sleep(0.1)
  raise AssertionError('the run ended or never started running')


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_cancels_and_keeps_the_previous_dataset(
    tmp_path, signum):
  src = tmp_path / 'docs.csv'
  _docs(src, n=60000)  # long enough to be stopped while it runs
  out = tmp_path / 'out'
  small = tmp_path / 'small.csv'
  _docs(small, n=200)
  before = subprocess.run(_command(small, out), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600,
                          check=False)
  assert before.returncode == 0, before.stderr
  previous = json.loads((out / 'manifest.json').read_text())
  proc, log = _start(src, out, tmp_path / 'run.log', '--overwrite')
  try:
    _running(log, proc)
    time.sleep(1.0)
    assert proc.poll() is None, 'the run ended before the signal'
    proc.send_signal(signum)
    stdout, _ = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  log.seek(0)
  err = log.read()
  log.close()
  assert proc.returncode == 128 + signum, err[-3000:]
  summary = _summary(stdout)
  assert summary['status'] == 'cancelled' and not summary['published']
  assert summary['exit_code'] == 128 + signum
  name = signal.Signals(signum).name
  assert summary['error'].startswith(f'cancelled by {name}')
  assert f'error: cancelled by {name}' in err
  # Nothing of the cancelled run is left; the previous dataset is whole.
  assert json.loads((out / 'manifest.json').read_text()) == previous
  assert sorted(p.name for p in out.glob('run-*')) == [previous['data_dir']]
  assert not (out / '.lease.json').exists()
  assert validate.main(['--output', str(out)]) == validate.EXIT_SOUND
