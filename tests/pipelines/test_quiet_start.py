"""A default run shows none of TensorFlow's native start-up lines (the absl
banner, cuInit, oneDNN, TensorRT, computation placer) on stderr, only its
own; the filter behind that (pipelines/quiet.py) also covers the processes
a command starts, keeps every other line, and --verbose turns it off.
Beam's SDK workers' two expected start-up warnings are dropped too."""

import json
import logging
import os
import subprocess
import sys

import repo
from pipelines import sample_data

ROOT = repo.ROOT
NOISE = ('cuInit', 'oneDNN', 'TensorRT', 'absl::InitializeLog',
         'computation placer')


def _env(tmp_path):
  """The caller's environment without the settings a user could have made
  to quiet TensorFlow: the run must be quiet on its own."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CPP_MIN_LOG_LEVEL', 'GRPC_VERBOSITY')}
  env.update(PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
  return env


def _run(tmp_path, module, *args):
  return subprocess.run([sys.executable, '-m', module, *map(str, args)],
                        cwd=tmp_path, env=_env(tmp_path),
                        capture_output=True, text=True, timeout=300)


def test_a_default_run_and_its_validation_are_quiet(tmp_path):
  images, out = tmp_path / 'images', tmp_path / 'dataset'
  sample_data.generate(str(images), 6, min_size=(40, 30), max_size=(64, 48))

  run = _run(tmp_path, 'pipelines.preprocess', '--input', images,
             '--output', out, '--image_size', '32')
  assert run.returncode == 0, run.stderr[-3000:]
  assert json.loads(run.stdout.splitlines()[-1])['status'] == 'published'
  assert 'published 6 records' in run.stderr  # our own lines are kept
  for word in NOISE:
    assert word not in run.stderr, run.stderr

  check = _run(tmp_path, 'pipelines.validate', '--output', out)
  assert check.returncode == 0, check.stderr[-3000:]
  for word in NOISE:
    assert word not in check.stderr, check.stderr


# What a command's process writes to file descriptor 2, as TensorFlow's C++
# side does, and what a child process (a Beam worker) writes to it.
_SCRIPT = r'''
import os, subprocess, sys
from pipelines import quiet
quiet.start(sys.argv[1:])
os.write(2, b"WARNING: All log messages before absl::InitializeLog() is "
            b"called are written to STDERR\n"
            b"I0000 00:00:1795408479.843572   32655 cudart_stub.cc:31] "
            b"Could not find cuda drivers on your machine\n"
            b"W0000 00:00:1795408483.106930   32655 op_kernel.cc:1] "
            b"a real native warning\n")
subprocess.run([sys.executable, "-c", (
    "import os, sys\n"
    "os.write(2, b'E0000 00:00:1795408483.106930   9 cuda_platform.cc:52] "
    "failed call to cuInit: INTERNAL: CUDA error\\n')\n"
    "print('worker line; level', os.environ.get('TF_CPP_MIN_LOG_LEVEL'), "
    "file=sys.stderr)\n")], check=True)
print("own line", file=sys.stderr)
print("stdout line")
quiet.finish()
'''


def _filtered(tmp_path, *argv):
  proc = subprocess.run([sys.executable, '-c', _SCRIPT, *argv],
                        cwd=tmp_path, env=_env(tmp_path),
                        capture_output=True, text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == 'stdout line\n'
  return proc.stderr.splitlines()


def test_the_filter_covers_child_processes_and_keeps_other_lines(tmp_path):
  lines = _filtered(tmp_path)
  assert sorted(lines) == sorted([
      'W0000 00:00:1795408483.106930   32655 op_kernel.cc:1] a real '
      'native warning', 'worker line; level 2', 'own line'])


def test_verbose_lets_the_native_lines_through(tmp_path):
  text = '\n'.join(_filtered(tmp_path, '--verbose'))
  for word in ('absl::InitializeLog', 'cuda drivers', 'cuInit',
               'a real native warning', 'own line', 'worker line; level None'):
    assert word in text, text


def test_workers_start_up_notices_are_dropped_and_their_warnings_kept():
  from pipelines import outcome  # pylint: disable=import-outside-toplevel
  outcome.configure_logging()
  logger = logging.getLogger(
      'apache_beam.runners.portability.local_job_service')
  kept = []
  handler = logging.Handler(logging.WARNING)
  handler.emit = kept.append
  logger.addHandler(handler)
  try:
    for message in ('No semi_persistent_directory found:  User registered '
                    'objects', "Discarding unparseable args: ['--seed=42']",
                    'a real worker warning'):
      logger.warning('Worker: %s', f'severity: WARN message: "{message}"')
  finally:
    logger.removeHandler(handler)
  assert [r.getMessage() for r in kept] == [
      'Worker: severity: WARN message: "a real worker warning"']
