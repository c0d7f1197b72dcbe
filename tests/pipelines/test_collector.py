"""The command line pauses Python's garbage collector while it imports and
builds, and runs the pipeline with the start's objects frozen and a larger
young-generation threshold (pipelines/collector.py); a program that imports
the pipeline modules keeps its collector as it was."""

import gc
import json
import os
import subprocess
import sys

import repo
from pipelines import collector
from pipelines import sample_data

# Runs `python -m MODULE ARGS` as the command line does (as __main__),
# noting the collector's state at every collection and at the
# end (the command leaves by os._exit, so that is where the state is
# printed).
_SCRIPT = r'''
import gc, json, os, runpy, sys
seen = []
gc.callbacks.append(lambda phase, info: phase == 'start' and seen.append(
    ('apache_beam' in sys.modules, gc.get_freeze_count())))
real_exit = os._exit
def leave(code):
  sys.stdout.flush()
  os.write(1, ('\nCOLLECTOR ' + json.dumps({
      'code': code, 'enabled': gc.isenabled(),
      'frozen': gc.get_freeze_count(), 'threshold': gc.get_threshold(),
      'collections': seen}) + '\n').encode())
  real_exit(code)
os._exit = leave
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name='__main__')
'''


def _command(tmp_path, module, *args):
  """(its stdout lines before the collector's state, that state)."""
  env = dict(os.environ, PYTHONPATH=repo.ROOT, TMPDIR=str(tmp_path))
  run = subprocess.run([sys.executable, '-c', _SCRIPT, module, *args],
                       cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  lines = run.stdout.splitlines()
  assert lines[-1].startswith('COLLECTOR ')
  return lines[:-1], json.loads(lines[-1].split(' ', 1)[1])


def test_the_commands_collect_only_after_freezing_the_start(tmp_path):
  images, out = tmp_path / 'images', tmp_path / 'dataset'
  sample_data.generate(str(images), 12, min_size=(40, 30), max_size=(64, 48))
  lines, state = _command(tmp_path, 'pipelines.preprocess', '--input',
                          str(images), '--output', str(out), '--image_size',
                          '32', '--local_processes', '0')
  assert json.loads(lines[-2])['status'] == 'published'
  _check_state(state)
  lines, state = _command(tmp_path, 'pipelines.validate', '--output',
                          str(out))
  assert any(line.startswith('validation: PASS') for line in lines), lines
  _check_state(state)


def _check_state(state):
  assert state['enabled'] and state['code'] == 0
  # Beam's, TensorFlow's and tf.Transform's objects, frozen.
  assert state['frozen'] > 200000
  assert state['threshold'][0] == collector.RUN_THRESHOLD
  # From Beam's import (after the pause) to the freeze, no collection;
  # collections while the pipeline runs (it makes garbage).
  later = [frozen for beam, frozen in state['collections'] if beam]
  assert later, 'the collector never ran during the run'
  assert all(frozen > 0 for frozen in later), state['collections']


def test_pause_and_resume_and_a_resume_without_pause(monkeypatch):
  before = gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()
  monkeypatch.setattr(collector, '_paused', False)
  try:
    collector.resume()  # not paused: changes nothing
    assert (gc.get_threshold(), gc.isenabled(),
            gc.get_freeze_count()) == before
    collector.pause()
    assert not gc.isenabled()
    collector.resume()
    assert gc.isenabled()
    assert gc.get_threshold()[0] == collector.RUN_THRESHOLD
    assert gc.get_threshold()[1:] == before[0][1:]
    assert gc.get_freeze_count() > 0
    collector.resume()  # a second resume changes nothing either
    assert gc.get_threshold()[0] == collector.RUN_THRESHOLD
  finally:
    gc.unfreeze()
    gc.set_threshold(*before[0])
    if before[1]:
      gc.enable()
    else:
      gc.disable()


def test_importing_the_command_module_leaves_the_collector_alone():
  # A fresh interpreter: this test process has imported the module already.
  probe = ('import gc; t = gc.get_threshold(); import pipelines.preprocess; '
           'print(gc.isenabled(), gc.get_freeze_count(), '
           'gc.get_threshold() == t)')
  env = dict(os.environ, PYTHONPATH=repo.ROOT)
  run = subprocess.run([sys.executable, '-c', probe], env=env,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.split() == ['True', '0', 'True']
