"""benchmarks/timeline.py: a real run, timed by phase. Its timers find
every function they wrap in these versions of Beam, tf.Transform and this
project (a rename would silently drop a phase), the phases follow each
other and add up to the run, and the run itself publishes as usual."""

import json
import os
import re
import subprocess
import sys

import repo
from pipelines import sample_data

ROOT = repo.ROOT


def _timeline(tmp_path, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp_path))
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, 'benchmarks', 'timeline.py'),
       *map(str, args)], cwd=tmp_path, env=env, capture_output=True,
      text=True, timeout=300)


def _rows(stdout):
  """(start, seconds, depth, label) of the timeline's lines."""
  rows = []
  for line in stdout.splitlines():
    m = re.match(r'^ *(-?\d+\.\d\d) +(-?\d+\.\d\d)  ( *)(\S.*)$', line)
    if m and not line.startswith('not timed'):
      rows.append((float(m.group(1)), float(m.group(2)),
                   len(m.group(3)) // 2, m.group(4)))
    if line.startswith('summed over the run'):
      break
  return rows


def test_a_run_timed_by_phase(tmp_path):
  images, out = tmp_path / 'images', tmp_path / 'dataset'
  sample_data.generate(str(images), 8, min_size=(40, 30), max_size=(64, 48))

  run = _timeline(tmp_path, '--stages', '3', '--', '--input', images,
                  '--output', out, '--image_size', '32')

  assert run.returncode == 0, run.stderr[-3000:]
  summary = [line for line in run.stdout.splitlines()
             if line.startswith('{')]
  assert json.loads(summary[-1])['status'] == 'published'
  assert (out / 'manifest.json').exists()
  assert 'not timed' not in run.stdout, run.stdout
  rows = _rows(run.stdout)
  labels = [label for _, _, _, label in rows]
  for label in ('import Apache Beam', 'import TensorFlow',
                'import tf.Transform', 'build the pipeline',
                'tf.Transform: trace the preprocessing function, plan the '
                'analysis', 'run the pipeline',
                'Beam: the pipeline to its proto (pickles every DoFn)',
                'Beam: run the stages', 'publish the dataset',
                'end of the run'):
    assert label in labels, run.stdout
  assert any(re.match(r'\d+ bundles of the runner\'s \d+ stages', label)
             for label in labels), run.stdout
  # The top-level phases follow each other, and with the time in none of
  # them they add up to the whole run.
  top = [r for r in rows if r[2] == 0]
  end = [r[0] for r in top if r[3] == 'end of the run'][0]
  phases = [r for r in top if r[3] not in ('end of the run',) and
            not r[3].startswith('not in any phase')]
  # (The figures are printed rounded to 0.01 s: each is off by up to
  # 0.005.)
  for (start, seconds, _, label), (after, _, _, _) in zip(phases,
                                                          phases[1:]):
    assert start + seconds <= after + 0.0151, (label, run.stdout)
  unaccounted = [r[1] for r in top if r[3].startswith('not in any phase')][0]
  assert 0 <= unaccounted < end
  assert abs(sum(r[1] for r in phases) + unaccounted - end) <= (
      0.005 * (len(phases) + 2) + 1e-9)
  # The summed functions were called and timed.
  summed = run.stdout.split('summed over the run')[1]
  bundle_setups = re.search(r'^ *(\d+) +(\d+\.\d\d)  Beam: set up a stage',
                            summed, re.M)
  assert bundle_setups and int(bundle_setups.group(1)) > 10, summed
  saved = re.search(r'^ *(\d+) .* tf\.Transform: trace and save', summed,
                    re.M)
  assert saved and int(saved.group(1)) == 2, summed
  # The image workers were started before the pipeline was built, and the
  # decoding DoFn used them: it started (and waited for) no pool itself.
  assert re.search(r'^ *0 +0\.00  start local worker processes', summed,
                   re.M), summed
  assert 'the 3 longest stages' in run.stdout


def test_without_the_separator_it_says_how_to_call_it(tmp_path):
  run = _timeline(tmp_path, '--input', 'x')
  assert run.returncode == 2
  assert run.stderr.startswith('usage: python benchmarks/timeline.py')
